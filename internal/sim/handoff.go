package sim

import (
	"fmt"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// The planned-move oracle. A Loader that hands a lease off on a planned
// move (a rebalance, a Close, a Pause: not HandoffStop) has committed
// every record it delivered under it, and the next owner resumes there:
// it delivers nothing twice (docs/fleet.md; HookLeaseHandedOff's promise).
// Two checks:
//
//   - at the handoff, every record the process delivered of the shard
//     under that lease is at or before the position it reports, unless
//     its Sink failed meanwhile (a batch stored but refused is the Sink's
//     fault, delivered again);
//   - the next lease of the shard, on any host, starts at or after that
//     position, unless something besides puts, starts, graceful stops and
//     reshards happened in between (a kill, a pause, a fault, a clock
//     step, a hand edit or its restore, a rewind, a re-creation, an
//     operator's repair): those may move the shard back on purpose or
//     lose the release's write, and the records come again.

// handoff is a planned move not yet followed by the shard's next lease.
type handoff struct {
	proc      string
	epoch     uint64
	pos       scan.Position
	gen       int
	disturbed bool
}

// covers reports whether a committed position pos holds p: p is at or
// before it.
func covers(pos scan.Position, p *put) bool {
	switch pos.Kind {
	case scan.KindAfterSequence:
		return scan.CompareSequence(p.seq, pos.Sequence) <= 0
	case scan.KindAtSequence:
		return scan.CompareSequence(p.seq, pos.Sequence) < 0
	case scan.KindShardEnd:
		return true
	case scan.KindAtTimestamp:
		return p.at.Truncate(1e6).Before(pos.Timestamp)
	}
	return false
}

// disturb marks every pending handoff disturbed: the next lease of its
// shard may start before it; and so is a handoff of a lease held now
// (its release may find the lease taken by a rewind, say). w.mu must be
// held.
func (w *world) disturb() {
	for _, h := range w.handoffs {
		h.disturbed = true
	}
	w.disturbedAt = time.Now()
	if calm := w.disturbedAt.Add(2 * w.spec.Lease); calm.After(w.calmFrom) {
		w.calmFrom = calm // taken.go
	}
}

// editsItems reports whether a hand edit of op changes what the shard
// items or the hosts' positions hold: the Loaders then re-create items
// from a TransactionalSink's checkpoints (perhaps set back by a rewind the
// edit voided) or from TRIM_HORIZON, and a later lease may start before
// a handoff for the rest of the run (seed 249431798).
func editsItems(op string) bool {
	switch op {
	case "delete-shard", "delete-positions", "edit-owner", "delete-init":
		return true
	}
	return false
}

// disturbing reports whether an event of kind k may move a shard back or
// lose a release's write.
func disturbing(k Kind) bool {
	switch k {
	case EvPut, EvPutKPL, EvSplit, EvMerge, EvScale, EvStart, EvStop, EvKinesisFault:
		return false
	}
	return true
}

func (h hook) OnLeaseHandedOff(e kinesisload.LeaseHandedOff) {
	if e.Reason == kinesisload.HandoffStop || e.Reason == kinesisload.HandoffUnknown {
		return
	}
	p, w := h.p, h.p.w
	p.mu.Lock()
	sinkFailed := p.sinkFailed
	p.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	// Disturbed while the lease was held, or the Sink is transactional:
	// its checkpoint, not the position reported, is where the next owner
	// resumes.
	disturbed := !w.disturbedAt.Before(time.Now().Add(-e.Held))
	if last, ok := w.ledger.runs2[runKey{p.name, e.ShardID, e.Epoch}]; ok && !disturbed && !sinkFailed && !w.spec.Transactional && last[1].gen == w.gen && !covers(e.Position, last[1]) {
		w.failures = append(w.failures, fmt.Sprintf("at %.3fs: planned move: %s handed %s off (%v, epoch %d) at %v, after delivering %s (%s) beyond it: the next owner delivers it again",
			w.since().Seconds(), p.name, e.ShardID, e.Reason, e.Epoch, e.Position, last[1].data, last[1].seq))
	}
	w.handoffs[e.ShardID] = &handoff{proc: p.name, epoch: e.Epoch, pos: e.Position, gen: w.gen, disturbed: disturbed}
}

func (h hook) OnLeaseAcquired(e kinesisload.LeaseAcquired) {
	p, w := h.p, h.p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	ho := w.handoffs[e.ShardID]
	if ho == nil {
		return
	}
	delete(w.handoffs, e.ShardID)
	if ho.disturbed || ho.gen != w.gen || w.itemsEdited {
		return
	}
	at, was := e.Position, ho.pos
	if at.Kind == scan.KindAtTimestamp && was.Kind == scan.KindAtTimestamp {
		at, was = scan.AtTimestamp(at.Timestamp), scan.AtTimestamp(was.Timestamp) // Kinesis's milliseconds
	}
	if c, err := scan.Compare(at, was); err == nil && c < 0 {
		w.failures = append(w.failures, fmt.Sprintf("at %.3fs: planned move: %s took %s (epoch %d) at %v, before %v where %s handed it off (epoch %d): what lies between is delivered twice",
			w.since().Seconds(), p.name, e.ShardID, e.Epoch, e.Position, ho.pos, ho.proc, ho.epoch))
	}
}
