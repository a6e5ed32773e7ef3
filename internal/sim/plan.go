package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// Spec is the system one seed builds, before its schedule.
type Spec struct {
	Seed int64
	// Hosts is 0 for one host on a file journal, else the fleet's hosts
	// (over the fleet core's memory table).
	Hosts int
	// Shards is how many shards the stream has when it is created.
	Shards int
	// Transactional: the destination is sinktest.Memory (exactly once),
	// else a plain Sink (at least once).
	Transactional bool
	// Start is Config.StartPosition of the first processes (AT_TIMESTAMP
	// relative to the schedule's start).
	Start     scan.Position
	StartOver bool // Config.OnStreamRecreated = StreamRecreatedStartOver
	FanOut    bool // the first processes read with enhanced fan-out
	Lease     time.Duration
	// RecordsPerCall is Config.RecordsPerCall.
	RecordsPerCall int32
	// Chaos is how long the schedule runs its events; then the faults
	// heal and the liveness bound starts.
	Chaos time.Duration
	// Window sizes the batches (Config.MaxBatchRecords, MaxBatchWait);
	// zero: a batch per page.
	WindowRecords int
	WindowWait    time.Duration
	// Multi: the Sink is a MultiSink (windows of every shard in one call).
	Multi bool
	// Reshards says whether the schedule merges shards (a selection of
	// shards is changed only in schedules without merges, where a parent
	// not selected cannot hold back a selected child's sibling).
	Merges bool
	// A fleet's CheckpointInterval (0: the default, RenewInterval) and
	// balance by throughput instead of count.
	CheckpointInterval time.Duration
	ByThroughput       bool
	// Busy: records go into every shard twenty times a lease duration
	// throughout the chaos, so that a fleet's hosts have positions to
	// write every round and carry their beats on them.
	Busy bool
}

func (s Spec) fleet() bool { return s.Hosts > 0 }

func (s Spec) slots() int { return max(s.Hosts, 1) }

// String describes the system a seed built, as the trace's first line.
func (s Spec) String() string {
	mode := "single host, file journal"
	if s.fleet() {
		mode = fmt.Sprintf("fleet of %d, lease %v", s.Hosts, s.Lease)
		if s.CheckpointInterval > 0 {
			mode += fmt.Sprintf(", checkpoint every %v", s.CheckpointInterval)
		}
		if s.ByThroughput {
			mode += ", balanced by throughput"
		}
		if s.Busy {
			mode += ", busy"
		}
	}
	sink := "plain Sink"
	if s.Transactional {
		sink = "sinktest.Memory"
	}
	read := "polling"
	if s.FanOut {
		read = "fan-out"
	}
	if s.Multi {
		sink += " (MultiSink)"
	}
	batch := "a batch per page"
	if s.WindowRecords > 0 || s.WindowWait > 0 {
		batch = fmt.Sprintf("windows of %d records or %v", s.WindowRecords, s.WindowWait)
	}
	return fmt.Sprintf("seed %d: %s; %d shards; %s; %s; start %v; start-over %v; %s; %d records per call; chaos %v",
		s.Seed, mode, s.Shards, sink, batch, s.Start, s.StartOver, read, s.RecordsPerCall, s.Chaos)
}

// Kind is an event's kind.
type Kind int

// The events of a schedule.
const (
	EvPut          Kind = iota // N plain records
	EvPutKPL                   // one KPL aggregate of N user records
	EvSplit                    // split the N-th open shard at fraction F of its range
	EvMerge                    // merge the N-th pair of adjacent open shards
	EvScale                    // UpdateShardCount: double (N=2) or halve (N=0)
	EvStart                    // start the slot's next process (with a config change)
	EvKill                     // SIGKILL the slot's process (tear the journal's tail if After)
	EvKillAt                   // arm a kill point: the N-th call of Op, before or After its effect
	EvStop                     // graceful Close of the slot's process
	EvPause                    // SIGSTOP the slot's process for D
	EvClockStep                // step the wall clock of the slot's next processes by D
	EvTableFault               // Op on the slot's view of the table (N calls, or for D)
	EvKinesisFault             // Op on every call of Kinesis op Target for D, at rate F
	EvSinkFault                // the slot's Sink fails at rate F for D (After: stored, answer lost)
	EvRecreate                 // delete the stream, re-create it D later with N shards
	EvHandEdit                 // Op by hand on the table; restored D later
	EvRewind                   // an operator rewinds the open shards (all, or the N-th) to Op: trim-horizon, or a timestamp D after the start
)

var kindNames = [...]string{"put", "put-kpl", "split", "merge", "scale", "start", "kill", "kill-at", "stop",
	"pause", "clock-step", "table-fault", "kinesis-fault", "sink-fault", "recreate", "hand-edit", "rewind"}

