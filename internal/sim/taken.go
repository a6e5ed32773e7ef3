package sim

import (
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// The live-lease oracle. A host whose heartbeat lands is never taken for
// dead: another host takes its shard only once it must have fenced
// itself (LeaseDuration less FenceMargin after its last beat that
// landed), and then it loses its lease as fenced, not to the other's
// take. So, while nothing disturbs the fleet (no kill, table or Sink
// fault, hand edit, rewind or re-creation from two lease durations
// before the lease was taken, counted from the end of a fault that
// lasts, and no pause or clock step in the schedule at all, whose
// effects outlast their events), a lease is never lost because the
// table names another owner, a commit was refused for it, or a
// TransactionalSink fenced it: each says another host took the shard
// while this one beat (found: a take delayed by a table fault landed
// after the fault ended, seed 251503817).
// It watches, among others, a busy host whose beat rides on its
// positions (the fleet package's watch and still).

func (h hook) OnLeaseLost(e kinesisload.LeaseLost) {
	switch e.Reason {
	case kinesisload.LostExpired, kinesisload.LostCommitRefused, kinesisload.LostSinkFenced:
	default:
		return
	}
	p, w := h.p, h.p.w
	if w.lingering {
		return
	}
	w.mu.Lock()
	disturbed := w.calmFrom.After(time.Now().Add(-e.Held))
	w.mu.Unlock()
	if !disturbed {
		w.failf("%s (host %s): its lease on shard %s (epoch %d, held %v) was lost (%v: %v) with nothing disturbing the fleet meanwhile: another host took the shard while this one's heartbeat landed",
			p.name, p.host, e.ShardID, e.Epoch, e.Held, e.Reason, e.Err)
	}
}

// lingers reports whether an event of kind k has effects that outlast
// the event: a paused process resumes a zombie, a stepped clock stays
// stepped for the slot's next processes.
func lingers(k Kind) bool { return k == EvPause || k == EvClockStep }
