package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// put is a record the schedule put, as Kinesis acknowledged it.
type put struct {
	data  string
	gen   int // the stream's incarnation
	shard string
	seq   string
	sub   int64 // the user record's index in its KPL aggregate
	at    time.Time
}

// before orders records of one shard.
func (p *put) before(q *put) bool {
	if c := scan.CompareSequence(p.seq, q.seq); c != 0 {
		return c < 0
	}
	return p.sub < q.sub
}

// run is a Run of a process.
type run struct {
	proc  string
	at    time.Time
	start scan.Position
}

// ledger is the oracles' memory, kept apart from the code under test: what
// was put, with Kinesis's acknowledgement, and what each Sink accepted, in
// the order accepted.
type ledger struct {
	puts   []*put
	byData map[string]*put
	first  map[string]int   // data: the index of the delivery that first accepted it
	at     map[string][]int // data: the indexes of the deliveries that accepted it
	count  map[string]int   // data: how many deliveries accepted it
	n      int              // deliveries of records accepted
	runs   []run

	// The single host's promise: from the Run that made the first
	// acknowledged journal write, with its StartPosition.
	promiseAt    time.Time
	promiseStart scan.Position
	promiseSet   bool
	// starts are the StartPositions of the Runs that wrote to the journal
	// before a start-up batch was known journaled (the first InitResolved):
	// a start-up that died may run again with another StartPosition, and
	// the batch uses the one of the Run that journaled it, which the
	// ledger cannot always tell (it may die before its hook). A record is
	// required when every one of them requires it.
	starts   []scan.Position
	initDone bool

	required int
	done     time.Time

	// rewound are the operator's rewinds that landed.
	rewound []rewound

	// issued are the data of records handed to a put, acknowledged or
	// not yet: a record is readable before its put's answer reaches the
	// ledger, and a Loader may deliver it in between. early are such
	// deliveries, checked against the puts at the end.
	issued map[string]bool
	early  []earlyDelivery

	// runs2 is, per process, shard and epoch, the first and last record
	// of the last batch delivered; orderErrs what batch found.
	runs2     map[runKey][2]*put
	orderErrs []string
}

// rewound is a rewind of a shard that landed: every record of the shard
// at or after pos that was put before it is delivered again after it
// (after the delivery of index mark).
type rewound struct {
	id    string
	shard string
	gen   int
	pos   scan.Position
	mark  int
	at    time.Time
	// void says the rewind was lost with the shard's item, deleted by
	// hand and written again by a host before it was restored (see
	// world.voidRewinds).
	void bool
}

// owed folds the operator's rewinds of p's shard made after p was put,
// in order, into what the guarantee owes p: a delivery after the index it
// returns (-1: any delivery), or nothing (ok false). required says whether
// p is owed before any rewind. A rewind to a position at or before p asks
// p delivered again after the rewind; one past p (an operator may move a
// shard forward) skips it: nothing is owed any more.
func (l *ledger) owed(p *put, required bool) (after int, id string, ok bool) {
	after, ok = -1, required
	for _, rw := range l.rewound {
		if rw.gen != p.gen || rw.shard != p.shard || !p.at.Before(rw.at) {
			continue
		}
		again := rw.asks(p)
		switch {
		case again && rw.void:
			// Lost with its item: what it asked delivered again is not
			// owed again (what it skipped stays skipped).
		case again:
			after, id, ok = rw.mark, rw.id, true
		default:
			after, id, ok = -1, "", false
		}
	}
	return after, id, ok
}

// asks reports whether the rewind's position is at or before p: p is
// asked again (when it was put before the rewind, in its shard).
func (rw rewound) asks(p *put) bool {
	return rw.pos.Kind == scan.KindTrimHorizon || !p.at.Truncate(time.Millisecond).Before(rw.pos.Timestamp)
}

// deliveredAfter reports whether p was delivered after the delivery of
// index mark (-1: at all).
func (l *ledger) deliveredAfter(p *put, mark int) bool {
	at := l.at[p.data]
	return len(at) > 0 && at[len(at)-1] > mark
}

// earlyDelivery is a record delivered before its put was acknowledged.
type earlyDelivery struct {
	shard string
	r     kinesisload.Record
}

