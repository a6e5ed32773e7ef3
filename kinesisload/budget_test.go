package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// waitQueued waits until b has n waiters.
func waitQueued(t *testing.T, b *budget, n int) {
	t.Helper()
	for i := 0; ; i++ {
		b.mu.Lock()
		got := b.waiters.Len()
		b.mu.Unlock()
		if got == n {
			return
		}
		if i > 10000 {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A request that does not fit holds back later ones that would: the
// first to wait is the first served.
func TestBudgetServesInOrder(t *testing.T) {
	ctx := context.Background()
	b := newBudget(10)
	if _, err := b.acquire(ctx, 6); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	go func() {
		n, _ := b.acquire(ctx, 9)
		order <- "big"
		b.release(n)
	}()
	waitQueued(t, b, 1)
	go func() {
		n, _ := b.acquire(ctx, 2) // fits now, but came later
		order <- "small"
		b.release(n)
	}()
	waitQueued(t, b, 2)
	select {
	case w := <-order:
		t.Fatalf("%s served while the first waiter still waits", w)
	default:
	}
	b.release(6)
	if first, second := <-order, <-order; first != "big" || second != "small" {
		t.Errorf("served %s then %s, want big then small", first, second)
	}
	if b.highWater() != 9 || b.inUse() != 0 {
		t.Errorf("high water %d, in use %d; want 9 and 0", b.highWater(), b.inUse())
	}
}

// A request larger than the budget takes all of it, alone.
func TestBudgetLargerThanItselfProceedsAlone(t *testing.T) {
	ctx := context.Background()
	b := newBudget(10)
	small, _ := b.acquire(ctx, 3)
	got := make(chan int64, 1)
	go func() {
		n, _ := b.acquire(ctx, 25)
		got <- n
	}()
	waitQueued(t, b, 1)
	b.release(small)
	n := <-got
	if n != 10 {
		t.Fatalf("a request of 25 from a budget of 10 took %d, want 10", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.acquire(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("acquire while the big request holds everything = %v, want to wait", err)
	}
	b.release(n)
	if b.highWater() != 10 {
		t.Errorf("high water %d, want 10", b.highWater())
	}
}

// A waiter whose context ends leaves the queue, and those behind it go on.
func TestBudgetCancelledWaiterLeavesTheQueue(t *testing.T) {
	ctx := context.Background()
	b := newBudget(10)
	held, _ := b.acquire(ctx, 5)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.acquire(cctx, 10)
		errc <- err
	}()
	waitQueued(t, b, 1)
	got := make(chan int64, 1)
	go func() {
		n, _ := b.acquire(ctx, 5) // fits, but queued behind the big one
		got <- n
	}()
	waitQueued(t, b, 2)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire = %v", err)
	}
	if n := <-got; n != 5 {
		t.Fatalf("took %d, want 5", n)
	}
	b.release(5)
	b.release(held)
	if b.inUse() != 0 {
		t.Errorf("in use %d after every release, want 0", b.inUse())
	}
}

// concurrencySink counts the Deliver calls in progress and the most at
// once, and records what it got.
type concurrencySink struct {
	*recorder
	now, most atomic.Int64
	pause     time.Duration
}

func (s *concurrencySink) Deliver(ctx context.Context, b Batch) error {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(s.pause) // gives other shards the chance to overlap; nothing asserts a time
	return s.recorder.Deliver(ctx, b)
}

// Many shards with a backlog and a slow Sink: the bytes the Loader holds
// never exceed MaxBufferedBytes, the Deliver calls in progress never
// exceed MaxConcurrentDeliveries, and every shard gets through its backlog
// (none starves waiting for the budget).
func TestLoaderBoundsBufferedBytesAndDeliveries(t *testing.T) {
	const shards, perShard, size = 8, 30, 1000
	s := newFakeStream(t, shards)
	var want []string
	for i, sh := range s.openShards() {
		for k := range perShard {
			d := fmt.Sprintf("%d-%03d-%s", i, k, string(make([]byte, size)))
			s.put(sh, d)
			want = append(want, d)
		}
	}
	// A page of 5 records costs about 5 * (1,000 + 56 + 1 + 192) bytes:
	// room for three pages.
	const page = 5 * (size + 300)
	budget := int64(3 * page)
	sink := &concurrencySink{recorder: newRecorder(), pause: 2 * time.Millisecond}
	cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), RecordsPerCall: 5,
		MaxBufferedBytes: budget, MaxConcurrentDeliveries: 2}
	tune := withTune(func(rc *readerConfig) {
		rc.minInterval = time.Millisecond
		rc.readBytesPerSecond = -1
		rc.maxPage = page
	})
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), tune)
	sink.waitFor(t, want...)
	r.stop(t)
	if high := r.l.buffered.highWater(); high > budget || high == 0 {
		t.Errorf("buffered bytes peaked at %d, want 1 to %d", high, budget)
	}
	if used := r.l.buffered.inUse(); used != 0 {
		t.Errorf("%d bytes still counted after Run returned, want 0", used)
	}
	if most := sink.most.Load(); most > 2 {
		t.Errorf("%d Deliver calls at once, want at most 2", most)
	}
	if high := r.l.deliveries.highWater(); high > 2 {
		t.Errorf("delivery slots peaked at %d, want at most 2", high)
	}
}

