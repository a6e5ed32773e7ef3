package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tidemark/tidemark/internal/waitlock"
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
	// rewind is the shard item's last rewind as the take stored it: what
	// Rewind reports, whatever the member's view of the item is by then.
	rewind string
	// meter smooths the bytes the Loader observed into the shard's rate.
	meter kinesisload.RateMeter

	mu       sync.Mutex
	why      kinesisload.LostReason
	reason   string
	released bool
	// latest is the furthest position committed under the lease (the
	// granted one at first): what the host's positions say of it.
	latest kinesisload.ShardProgress
	// acked is the shard item's rewind as AckRewind last wrote it (""
	// until then): what an item written again keeps (see recreate).
	acked string

	// wmu serialises the writes of the lease's shard item (held across
	// the table's calls: see member.beatMu).
	wmu waitlock.Mutex
}

var (
	_ kinesisload.Lease        = (*lease)(nil)
	_ kinesisload.LoadObserver = (*lease)(nil)
	_ kinesisload.LeaseChecker = (*lease)(nil)
)

func newLease(m *member, shard string, epoch uint64, granted kinesisload.ShardProgress, why kinesisload.AcquireReason) *lease {
	return &lease{m: m, shard: shard, epoch: epoch, progress: granted, latest: granted, acquired: why,
		lost: make(chan struct{}), handoff: make(chan struct{})}
}

// Observe implements [kinesisload.LoadObserver]: the bytes feed the
// shard's rate, published with the host's positions when balancing by
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

// Check implements [kinesisload.LeaseChecker]: the lease is lost once the
// host's fence passed (no heartbeat landed for LeaseDuration-FenceMargin
// on its clock, or the generation could not be read for as long),
// whether or not a round ran since.
func (l *lease) Check() error {
	m := l.m
	m.mu.Lock()
	now := m.c.now()
	switch {
	case l.isLost():
	case m.fenceDue(now):
		m.lose(l, kinesisload.LostSelfFenced, fmt.Sprintf("fenced: no heartbeat landed for %v", now.Sub(m.lastOK)))
	case m.genDue(now):
		m.lose(l, kinesisload.LostSelfFenced, "fenced: the stream's generation could not be read for too long")
	}
	m.mu.Unlock()
	if l.isLost() {
		return l.lostError()
	}
	return nil
}

// entry is the lease's entry in the host's positions, when its latest
// position says more than "nothing known".
func (l *lease) entry() (posEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.latest.Position.Kind == 0 || l.released {
		return posEntry{}, false
	}
	return posEntry{epoch: l.epoch, pos: l.latest.Position, rate: l.meter.Rate()}, true
}

// positionOnly reports whether u only moves the position: such a commit
// is group-committed with the host's positions.
func positionOnly(u kinesisload.ShardProgress) bool {
	return (u.State == 0 || u.State == kinesisload.StateActive) && len(u.Parents) == 0
}

// Commit implements [kinesisload.Lease]. A commit that only moves the
// position is group-committed: it is written with every position of the
// host, once a round (Config.CheckpointInterval), under the lease's epoch
// in the host's positions; a later owner reads it there when it takes the
// shard from a host taken for dead. A commit of a state (DRAINING,
// COMPLETED) or of parents is written into the shard's item at once, on
// condition that owner and epoch are still ours, and returns once
// durable. A lease known lost (or whose host's fence passed: see Check)
// refuses the commit with its *LeaseLostError.
func (l *lease) Commit(ctx context.Context, u kinesisload.ShardProgress) error {
	m := l.m
	if u.ShardID != l.shard {
		return fmt.Errorf("fleet: stream %s: commit of shard %s under the lease of shard %s", m.stream, u.ShardID, l.shard)
	}
	if err := l.Check(); err != nil {
		return err
	}
	l.mu.Lock()
	l.latest = kinesisload.MergeProgress(l.latest, u)
	latest := l.latest
	l.mu.Unlock()
	if positionOnly(u) {
		m.mu.Lock()
		m.dirty = true
		m.mu.Unlock()
		return nil
	}
	return l.write(ctx, latest, false)
}