// wrongly says what is wrong with a delivery of r as shard's, if anything.
func (l *ledger) wrongly(shard string, r kinesisload.Record) string {
	data := string(r.Data)
	p, ok := l.byData[data]
	switch {
	case !ok:
		return fmt.Sprintf("delivered a record never put: %q in %s at %s/%d", data, shard, r.SequenceNumber, r.SubSequenceNumber)
	case p.shard != shard || p.seq != r.SequenceNumber || p.sub != r.SubSequenceNumber:
		return fmt.Sprintf("record %q delivered as %s at %s/%d, put to %s at %s/%d", data, shard, r.SequenceNumber, r.SubSequenceNumber, p.shard, p.seq, p.sub)
	}
	return ""
}

func (l *ledger) init() {
	l.byData, l.first, l.at, l.count, l.runs2 = map[string]*put{}, map[string]int{}, map[string][]int{}, map[string]int{}, map[runKey][2]*put{}
	l.issued = map[string]bool{}
}

func (l *ledger) put(p *put) {
	l.puts = append(l.puts, p)
	l.byData[p.data] = p
}

func (l *ledger) durable(began time.Time, start scan.Position) {
	if !l.promiseSet {
		l.promiseAt, l.promiseStart, l.promiseSet = began, start, true
	}
	if !l.initDone && !slices.ContainsFunc(l.starts, start.Equal) {
		l.starts = append(l.starts, start)
	}
}

// delivered writes an accepted record in the ledger and returns what is
// wrong with it, if anything: a record never put, or delivered as another
// shard's or with another sequence number.
func (l *ledger) delivered(shard string, r kinesisload.Record, _ time.Time) string {
	data := string(r.Data)
	if _, put := l.byData[data]; !put && l.issued[data] {
		l.early = append(l.early, earlyDelivery{shard: shard, r: r}) // its put's answer is on its way
	} else if msg := l.wrongly(shard, r); msg != "" {
		return msg
	}
	l.n++
	if _, seen := l.first[data]; !seen {
		l.first[data] = l.n
	}
	l.at[data] = append(l.at[data], l.n)
	l.count[data]++
	return ""
}

// isRequired reports whether the guarantee requires p delivered: a record
// of the stream's last incarnation that arrived at or after its start (see
// the package doc). fleetFrom is the fleet's promise bound.
func (w *world) isRequired(p *put, final int, fleetFrom time.Time) bool {
	if p.gen != final {
		return false // its stream was deleted: nothing promised it
	}
	if !w.spec.fleet() {
		for _, start := range w.ledger.starts {
			if !w.requiredFrom(p, start, w.ledger.promiseAt) {
				return false
			}
		}
		return len(w.ledger.starts) > 0
	}
	return w.requiredFrom(p, w.spec.Start, fleetFrom)
}

// requiredFrom reports whether start, with a LATEST start taken at from,
// requires p.
func (w *world) requiredFrom(p *put, start scan.Position, from time.Time) bool {
	start = w.position(start)
	switch {
	case start.Kind == scan.KindAtTimestamp:
		return !p.at.Before(start.Timestamp)
	case start.Kind == scan.KindTrimHorizon:
		return true
	default:
		// LATEST: from the promise on. (A stream re-created after it
		// arrived wholly after it; one re-created before the first Run
		// is the stream that Run started on.)
		return !from.IsZero() && !p.at.Before(from)
	}
}

// fleetPromise is the bound of a fleet's T0: the latest start of a Run
// begun before the first record was delivered (the host that initialised
// the stream began before it; see the package doc).
func (w *world) fleetPromise() time.Time {
	firstAt := time.Time{}
	if w.ledger.n > 0 {
		// The first delivery came after every Run begun earlier; runs are
		// in start order, so the bound is the last one before it. The
		// ledger keeps no time per delivery: use the earliest record's.
		firstAt = w.firstDeliveryAt
	}
	var from time.Time
	for _, r := range w.ledger.runs {
		if !firstAt.IsZero() && r.at.After(firstAt) {
			break
		}
		from = r.at
	}
	return from
}

// missing returns up to limit required records not delivered (not stored,
// with sinktest.Memory), and counts the required ones.
func (w *world) missing(limit int) []*put {
	stored := w.stored()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.spec.fleet() && !w.ledger.promiseSet {
		return []*put{{data: "(the start-up was never durable)"}}
	}
	final, from := w.gen, w.fleetPromise()
	var out []*put
	w.ledger.required = 0
	for _, p := range w.ledger.puts {
		after, id, owed := -1, "", w.isRequired(p, final, from)
		if p.gen == final { // rewinds of an earlier incarnation owe nothing
			after, id, owed = w.ledger.owed(p, owed)
		}
		if !owed {
			continue
		}
		w.ledger.required++
		got := w.ledger.deliveredAfter(p, after)
		if stored != nil && after < 0 {
			_, got = stored[p.data]
		}
		if !got && len(out) < limit {
			if id != "" {
				again := *p
				again.data += " (not delivered again after " + id + ")"
				p = &again
			}
			out = append(out, p)
		}
	}
	return out
}