// A budget smaller than one page still reads every shard, one page at a
// time: the page that does not fit is held alone.
func TestLoaderReadsWithABudgetSmallerThanAPage(t *testing.T) {
	s := newFakeStream(t, 3)
	var want []string
	for i, sh := range s.openShards() {
		for k := range 10 {
			d := fmt.Sprintf("%d-%d", i, k)
			s.put(sh, d)
			want = append(want, d)
		}
	}
	rec := newRecorder()
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 3, MaxBufferedBytes: 1}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	rec.waitFor(t, want...)
	r.stop(t)
	// One page of 3 records: data, key, sequence number and overhead.
	onePage := int64(3 * (len("0-0") + len("k") + 56 + recordOverhead))
	if high := r.l.buffered.highWater(); high <= 1 || high > onePage {
		t.Errorf("buffered bytes peaked at %d, want one page alone (2 to %d)", high, onePage)
	}
}

func TestConfigRefusesNegativeBounds(t *testing.T) {
	for _, c := range []Config{
		{Stream: "s", Sink: newRecorder(), MaxBufferedBytes: -1},
		{Stream: "s", Sink: newRecorder(), MaxConcurrentDeliveries: -1},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
}

// A GetRecords answer with no output and no error (an odd answer, tried
// again) gives back the page's reservation: each one kept it, so that
// after about a dozen (the default MaxBufferedBytes) no reader could
// reserve a page again, and the Loader ran on silently, reading nothing.
// Found by a review.
func TestAnOddGetRecordsAnswerGivesItsReservationBack(t *testing.T) {
	s := newFakeStream(t, 1)
	odd := &oddClient{Client: s.f, records: func(n int, o *kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput {
		if n <= 12 {
			return nil
		}
		return o
	}}
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()},
		WithClient(odd), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih), withTune(func(rc *readerConfig) {
			rc.minInterval = time.Millisecond
			rc.readBytesPerSecond = -1
			rc.retry = backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}
		}))
	ih.wait(t)
	s.put(shard0, "a")
	rec.waitFor(t, "a")
	r.stop(t)
	if n := r.l.buffered.inUse(); n != 0 {
		t.Errorf("%d bytes of the buffer budget in use after Run returned, want none", n)
	}
}

// A reader whose confirmation of a shard's end (ListShards, asked when the
// last page has no ChildShards, as kinesalite answers) ends with the
// session (a Pause) gives back the page's share of the budget: it kept it
// for the Loader's life, and with a budget of one page nothing was read
// after Resume, silently. Found by a review.
func TestAPauseWhileAnEndIsConfirmedGivesThePageBack(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, strings.Repeat("x", 900_000))
	s.split(shard0)
	odd := &oddClient{Client: s.f, records: func(_ int, o *kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput {
		if o.NextShardIterator != nil {
			return o
		}
		c := *o
		c.ChildShards = nil
		return &c
	}}
	holdReads := make(chan struct{})
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard0, Nth: 1, Block: holdReads})
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), MaxBufferedBytes: 1 << 20},
		WithClient(odd), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih))
	ih.wait(t)
	entered := make(chan struct{}, 16)
	removeList := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Block: make(chan struct{}), Entered: entered})
	close(holdReads)
	select {
	case <-entered: // the reader confirms the end, holding the page
	case <-time.After(20 * time.Second):
		t.Fatal("no ListShards to confirm the end")
	}
	r.l.Pause()
	for i := 0; r.l.buffered.inUse() != 0; i++ {
		if i > 2000 {
			t.Fatalf("paused, %d bytes of the buffer budget are still in use, want none", r.l.buffered.inUse())
		}
		time.Sleep(10 * time.Millisecond)
	}
	removeList()
	r.l.Resume()
	rec.waitFor(t, strings.Repeat("x", 900_000))
}