// String names the kind of event.
func (k Kind) String() string { return kindNames[k] }

// Event is one step of a schedule.
type Event struct {
	At     time.Duration // from the schedule's start
	Kind   Kind
	Slot   int
	N      int
	F      float64
	D      time.Duration
	Op     string
	Target string
	After  bool
	Change *Change // EvStart: the process's configuration differs
}

// Change is a configuration change of a restarted process.
type Change struct {
	FlipReadMode bool
	// Select, if set, reads only the initial shards of these indexes
	// (of the stream as created); Widen reads every shard again.
	Select []int
	Widen  bool
	// Start, if set, is the new Config.StartPosition.
	Start *scan.Position
}

// String describes the change of configuration a start makes.
func (c *Change) String() string {
	if c == nil {
		return ""
	}
	var parts []string
	if c.FlipReadMode {
		parts = append(parts, "read mode flipped")
	}
	if c.Select != nil {
		parts = append(parts, fmt.Sprintf("selection %v", c.Select))
	}
	if c.Widen {
		parts = append(parts, "selection widened to all")
	}
	if c.Start != nil {
		parts = append(parts, fmt.Sprintf("StartPosition %v", *c.Start))
	}
	return strings.Join(parts, ", ")
}

// String describes the event, as the trace shows it.
func (e Event) String() string {
	s := fmt.Sprintf("%8.3fs %-13s", e.At.Seconds(), e.Kind)
	switch e.Kind {
	case EvPut, EvPutKPL:
		return s + fmt.Sprintf(" %d records", e.N)
	case EvSplit:
		return s + fmt.Sprintf(" open shard #%d at %.2f", e.N, e.F)
	case EvMerge:
		return s + fmt.Sprintf(" adjacent pair #%d", e.N)
	case EvScale:
		return s + fmt.Sprintf(" x%v", map[int]string{0: "1/2", 2: "2"}[e.N])
	case EvStart:
		if e.Change != nil {
			return s + fmt.Sprintf(" h%d (%v)", e.Slot, e.Change)
		}
		return s + fmt.Sprintf(" h%d", e.Slot)
	case EvKill:
		if e.After {
			return s + fmt.Sprintf(" h%d, journal tail torn", e.Slot)
		}
		return s + fmt.Sprintf(" h%d", e.Slot)
	case EvKillAt:
		when := "before"
		if e.After {
			when = "after"
		}
		return s + fmt.Sprintf(" h%d %s call %d of %s", e.Slot, when, e.N, e.Op)
	case EvStop:
		return s + fmt.Sprintf(" h%d", e.Slot)
	case EvPause:
		return s + fmt.Sprintf(" h%d for %v", e.Slot, e.D)
	case EvClockStep:
		return s + fmt.Sprintf(" h%d by %v", e.Slot, e.D)
	case EvTableFault:
		return s + fmt.Sprintf(" h%d %s n=%d d=%v", e.Slot, e.Op, e.N, e.D)
	case EvKinesisFault:
		return s + fmt.Sprintf(" %s on %s at %.2f for %v", e.Op, e.Target, e.F, e.D)
	case EvSinkFault:
		return s + fmt.Sprintf(" h%d at %.2f for %v (answer lost after storing: %v)", e.Slot, e.F, e.D, e.After)
	case EvRecreate:
		return s + fmt.Sprintf(" re-created %v later with %d shards", e.D, e.N)
	case EvHandEdit:
		return s + fmt.Sprintf(" %s, restored %v later", e.Op, e.D)
	case EvRewind:
		which := "every open shard"
		if e.N >= 0 {
			which = fmt.Sprintf("open shard #%d", e.N)
		}
		if e.Op == "timestamp" {
			return s + fmt.Sprintf(" %s to %.3fs", which, e.D.Seconds())
		}
		return s + fmt.Sprintf(" %s to %s", which, e.Op)
	}
	return s
}

// Kinesis faults: what a call gets.
var kinesisFaults = []string{"throttle", "5xx", "reset", "expired", "lost-answer", "empty-page", "slow", "shuffled"}

// Kinesis operations the faults target.
var kinesisOps = []string{"GetRecords", "GetShardIterator", "ListShards", "DescribeStreamSummary", "SubscribeToShard"}

// Table faults.
var tableFaults = []string{"outage", "latency", "lose-answers", "false-conflicts", "refuse", "fail-reads"}

// Hand edits of the fleet's table.
var handEdits = []string{"delete-shard", "delete-identity", "delete-roster", "delete-positions", "edit-owner", "delete-init"}

// Kill points.
var killOps = []string{"kinesis.DescribeStreamSummary", "kinesis.ListShards", "kinesis.GetShardIterator", "kinesis.GetRecords",
	"sink.Deliver", "sink.Checkpoints", "journal.Append", "journal.Snapshot", "table.Put", "table.SetEntry", "table.Query"}

