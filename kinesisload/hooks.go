package kinesisload

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// Hook is any value that implements one or more of the Hook* interfaces
// below; give hooks to the Loader with [WithHooks]. Every hook method is
// called synchronously from the Loader's goroutines: it must be fast, must
// not block, and must be safe for concurrent use. A hook that panics does
// not stop the Loader: a hook observes, so the panic is recovered, logged
// at error level with its stack trace and a running count, and the
// Loader goes on.
type Hook any

// HookBatchDelivered is called after the Sink accepted a batch and its
// checkpoint is durable.
type HookBatchDelivered interface {
	OnBatchDelivered(BatchDelivered)
}

// BatchDelivered describes one committed batch.
type BatchDelivered struct {
	Stream, ShardID string
	Records         int
	Bytes           int64
	// MillisBehindLatest is how far the batch was behind the shard's tip.
	MillisBehindLatest int64
	// Latency is the time from the read that returned the batch (with
	// windows: its first page) to the durable commit of its checkpoint.
	Latency time.Duration
	// Attempts is how many times the Sink was called for this batch.
	Attempts int
	// Waited is how long the batch's oldest record waited in its window
	// (see Config.MaxBatchWait): from when its page was read to when the
	// window closed. 0 without windows.
	Waited time.Duration
}

// HookWindowDelivered is called after a window of batches (see
// Config.MaxBatchWait and [MultiSink]) was delivered and every shard's
// checkpoint in it is durable; [HookBatchDelivered] is called for each of
// its batches first. Without windows (the default) it is never called.
type HookWindowDelivered interface {
	OnWindowDelivered(WindowDelivered)
}

// WindowDelivered describes one committed window.
type WindowDelivered struct {
	Stream string
	// Shards is how many shards had a batch in the window: 1 unless the
	// Sink is a [MultiSink]. Shards whose batches were dropped (a lost
	// lease, a refusal of [LostSinkFenced]) are not counted, nor are
	// their records.
	Shards int
	// Records, Bytes and Pages are what the window held: user records,
	// their data and partition keys, and the GetRecords pages (or
	// fan-out events) they came in.
	Records int
	Bytes   int64
	Pages   int
	// Reason is what closed the window.
	Reason WindowReason
	// Age is how long the window's oldest record had waited in it when
	// it closed: from when its page was read.
	Age time.Duration
	// Latency is the time from the window's close to the durable commit
	// of every shard's checkpoint: the Sink's calls and the commits.
	Latency time.Duration
	// Attempts is how many times the Sink was called for the window.
	Attempts int
}

// HookShardState is called when a shard's durable state changes,
// including a new shard's first state (From is 0 then, which prints and
// marshals as "NONE").
type HookShardState interface {
	OnShardState(ShardStateChanged)
}

// ShardStateChanged describes a durable change of a shard's state.
type ShardStateChanged struct {
	Stream, ShardID string
	From, To        ShardState
}

// HookInitResolved is called after initialisation journaled its batch and
// before any shard is read.
type HookInitResolved interface {
	OnInitResolved(InitResolved)
}

// InitResolved describes a finished initialisation.
type InitResolved struct {
	Stream string
	// Resolved is how many LATEST positions were resolved, with Strategy;
	// Reused is how many shards to read kept a position stored by an
	// earlier run (in the journal or the Sink).
	Resolved, Reused int
	// Strategy is the strategy of the Resolver that resolved them
	// (Config.ResolveStrategy, or that of [WithResolver]'s Resolver).
	Strategy scan.Strategy
	// Unanswered is how many probes of the probe strategy went
	// unanswered while a control call answered (an endpoint that never
	// answers AT_TIMESTAMP past a shard's last record, like kinesalite),
	// and were taken for "no record there": [scan.Stats].Unanswered,
	// summed. No shard falls back to a full scan.
	Unanswered int
	// Positions is where every shard to read (tracked, listed, not yet
	// COMPLETED) resumes, as journaled. The hook may keep the map.
	Positions map[string]scan.Position
	Duration  time.Duration
	// T0 is the time on Kinesis's clock the LATEST positions were resolved
	// at: each is just after the last record that arrived before T0. Zero
	// when nothing was resolved.
	T0 time.Time
}

