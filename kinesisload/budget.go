package kinesisload

import (
	"container/list"
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// budget is a weighted semaphore shared by every shard of a Loader: the
// bytes of records it may hold (Config.MaxBufferedBytes), or the Deliver
// calls it may make at once (Config.MaxConcurrentDeliveries).
//
// It is fair: waiters are served in the order they came, and a request
// that does not fit holds back every later one, even a smaller one that
// would fit, so a shard that waits is never overtaken for ever by others
// that ask again and again. A request larger than the whole budget is cut
// to the budget: it waits until nothing else is held and then proceeds
// alone, so one page larger than the budget cannot stop the Loader.
//
// A nil *budget is unlimited.
type budget struct {
	size int64

	mu      sync.Mutex
	used    int64
	high    int64     // the most ever held at once
	waiters list.List // of *budgetWaiter, in arrival order
	// parked is the part of used held by pages that wait in open windows
	// (window.go): given back only once their window is delivered, so a
	// waiter that cannot fit beside them waits until a window closes.
	// starve is closed (and set to nil) when that happens: see starved.
	parked int64
	starve chan struct{}
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when granted
}

// newBudget returns a budget of size units.
func newBudget(size int64) *budget {
	return &budget{size: size}
}

// acquire waits until n units are free and no earlier waiter is left, and
// takes them. It returns what it took, which is n cut to the budget's size,
// and which the caller gives back with release. It returns ctx.Err() and
// takes nothing if ctx ends first.
func (b *budget) acquire(ctx context.Context, n int64) (int64, error) {
	if b == nil || n <= 0 {
		return 0, ctx.Err()
	}
	n = min(n, b.size)
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.used+n <= b.size {
		b.take(n)
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.signalStarved()
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted meanwhile: give it back.
			b.used -= n
		default:
			b.waiters.Remove(e)
		}
		// The head may have changed, or units been freed.
		b.grant()
		b.signalStarved()
		b.mu.Unlock()
		return 0, ctx.Err()
	}
}

// force takes n units without waiting, beyond the budget if need be: for
// a page that came back larger than what was reserved for it, which is
// already in memory.
func (b *budget) force(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.take(n)
	b.mu.Unlock()
}

// release gives back n units taken by acquire or force.
func (b *budget) release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.signalStarved()
	b.mu.Unlock()
}

// park counts n units already held as held by pages in an open window;
// unpark counts them back as held by pages on their way out (delivered
// soon): see starved.
func (b *budget) park(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.parked += n
	b.signalStarved()
	b.mu.Unlock()
}

func (b *budget) unpark(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.parked -= n
	b.mu.Unlock()
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// starved returns a channel that is closed once the first waiter cannot
// be granted unless pages parked in open windows are given back: what
// the rest of the budget holds (reservations of calls in flight, pages
// being delivered) is given back by itself, but a window waits for its
// bound or its wait, and the reader that would fill it may be the waiter.
// Windows then close early rather than stall reading. It is already
// closed when that is the case now; nil for an unlimited budget.
func (b *budget) starved() <-chan struct{} {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.starvedLocked() {
		return closedChan
	}
	if b.starve == nil {
		b.starve = make(chan struct{})
	}
	return b.starve
}

// isStarved reports whether the first waiter needs parked units now.
func (b *budget) isStarved() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.starvedLocked()
}

func (b *budget) starvedLocked() bool {
	e := b.waiters.Front()
	return e != nil && b.parked > 0 && b.parked+e.Value.(*budgetWaiter).n > b.size
}

// signalStarved closes starve once starvedLocked holds. Called with b.mu
// held after every change of the waiters or of parked.
func (b *budget) signalStarved() {
	if b.starve != nil && b.starvedLocked() {
		close(b.starve)
		b.starve = nil
	}
}

// take records n more units held. Called with b.mu held.
func (b *budget) take(n int64) {
	b.used += n
	b.high = max(b.high, b.used)
}

// grant serves the waiters at the head of the queue that now fit. Called
// with b.mu held.
func (b *budget) grant() {
	for e := b.waiters.Front(); e != nil; e = b.waiters.Front() {
		w := e.Value.(*budgetWaiter)
		if b.used+w.n > b.size {
			return
		}
		b.take(w.n)
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// highWater returns the most units ever held at once.
func (b *budget) highWater() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.high
}

// inUse returns the units held now.
func (b *budget) inUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Sizes that the buffer budget counts.
const (
	// maxPageBytes is the most record data (and partition keys) one
	// GetRecords call returns: Kinesis caps a response at 10 MiB.
	maxPageBytes = 10 << 20
	// recordOverhead is what a record costs in memory beside its data and
	// key: its sequence number, the SDK's struct and the Batch's copy.
	recordOverhead = 192
)

// pageCost is what a page's records count against the buffer budget.
func pageCost(rs []types.Record) int64 {
	var n int64
	for i := range rs {
		n += int64(len(rs[i].Data)+len(aws.ToString(rs[i].PartitionKey))+len(aws.ToString(rs[i].SequenceNumber))) + recordOverhead
	}
	return n
}