// plan draws a Spec and its schedule from seed.
func plan(seed int64) (Spec, []Event) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	sp := Spec{Seed: seed, Shards: 1 + r.IntN(4), Transactional: r.IntN(10) < 6, StartOver: r.IntN(10) < 3,
		FanOut: r.IntN(4) == 0, RecordsPerCall: []int32{2, 5, 50, 10000}[r.IntN(4)],
		Chaos: dur(40*time.Second, 150*time.Second), Lease: 10 * time.Second}
	if r.IntN(3) > 0 {
		sp.WindowRecords = []int{0, 3, 20, 500}[r.IntN(4)]
		sp.WindowWait = []time.Duration{0, 200 * time.Millisecond, 2 * time.Second}[r.IntN(3)]
		sp.Multi = r.IntN(2) == 0
	}
	if r.IntN(2) == 0 {
		sp.Hosts = 2 + r.IntN(3)
		sp.Lease = []time.Duration{3 * time.Second, 10 * time.Second}[r.IntN(2)]
	}
	switch n := r.IntN(20); {
	case n < 12:
		sp.Start = scan.Latest()
	case n < 17:
		sp.Start = scan.TrimHorizon()
	default:
		sp.Start = scan.AtTimestamp(epoch.Add(dur(0, 40*time.Second)))
	}
	// An AT_TIMESTAMP start is never after a process's start (a start in
	// the future is refused: TestFutureAtTimestampIsRefused).
	notAfter := func(p scan.Position, at time.Duration) scan.Position {
		if p.Kind == scan.KindAtTimestamp && p.Timestamp.After(epoch.Add(at)) {
			p.Timestamp = epoch.Add(at)
		}
		return p
	}

	var evs []Event
	add := func(e Event) { evs = append(evs, e) }
	// Records flow from before the first process starts until the chaos
	// ends.
	for at := dur(0, time.Second); at < sp.Chaos; at += dur(100*time.Millisecond, 2500*time.Millisecond) {
		if r.IntN(4) == 0 {
			add(Event{At: at, Kind: EvPutKPL, N: 1 + r.IntN(12)})
		} else {
			add(Event{At: at, Kind: EvPut, N: 1 + r.IntN(6)})
		}
	}
	starts := make([]time.Duration, sp.slots())
	for s := range starts {
		starts[s] = dur(0, 15*time.Second)
	}
	sp.Start = notAfter(sp.Start, slices.Min(starts))
	for s, at := range starts {
		e := Event{At: at, Kind: EvStart, Slot: s}
		add(e)
		if r.IntN(4) == 0 {
			add(Event{At: e.At, Kind: EvKillAt, Slot: s, N: 1 + r.IntN(4), Op: killOps[r.IntN(len(killOps))], After: r.IntN(2) == 0})
		}
	}
	n := int(sp.Chaos/(6*time.Second)) + r.IntN(6)
	for range n {
		at := dur(2*time.Second, sp.Chaos)
		slot := r.IntN(sp.slots())
		restart := func(at time.Duration) {
			if r.IntN(10) == 0 {
				return // it stays down until the faults heal
			}
			e := Event{At: at, Kind: EvStart, Slot: slot}
			if r.IntN(3) == 0 {
				c := &Change{FlipReadMode: r.IntN(2) == 0}
				if !sp.fleet() {
					switch r.IntN(4) {
					case 0:
						for i := range sp.Shards {
							if r.IntN(2) == 0 {
								c.Select = append(c.Select, i)
							}
						}
						if len(c.Select) == 0 {
							c.Select = []int{r.IntN(sp.Shards)}
						}
					case 1:
						c.Widen = true
					case 2:
						p := notAfter([]scan.Position{scan.Latest(), scan.TrimHorizon(), scan.AtTimestamp(epoch.Add(dur(0, sp.Chaos)))}[r.IntN(3)], at)
						c.Start = &p
					}
				}
				e.Change = c
			}
			add(e)
			if r.IntN(5) == 0 {
				add(Event{At: at, Kind: EvKillAt, Slot: slot, N: 1 + r.IntN(6), Op: killOps[r.IntN(len(killOps))], After: r.IntN(2) == 0})
			}
		}
		switch w := r.IntN(100); {
		case w < 10:
			add(Event{At: at, Kind: EvSplit, N: r.IntN(8), F: 0.1 + 0.8*r.Float64()})
		case w < 16:
			add(Event{At: at, Kind: EvMerge, N: r.IntN(8)})
			sp.Merges = true
		case w < 19:
			add(Event{At: at, Kind: EvScale, N: 2 * r.IntN(2)})
			sp.Merges = true
		case w < 33:
			add(Event{At: at, Kind: EvKill, Slot: slot, After: !sp.fleet() && r.IntN(2) == 0})
			restart(at + dur(0, 20*time.Second))
		case w < 45:
			add(Event{At: at, Kind: EvKillAt, Slot: slot, N: 1 + r.IntN(8), Op: killOps[r.IntN(len(killOps))], After: r.IntN(2) == 0})
			restart(at + dur(5*time.Second, 30*time.Second))
		case w < 50:
			add(Event{At: at, Kind: EvStop, Slot: slot})
			restart(at + dur(0, 20*time.Second))
		case w < 56:
			if sp.fleet() {
				add(Event{At: at, Kind: EvPause, Slot: slot, D: dur(sp.Lease/2, 3*sp.Lease)})
			}
		case w < 59:
			add(Event{At: at, Kind: EvClockStep, Slot: slot, D: dur(-4*time.Minute, 4*time.Minute)})
		case w < 70:
			if sp.fleet() {
				add(Event{At: at, Kind: EvTableFault, Slot: slot, Op: tableFaults[r.IntN(len(tableFaults))], N: 1 + r.IntN(10), D: dur(time.Second, 3*sp.Lease)})
			}
		case w < 83:
			add(Event{At: at, Kind: EvKinesisFault, Op: kinesisFaults[r.IntN(len(kinesisFaults))], Target: kinesisOps[r.IntN(len(kinesisOps))],
				F: []float64{0.2, 0.5, 1}[r.IntN(3)], D: dur(time.Second, 40*time.Second)})
		case w < 90:
			add(Event{At: at, Kind: EvSinkFault, Slot: slot, F: []float64{0.2, 0.5, 1}[r.IntN(3)], D: dur(time.Second, 30*time.Second), After: r.IntN(3) == 0})
		case w < 94:
			if sp.StartOver {
				add(Event{At: at, Kind: EvRecreate, D: dur(0, 15*time.Second), N: 1 + r.IntN(3)})
			}
		default:
			if sp.fleet() {
				add(Event{At: at, Kind: EvHandEdit, Op: handEdits[r.IntN(len(handEdits))], D: dur(time.Second, 40*time.Second)})
			}
		}
	}
	// A fleet's group commit and balance rule, drawn from a stream of
	// their own so that the rest of a seed's schedule is as it was: a
	// longer CheckpointInterval widens what a host holds only in memory
	// (a planned move must still deliver nothing twice, a crash lose
	// nothing).
	if sp.fleet() {
		cr := rand.New(rand.NewPCG(uint64(seed), 0xc4e7))
		sp.CheckpointInterval = []time.Duration{0, 0, 3 * sp.Lease / 10, sp.Lease / 2}[cr.IntN(4)]
		sp.ByThroughput = cr.IntN(3) == 0
	}
	// An operator's rewinds, drawn from a stream of their own so that the
	// rest of a seed's schedule is what it was before rewinds existed. A
	// rewind re-delivers on purpose: the oracles count first deliveries,
	// and with a TransactionalSink (a Rewinder, its checkpoint set back)
	// a record stored once more for each rewind that asked it again.
	rr := rand.New(rand.NewPCG(uint64(seed), 0x4e41))
	if rr.IntN(3) == 0 {
		for range 1 + rr.IntN(3) {
			at := 2*time.Second + time.Duration(rr.Int64N(int64(sp.Chaos-2*time.Second)+1))
			e := Event{At: at, Kind: EvRewind, Op: "trim-horizon", N: rr.IntN(5) - 1}
			if rr.IntN(2) == 0 {
				e.Op, e.D = "timestamp", time.Duration(rr.Int64N(int64(at)+1))
			}
			add(e)
		}
	}
	// A busy fleet: every host has
	// positions to write every round, so its beats ride on them for
	// whole lease durations (the fleet package's watch). Only where a
	// batch is delivered per page and a page holds 50 records or more:
	// a window waits to fill (a host whose shards commit once every few
	// rounds beats in the roster between them), and a reader of 2
	// records a call falls behind the flow and the liveness bound.
	if sp.fleet() && sp.WindowRecords == 0 && sp.WindowWait == 0 && sp.RecordsPerCall >= 50 {
		sp.Busy = true
		step := sp.Lease / 20
		for at := step; at < sp.Chaos; at += step {
			add(Event{At: at, Kind: EvPut, N: 2 * sp.Shards})
		}
	}
	slices.SortStableFunc(evs, func(a, b Event) int { return int(a.At - b.At) })
	for _, e := range evs {
		if e.Kind == EvStart {
			sp.Start = notAfter(sp.Start, e.At)
			break
		}
	}
	return sp, evs
}