// write merges u into the shard's item on condition that owner and epoch
// are ours (release also clears the owner, keeping a handoff request as
// the requester's reservation). A condition failure or an unknown outcome
// reads the item back: another owner or epoch loses the lease; an item
// that already holds u means the write landed. Transient errors are
// retried until the host's fence, or ctx, ends it; release gives up after
// a few.
func (l *lease) write(ctx context.Context, u kinesisload.ShardProgress, release bool) error {
	m := l.m
	l.wmu.Lock()
	defer l.wmu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !release {
			if err := l.Check(); err != nil {
				return err
			}
		}
		if release && attempt >= 5 {
			return fmt.Errorf("fleet: stream %s: shard %s: release gave up after %d attempts (the lease expires instead)", m.stream, l.shard, attempt)
		}
		got, err := m.c.table.Get(ctx, m.part, prefixShard+l.shard)
		if err == nil {
			var s *shardItem
			if s, err = decodeShard(got); err == nil {
				err = l.apply(ctx, s, u, release)
			}
		}
		switch {
		case err == nil:
			m.changed(l.shard)
			return nil
		case errors.Is(err, errNotOurs):
			if release {
				return nil // not ours any more: nothing to give up
			}
			return l.lostError()
		case errors.Is(err, errSame):
			return nil
		case fatal(err):
			return fmt.Errorf("fleet: stream %s: shard %s: %w", m.stream, l.shard, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

var (
	errNotOurs = errors.New("fleet: the shard is not ours")
	errSame    = errors.New("fleet: nothing to write")
)

// apply writes u into the item s as read, fenced: errNotOurs (and the
// lease lost) when another owner or epoch holds it, errSame when it holds
// u already (a commit whose answer was lost).
func (l *lease) apply(ctx context.Context, s *shardItem, u kinesisload.ShardProgress, release bool) error {
	m := l.m
	if !s.exists() && release {
		return l.recreate(ctx, s, u)
	}
	if !s.exists() || s.owner != m.me || s.epoch != l.epoch {
		if !release {
			l.lose(kinesisload.LostCommitRefused, fmt.Sprintf("commit refused: owner is %q at epoch %d", s.owner, s.epoch))
		}
		return errNotOurs
	}
	m.mu.Lock()
	committed := m.committed
	m.mu.Unlock()
	v := s.visible(committed)
	nv := kinesisload.MergeProgress(v, u)
	if same(nv, v) && !release {
		return errSame
	}
	next := s.with(nv, committed)
	if release {
		next.owner = "" // the handoff request stays: the requester's reservation
		if m.c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
			next.rate = l.meter.Rate()
		}
	}
	stored, err := m.c.table.Put(ctx, next.encode(m.part))
	if err != nil {
		return err
	}
	if ns, derr := decodeShard(stored); derr == nil {
		m.mu.Lock()
		if m.shards != nil {
			m.setShard(l.shard, ns)
		}
		m.mu.Unlock()
	}
	return nil
}

// recreate writes the shard's item again, as the release would have left
// it, when the release finds it gone (deleted by hand while the lease was
// held): with no owner and the furthest position committed under the
// lease, on condition that the item is still absent. This host is the
// only one that knows where the shard was: dropped, its position would be
// lost with the item, and a fleet whose other items were deleted too would
// look new (a fresh T0, skipping what arrived since the first; found by
// the simulation, seed 110105956). Only while the lease holds (the host's
// fence has not passed): after that another host may have taken the shard
// and gone further. The epoch is the lease's, or the epoch floor of an
// item created now (see epochFloor) when that is higher, as for any item
// saved again after a deletion; it shows that a host read the shard.
func (l *lease) recreate(ctx context.Context, s *shardItem, u kinesisload.ShardProgress) error {
	m := l.m
	if l.Check() != nil {
		return errNotOurs
	}
	l.mu.Lock()
	p := kinesisload.MergeProgress(l.latest, u)
	rewind := l.rewind
	if l.acked != "" {
		rewind = l.acked
	}
	l.mu.Unlock()
	if p.Position.Kind == 0 {
		return errNotOurs // a take in doubt, released as Leave does: no position to keep
	}
	p.ShardID = l.shard
	next := &shardItem{id: l.shard, item: s.item, epoch: max(l.epoch, createEpoch(m.gen, m.c.now())), prog: p, rewind: rewind}
	if m.c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
		next.rate = l.meter.Rate()
	}
	stored, err := m.c.table.Put(ctx, next.encode(m.part))
	if err != nil {
		return err // a conflict: written meanwhile; the next read tells
	}
	if ns, derr := decodeShard(stored); derr == nil {
		m.mu.Lock()
		if m.shards != nil {
			m.setShard(l.shard, ns)
		}
		m.mu.Unlock()
	}
	m.c.cfg.Logger.Warn("fleet: the item of a shard whose lease was released was missing (deleted by hand?): written again with the position reached",
		"stream", m.stream, "shard", l.shard, "epoch", next.epoch, "position", p.Position, "state", p.State)
	return nil
}

func same(a, b kinesisload.ShardProgress) bool {
	return a.State == b.State && a.Position.Equal(b.Position) && slices.Equal(a.Parents, b.Parents)
}

// Release implements [kinesisload.Lease]: the latest committed position
// is written into the shard's item and the owner cleared in one write, on
// condition that owner and epoch are ours; a handoff request stays as the
// requester's reservation. When the write fails, the position stays in
// our positions, where the shard's next owner (or our next round, giving
// up a shard asked for) finds it.
func (l *lease) Release(ctx context.Context) error {
	m := l.m
	l.mu.Lock()
	done := l.released
	latest := l.latest
	l.mu.Unlock()
	if done || l.isLost() {
		return nil
	}
	err := l.write(ctx, latest, true)
	m.mu.Lock()
	if err != nil {
		// The item may still name us at this epoch, with the position
		// of an earlier write: the one our positions hold stays.
		m.keepOrphan(l)
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	m.lose(l, kinesisload.LostReleased, "released")
	// Not ours to take back until the Loader offers it again (Acquire):
	// a released shard is for another host.
	delete(m.offer, l.shard)
	m.dirty = true // its entry leaves our positions
	m.mu.Unlock()
	return err
}
