package dynamo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// lease is one shard's lease.
type lease struct {
	m        *member
	shard    string
	epoch    uint64
	progress kinesisload.ShardProgress

	once     sync.Once
	lost     chan struct{}
	handOnce sync.Once
	handoff  chan struct{}

	// acquired says why the lease was granted.
	acquired kinesisload.AcquireReason
	// meter smooths the bytes the Loader observed into the shard's rate.
	meter kinesisload.RateMeter

	mu       sync.Mutex
	why      kinesisload.LostReason
	reason   string
	released bool

	// wmu serialises the lease's writes and guards what follows.
	wmu sync.Mutex
	// cache is the item as this lease last wrote or read it: a write is
	// conditional on its ver, and reads it again only when that fails.
	cache *shardItem
	// pending is the coalesced update not written yet (dirty).
	pending   kinesisload.ShardProgress
	dirty     bool
	lastWrite time.Time
}

var (
	_ kinesisload.Lease        = (*lease)(nil)
	_ kinesisload.LoadObserver = (*lease)(nil)
)

// Observe implements [kinesisload.LoadObserver]: the bytes feed the
// shard's rate, published in the host's heartbeat when balancing by
// throughput.
func (l *lease) Observe(bytes int64) { l.meter.Observe(bytes) }

func (l *lease) Shard() string                       { return l.shard }
func (l *lease) Epoch() uint64                       { return l.epoch }
func (l *lease) Progress() kinesisload.ShardProgress { return l.progress }
func (l *lease) Lost() <-chan struct{}               { return l.lost }
func (l *lease) Handoff() <-chan struct{}            { return l.handoff }
func (l *lease) Acquired() kinesisload.AcquireReason { return l.acquired }

// Err implements [kinesisload.Lease]: nil while the lease is held, then a
// [*kinesisload.LeaseLostError] saying why it was lost.
func (l *lease) Err() error {
	if !l.isLost() {
		return nil
	}
	return l.lostError()
}

func (l *lease) markLost(why kinesisload.LostReason, reason string) {
	l.once.Do(func() {
		l.mu.Lock()
		l.why, l.reason = why, reason
		l.mu.Unlock()
		close(l.lost)
	})
}

func (l *lease) askHandoff() { l.handOnce.Do(func() { close(l.handoff) }) }

func (l *lease) lostError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &kinesisload.LeaseLostError{Stream: l.m.stream, Shard: l.shard, Epoch: l.epoch, Why: l.why, Reason: l.reason}
}