// HookInitProgress is called during initialisation each time one shard's
// LATEST has been resolved (not yet journaled: the batch is published as a
// whole, or not at all).
type HookInitProgress interface {
	OnInitProgress(InitProgress)
}

// InitProgress describes one resolved shard of a pending batch.
type InitProgress struct {
	Stream, ShardID string
	// Position is the shard's resolved start.
	Position scan.Position
	// Done of Total shards of the batch are resolved.
	Done, Total int
	// Calls and Bytes are what resolving this shard cost.
	Calls int
	Bytes int64
}

// HookFetched is called after every GetRecords call of a consume loop,
// including empty pages: it is how far behind each shard is.
type HookFetched interface {
	OnFetched(Fetched)
}

// Fetched describes one GetRecords page.
type Fetched struct {
	Stream, ShardID    string
	Records            int
	Bytes              int64
	MillisBehindLatest int64
}

// HookThrottled is called when Kinesis refused a call for exceeding a
// limit; the Loader backs off and tries again. [HookRetry] is called for
// the same retry too.
type HookThrottled interface {
	OnThrottled(Throttled)
}

// Throttled describes one throttled call.
type Throttled struct {
	Stream, ShardID string
	Op              string
	// Attempt counts the failed tries of this call so far, from 1.
	Attempt int
	Backoff time.Duration
	Err     error
}

// MarshalJSON encodes t with Err as its message: an SDK error may hold
// values JSON cannot encode (the HTTP request's functions).
func (t Throttled) MarshalJSON() ([]byte, error) {
	type plain Throttled
	return json.Marshal(struct {
		plain
		Err string `json:",omitempty"`
	}{plain(t), errText(t.Err)})
}

// HookRetry is called before a failed call or delivery is tried again:
// every transient Kinesis failure (throttling included), every refused
// batch (without limit by default: Config.SinkRetries), and every
// initialisation that failed
// transiently and is started over. A Loader that keeps retrying (an
// outage) shows it here, with growing Attempt counts, and in
// [Loader.Stats].
type HookRetry interface {
	OnRetry(Retry)
}

// Retry describes one retry.
type Retry struct {
	Stream, ShardID string
	// Op is the failed operation: "GetRecords", "GetShardIterator",
	// "ListShards", "Deliver", "Initialise" (a whole initialisation,
	// started over), or from the LATEST scan of initialisation.
	Op string
	// Attempt counts the failed tries so far, from 1.
	Attempt int
	// Backoff is the wait before the next try.
	Backoff time.Duration
	Err     error
}