// stored returns what sinktest.Memory holds, record data to its count, or
// nil for a plain Sink.
func (w *world) stored() map[string]int {
	if !w.spec.Transactional {
		return nil
	}
	out := map[string]int{}
	for _, sh := range w.mem.Shards(stream) {
		for _, r := range w.mem.Stored(stream, sh) {
			out[string(r.Data)]++
		}
	}
	return out
}

// check runs the oracles after the schedule.
func (w *world) check() {
	if miss := w.missing(10); len(miss) > 0 {
		var b strings.Builder
		for _, p := range miss {
			fmt.Fprintf(&b, " %s (%s %s/%d at %.3fs);", p.data, p.shard, p.seq, p.sub, p.at.Sub(w.start).Seconds())
		}
		w.failf("LOSS or no liveness: required records not delivered %v after the faults healed:%s", w.livenessBound(), b.String())
		w.dumpTable()
	}
	w.checkEarly()
	w.checkExactlyOnce()
	w.checkOrder()
	w.checkLineage()
}

// checkEarly checks the records delivered before their put's answer
// reached the ledger as every other delivery is checked when it happens.
func (w *world) checkEarly() {
	w.mu.Lock()
	var msgs []string
	for _, e := range w.ledger.early {
		if msg := w.ledger.wrongly(e.shard, e.r); msg != "" {
			msgs = append(msgs, msg)
		}
	}
	w.mu.Unlock()
	for _, m := range msgs {
		w.failf("%s", m)
	}
}

// checkExactlyOnce: with sinktest.Memory every record is stored once,
// and again only after a rewind set the Sink's checkpoint of its shard
// back: between two copies of a record, a RewindCheckpoint.
func (w *world) checkExactlyOnce() {
	if !w.spec.Transactional {
		return
	}
	for _, sh := range w.mem.Shards(stream) {
		w.mu.Lock()
		cuts := slices.Clone(w.sinkRewinds[sh])
		w.mu.Unlock()
		copies := map[string][]int{}
		rows := w.mem.Stored(stream, sh)
		for i, r := range rows {
			copies[string(r.Data)] = append(copies[string(r.Data)], i)
		}
		for data, at := range copies {
			for k := 1; k < len(at); k++ {
				if slices.ContainsFunc(cuts, func(c int) bool { return at[k-1] < c && c <= at[k] }) {
					continue
				}
				var where []string
				for _, i := range at {
					where = append(where, fmt.Sprintf("%s at %s epoch %d", sh, rows[i].SequenceNumber, rows[i].Epoch))
				}
				w.failf("exactly once: %s stored %d times, twice with no rewind of the Sink's checkpoint between: %s", data, len(at), strings.Join(where, "; "))
				break
			}
		}
	}
}

// checkOrder: per shard, records are stored (sinktest.Memory) or first
// delivered (a plain Sink) in the order of the shard.
func (w *world) checkOrder() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.spec.Transactional {
		w.mu.Unlock()
		shards := w.mem.Shards(stream)
		byShard := map[string][]string{}
		for _, sh := range shards {
			for _, r := range w.mem.Stored(stream, sh) {
				byShard[sh] = append(byShard[sh], string(r.Data))
			}
		}
		w.mu.Lock()
		for sh, datas := range byShard {
			// The order starts again where a rewind set the Sink's
			// checkpoint back.
			cuts := w.sinkRewinds[sh]
			last := map[int]*put{}
			for i, d := range datas {
				if slices.Contains(cuts, i) {
					clear(last)
				}
				p := w.ledger.byData[d]
				if p == nil {
					continue
				}
				if q := last[p.gen]; q != nil && !q.before(p) {
					w.failures = append(w.failures, fmt.Sprintf("order: %s stored %s after %s", sh, p.data, q.data))
					return
				}
				last[p.gen] = p
			}
		}
		return
	}
	// A plain Sink: checked as batches arrive (see ledger.batch).
	w.failures = append(w.failures, w.ledger.orderErrs...)
}