func (l *lease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// lose marks the lease lost (under the member's lock).
func (l *lease) lose(why kinesisload.LostReason, reason string) {
	l.m.mu.Lock()
	l.m.lose(l, why, reason)
	l.m.mu.Unlock()
}

// fenced checks the host's fence; it reports whether the lease is lost.
func (l *lease) fenced() bool {
	m := l.m
	m.mu.Lock()
	now := m.c.clk.Now()
	switch {
	case l.isLost():
	case m.fenceDue(now):
		m.lose(l, kinesisload.LostSelfFenced, "fenced: no heartbeat landed for too long")
	case m.genDue(now):
		m.lose(l, kinesisload.LostSelfFenced, m.genUnread(now))
	}
	m.mu.Unlock()
	return l.isLost()
}

var _ kinesisload.LeaseChecker = (*lease)(nil)

// Check implements [kinesisload.LeaseChecker]: the lease is lost once the
// host's fence passed (or it could not read the generation for as long),
// whether or not a round ran since.
func (l *lease) Check() error {
	if l.fenced() {
		return l.lostError()
	}
	return nil
}

// coalescable reports whether u only moves the position.
func coalescable(u kinesisload.ShardProgress) bool {
	return (u.State == 0 || u.State == kinesisload.StateActive) && len(u.Parents) == 0
}

// Commit implements [kinesisload.Lease]: the update is merged into the
// item on condition that owner and epoch are still ours. With
// Config.CheckpointInterval, a position-only update may be coalesced (see
// there).
func (l *lease) Commit(ctx context.Context, u kinesisload.ShardProgress) error {
	m := l.m
	if u.ShardID != l.shard {
		return fmt.Errorf("dynamo: stream %s: commit of shard %s under the lease of shard %s", m.stream, u.ShardID, l.shard)
	}
	if l.fenced() {
		return l.lostError()
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.dirty {
		u = kinesisload.MergeProgress(l.pending, u)
	}
	if iv := m.c.cfg.CheckpointInterval; iv > 0 && coalescable(u) && m.c.clk.Now().Sub(l.lastWrite) < iv {
		l.pending, l.dirty = u, true
		return nil
	}
	if err := l.write(ctx, u, false); err != nil {
		return err
	}
	l.pending, l.dirty, l.lastWrite = kinesisload.ShardProgress{}, false, m.c.clk.Now()
	return nil
}

// flush writes the coalesced update, when there is one and it is due (or
// always, when force).
func (l *lease) flush(ctx context.Context, force bool) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	c := l.m.c
	if !l.dirty || (!force && c.clk.Now().Sub(l.lastWrite) < c.cfg.CheckpointInterval) || l.isLost() {
		return nil
	}
	if err := l.write(ctx, l.pending, false); err != nil {
		return err
	}
	l.pending, l.dirty, l.lastWrite = kinesisload.ShardProgress{}, false, c.clk.Now()
	return nil
}

// write merges u into the item on condition that it is at the version
// last seen and that owner and epoch are ours; release also clears the
// owner. A condition failure or an unknown outcome reads the item back:
// another owner or epoch loses the lease; an item that already holds u
// means the write landed (or u adds nothing); otherwise it writes again.
// Transient errors are retried until the host's fence, or ctx, ends it;
// release gives up after a few. l.wmu must be held.
func (l *lease) write(ctx context.Context, u kinesisload.ShardProgress, release bool) error {
	m, c := l.m, l.m.c
	me := c.cfg.HostID
	was := l.cache
	fresh := false // was read just now, not remembered
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !release && l.fenced() {
			return l.lostError()
		}
		if release && attempt >= 5 {
			return fmt.Errorf("dynamo: stream %s: shard %s: release gave up after %d attempts (the lease expires instead)", m.stream, l.shard, attempt)
		}
		if was == nil {
			got, err := c.getShard(ctx, m.part, l.shard)
			switch classify(err) {
			case classOK:
				was, fresh = got, true
			case classFatal:
				return c.fatal("GetItem", err)
			default:
				if err := c.sleep(ctx, backoff(attempt)); err != nil {
					return err
				}
				continue
			}
		}
		if !was.exists || was.owner != me || was.epoch != l.epoch {
			l.cache = nil
			if release {
				return nil // not ours any more: nothing to give up
			}
			l.lose(kinesisload.LostCommitRefused, fmt.Sprintf("commit refused: owner is %q at epoch %d", was.owner, was.epoch))
			return l.lostError()
		}
		m.mu.Lock()
		committed := m.committed
		m.mu.Unlock()
		v := was.visible(committed)
		nv := kinesisload.MergeProgress(v, u)
		// Nothing to add: the write landed (its answer was lost), or u
		// adds nothing. Only a fresh read says the lease is still ours;
		// a remembered item is written again, fenced.
		if same(nv, v) && !release && fresh {
			l.cache = was
			return nil
		}
		next := was.folded(nv, committed)
		next.ver = was.ver + 1
		if release {
			next.owner = "" // the handoff request stays: the requester's reservation
			if c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
				next.rate = l.meter.Rate()
			}
		}
		err := c.putShard(ctx, m.part, was, next, true)
		switch classify(err) {
		case classOK:
			l.cache = next
			return nil
		case classFatal:
			return c.fatal("PutItem", err)
		case classUnknown:
			if err := c.sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		was = nil
	}
}

func same(a, b kinesisload.ShardProgress) bool {
	return a.State == b.State && a.Position.Equal(b.Position) && slices.Equal(a.Parents, b.Parents)
}

// Release implements [kinesisload.Lease]: the coalesced position is
// written and the owner cleared in one write, on condition that owner and
// epoch are ours; a handoff request stays as the requester's reservation.
func (l *lease) Release(ctx context.Context) error {
	m := l.m
	l.mu.Lock()
	done := l.released
	l.released = true
	l.mu.Unlock()
	if done || l.isLost() {
		return nil
	}
	l.wmu.Lock()
	err := l.write(ctx, l.pending, true)
	if err == nil {
		l.pending, l.dirty = kinesisload.ShardProgress{}, false
	}
	l.wmu.Unlock()
	m.mu.Lock()
	m.lose(l, kinesisload.LostReleased, "released")
	// Not ours to take back until the Loader offers it again (Acquire):
	// a released shard is for another host.
	delete(m.offer, l.shard)
	m.mu.Unlock()
	return err
}