// MarshalJSON encodes r with Err as its message, like
// [Throttled.MarshalJSON].
func (r Retry) MarshalJSON() ([]byte, error) {
	type plain Retry
	return json.Marshal(struct {
		plain
		Err string `json:",omitempty"`
	}{plain(r), errText(r.Err)})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// HookIteratorRenewed is called when a shard's iterator expired and a new
// one was taken after the last record read.
type HookIteratorRenewed interface {
	OnIteratorRenewed(IteratorRenewed)
}

// IteratorRenewed describes one renewal.
type IteratorRenewed struct {
	Stream, ShardID string
	// From is the position of the new iterator.
	From string
}

// HookDecodeFailed is called when a Kinesis record looked encoded (for
// the default decoder: it starts with the KPL magic bytes) but failed a
// check. The record is delivered as one plain record, as KCL does: nothing
// is dropped.
type HookDecodeFailed interface {
	OnDecodeFailed(DecodeFailed)
}

// DecodeFailed describes one Kinesis record delivered as plain because it
// could not be decoded.
type DecodeFailed struct {
	Stream, ShardID string
	SequenceNumber  string
	// Err says which check failed; for the default decoder it wraps
	// [ErrBadAggregate].
	Err error
}

// HookHashKeyOutOfRange is called when user records of a KPL aggregate
// have hash keys outside the hash key range of the shard they were read
// from. They are delivered like the others (see the package docs, "KPL
// aggregation", for why, and what KCL does instead).
type HookHashKeyOutOfRange interface {
	OnHashKeyOutOfRange(HashKeyOutOfRange)
}

// HashKeyOutOfRange describes the user records of one aggregate whose
// hash keys are outside their shard's range.
type HashKeyOutOfRange struct {
	Stream, ShardID string
	// SequenceNumber is the aggregate's; Records of its user records are
	// outside the range, the first at SubSequenceNumber.
	SequenceNumber    string
	Records           int
	SubSequenceNumber int64
	// HashKey is the first one's effective hash key in decimal: its
	// explicit hash key, or the MD5 of its partition key. An explicit
	// hash key that is not a number from 0 to 2^128-1 counts as outside;
	// HashKey is then empty.
	HashKey string
	// StartingHashKey and EndingHashKey are the shard's range.
	StartingHashKey, EndingHashKey string
}

// HookLeaseAcquired is called when this host was granted a shard's lease
// and starts reading the shard. With the default coordinator (one
// process) every shard read gets one, of reason [AcquireInitial] and epoch
// 0, at the start of every session.
type HookLeaseAcquired interface {
	OnLeaseAcquired(LeaseAcquired)
}

// LeaseAcquired describes a lease this host starts reading under.
type LeaseAcquired struct {
	Stream, ShardID string
	// Epoch is the lease's fencing epoch.
	Epoch uint64
	// Reason says what the shard's lease was before.
	Reason AcquireReason
	// Position is where reading resumes.
	Position scan.Position
}

// HookLeaseLost is called when a shard stopped on this host because its
// lease was lost (see [LostReason]): the delivery in flight was cancelled
// (or, for [LostSinkFenced], refused by the [TransactionalSink]) and
// nothing more of the shard is committed here; the host that holds the
// lease now resumes from the last commit, so the uncommitted batch may be
// delivered twice (a TransactionalSink stores it once). Only in a fleet
// are leases lost.
type HookLeaseLost interface {
	OnLeaseLost(LeaseLost)
}

// LeaseLost describes a lost lease.
type LeaseLost struct {
	Stream, ShardID string
	// Epoch is the epoch the lease had.
	Epoch  uint64
	Reason LostReason
	// Err is the coordinator's [*LeaseLostError], in its words; nil if
	// it gave none.
	Err error
	// Held is how long this host held the lease.
	Held time.Duration
}

// MarshalJSON encodes e with Err as its message, like
// [Throttled.MarshalJSON].
func (e LeaseLost) MarshalJSON() ([]byte, error) {
	type plain LeaseLost
	return json.Marshal(struct {
		plain
		Err string `json:",omitempty"`
	}{plain(e), errText(e.Err)})
}

// HookLeaseHandedOff is called when this host gave a shard's lease up on
// a planned move (see [HandoffReason]): it stopped reading the shard, the
// batch in flight finished and was committed, and the lease was released,
// so the next owner delivers nothing twice (except after [HandoffStop] by
// a hard stop, whose batch in flight was cancelled). A shard that reached
// its end is released too, without this hook: [HookShardState] reports its
// COMPLETED state.
type HookLeaseHandedOff interface {
	OnLeaseHandedOff(LeaseHandedOff)
}

// LeaseHandedOff describes a lease given up.
type LeaseHandedOff struct {
	Stream, ShardID string
	Epoch           uint64
	Reason          HandoffReason
	// Position is the shard's committed position at the release: where
	// the next owner resumes.
	Position scan.Position
	// Held is how long this host held the lease.
	Held time.Duration
}

// hooks fans events out to the hooks that implement each interface.
type hooks struct {
	delivered []HookBatchDelivered
	windows   []HookWindowDelivered
	state     []HookShardState
	init      []HookInitResolved
	throttled []HookThrottled
	retry     []HookRetry
	renewed   []HookIteratorRenewed
	progress  []HookInitProgress
	fetched   []HookFetched
	decode    []HookDecodeFailed
	outside   []HookHashKeyOutOfRange
	acquired  []HookLeaseAcquired
	lost      []HookLeaseLost
	handedOff []HookLeaseHandedOff

	// log and panics record hooks that panicked: a hook observes, so its
	// panic is logged with the stack, counted, and does not stop the
	// Loader. Set by New.
	log    *slog.Logger
	panics *atomic.Int64
	// obs receives the bytes of every delivered batch for the lease of
	// its shard ([LoadObserver]). Set by New.
	obs *observers
}

// call calls one hook method, recovering a panic.
func (h *hooks) call(method string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			pe := newPanicError("hook "+method, r)
			n := int64(1)
			if h.panics != nil {
				n = h.panics.Add(1)
			}
			log := h.log
			if log == nil {
				log = slog.Default()
			}
			log.Error("a hook panicked; the Loader goes on", "hook", method, "panic", fmt.Sprint(r), "panics", n, "stack", string(pe.Stack))
		}
	}()
	f()
}