// batch checks the order of one accepted batch against the last one the
// same process delivered of the shard under the same lease epoch: its
// records in the shard's order, after that batch's, or that very batch
// again (a retry after a refusal or a lost answer). Records from before
// may come again only under another lease, or in another process.
func (l *ledger) batch(proc string, b kinesisload.Batch) {
	var ps []*put
	for _, r := range b.Records {
		if p := l.byData[string(r.Data)]; p != nil {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return
	}
	for i := 1; i < len(ps); i++ {
		if !ps[i-1].before(ps[i]) {
			l.orderErrs = append(l.orderErrs, fmt.Sprintf("order: a batch of %s by %s holds %s after %s", b.ShardID, proc, ps[i].data, ps[i-1].data))
			return
		}
	}
	k := runKey{proc, b.ShardID, b.Epoch}
	prev, ok := l.runs2[k]
	first, last := ps[0], ps[len(ps)-1]
	switch {
	case !ok, prev[1].before(first), prev[0] == first && prev[1] == last:
	default:
		l.orderErrs = append(l.orderErrs, fmt.Sprintf("order: %s delivered %s..%s of %s (epoch %d) after %s..%s", proc, first.data, last.data, b.ShardID, b.Epoch, prev[0].data, prev[1].data))
	}
	l.runs2[k] = [2]*put{first, last}
}

type runKey struct {
	proc, shard string
	epoch       uint64
}

// checkLineage: no record of a child shard was delivered before a record
// of its parents (the stream's last incarnation; first deliveries).
func (w *world) checkLineage() {
	parents := map[string][]string{}
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := w.fake.ListShards(context.Background(), in)
		if err != nil {
			w.failf("list the shards: %v", err)
			return
		}
		for _, s := range out.Shards {
			for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
				if p != nil {
					parents[*s.ShardId] = append(parents[*s.ShardId], *p)
				}
			}
		}
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Per shard: the earliest first delivery of any record, and the latest
	// of a required one (a record before the start, not required, may be
	// delivered by a re-read from further back, after the children).
	first, last := map[string]int{}, map[string]int{}
	firstData, lastData := map[string]string{}, map[string]string{}
	from := w.fleetPromise()
	for _, p := range w.ledger.puts {
		i, ok := w.ledger.first[p.data]
		if !ok || p.gen != w.gen {
			continue
		}
		if f, ok := first[p.shard]; !ok || i < f {
			first[p.shard], firstData[p.shard] = i, p.data
		}
		// Owed as the loss oracle counts it: a record an operator's
		// rewind moved the shard past is owed nothing, its order neither
		// (a zombie's batch in flight may still deliver it, after the
		// children: seed 60037776).
		if _, _, owed := w.ledger.owed(p, w.isRequired(p, w.gen, from)); owed && i >= last[p.shard] {
			last[p.shard], lastData[p.shard] = i, p.data
		}
	}
	for child, ps := range parents {
		c, ok := first[child]
		if !ok {
			continue
		}
		for _, p := range ps {
			if l, ok := last[p]; ok && l > c {
				w.failures = append(w.failures, fmt.Sprintf("lineage: a record of %s (%s, delivery %d) was first delivered before the last of its parent %s (%s, delivery %d)",
					child, firstData[child], c, p, lastData[p], l))
			}
		}
	}
}

// dumpTable writes the fleet's table, as fleet.Inspect reads it, in the
// trace.
func (w *world) dumpTable() {
	if !w.spec.fleet() {
		return
	}
	info, err := fleet.Inspect(context.Background(), w.table, stream)
	if err != nil {
		w.logf("inspect the table: %v", err)
		return
	}
	w.logf("table: generation %d, initialised %v, T0 %v", info.Generation, info.Initialised, info.StartTime.Sub(w.start))
	for _, id := range slices.Sorted(maps.Keys(info.Hosts)) {
		h := info.Hosts[id]
		w.logf("table: host %s: counter %d, changes %d, left %v", id, h.Counter, h.Changes, h.Left)
	}
	for _, id := range slices.Sorted(maps.Keys(info.Shards)) {
		sh := info.Shards[id]
		w.logf("table: %s: owner %q epoch %d handoff %q: %v %v parents %v", id, sh.Owner, sh.Epoch, sh.HandoffTo, sh.Progress.State, sh.Progress.Position, sh.Progress.Parents)
	}
}