// newHooks sorts hs by the interfaces each implements. It refuses a value
// that implements none, naming its place among the arguments.
func newHooks(hs []Hook) (hooks, error) {
	var h hooks
	for i, x := range hs {
		n := 0
		n += addHook(&h.delivered, x)
		n += addHook(&h.windows, x)
		n += addHook(&h.state, x)
		n += addHook(&h.init, x)
		n += addHook(&h.throttled, x)
		n += addHook(&h.retry, x)
		n += addHook(&h.renewed, x)
		n += addHook(&h.progress, x)
		n += addHook(&h.fetched, x)
		n += addHook(&h.decode, x)
		n += addHook(&h.outside, x)
		n += addHook(&h.acquired, x)
		n += addHook(&h.lost, x)
		n += addHook(&h.handedOff, x)
		if n == 0 {
			return hooks{}, fmt.Errorf("%w: WithHooks argument %d (%T) implements no Hook interface", ErrInvalidConfig, i, x)
		}
	}
	return h, nil
}

// addHook appends x to list if x implements H, and reports 1 if it did.
func addHook[H any](list *[]H, x Hook) int {
	v, ok := x.(H)
	if !ok {
		return 0
	}
	*list = append(*list, v)
	return 1
}

func (h *hooks) onDelivered(e BatchDelivered) {
	if h.obs != nil {
		h.obs.observe(e.ShardID, e.Bytes)
	}
	for _, x := range h.delivered {
		h.call("OnBatchDelivered", func() { x.OnBatchDelivered(e) })
	}
}

func (h *hooks) onWindow(e WindowDelivered) {
	for _, x := range h.windows {
		h.call("OnWindowDelivered", func() { x.OnWindowDelivered(e) })
	}
}

func (h *hooks) onState(e ShardStateChanged) {
	for _, x := range h.state {
		h.call("OnShardState", func() { x.OnShardState(e) })
	}
}

func (h *hooks) onInit(e InitResolved) {
	for _, x := range h.init {
		h.call("OnInitResolved", func() { x.OnInitResolved(e) })
	}
}

func (h *hooks) onThrottled(e Throttled) {
	for _, x := range h.throttled {
		h.call("OnThrottled", func() { x.OnThrottled(e) })
	}
}

func (h *hooks) onRetry(e Retry) {
	for _, x := range h.retry {
		h.call("OnRetry", func() { x.OnRetry(e) })
	}
}

func (h *hooks) onRenewed(e IteratorRenewed) {
	for _, x := range h.renewed {
		h.call("OnIteratorRenewed", func() { x.OnIteratorRenewed(e) })
	}
}

func (h *hooks) onProgress(e InitProgress) {
	for _, x := range h.progress {
		h.call("OnInitProgress", func() { x.OnInitProgress(e) })
	}
}

func (h *hooks) onFetched(e Fetched) {
	for _, x := range h.fetched {
		h.call("OnFetched", func() { x.OnFetched(e) })
	}
}

func (h *hooks) onDecodeFailed(e DecodeFailed) {
	for _, x := range h.decode {
		h.call("OnDecodeFailed", func() { x.OnDecodeFailed(e) })
	}
}

func (h *hooks) onOutOfRange(e HashKeyOutOfRange) {
	for _, x := range h.outside {
		h.call("OnHashKeyOutOfRange", func() { x.OnHashKeyOutOfRange(e) })
	}
}

func (h *hooks) onLeaseAcquired(e LeaseAcquired) {
	for _, x := range h.acquired {
		h.call("OnLeaseAcquired", func() { x.OnLeaseAcquired(e) })
	}
}

func (h *hooks) onLeaseLost(e LeaseLost) {
	for _, x := range h.lost {
		h.call("OnLeaseLost", func() { x.OnLeaseLost(e) })
	}
}

func (h *hooks) onLeaseHandedOff(e LeaseHandedOff) {
	for _, x := range h.handedOff {
		h.call("OnLeaseHandedOff", func() { x.OnLeaseHandedOff(e) })
	}
}
