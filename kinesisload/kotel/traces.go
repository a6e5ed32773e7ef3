package kotel

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// MessagingSystem is the value of messaging.system on every span. The
// messaging semantic conventions (v1.43.0, the version of the semconv
// package kotel uses) list no value for Kinesis and allow a custom one;
// this one is spelled like their "aws_sqs".
const MessagingSystem = "aws_kinesis"

// The attribute keys of the spans that the messaging semantic conventions
// do not define; see the package documentation for which span carries
// which. [AttrReason] is on spans too.
const (
	// AttrBytes is the payload bytes (data and partition keys) of the
	// records of a page or batch.
	AttrBytes = attribute.Key("tidemark.bytes")
	// AttrMillisBehind is the MillisBehindLatest of a page or batch: 0
	// at the tip.
	AttrMillisBehind = attribute.Key("tidemark.millis_behind_latest")
	// AttrAttempts is how many times the Sink was called for a delivered
	// batch: 1 unless it refused the batch.
	AttrAttempts = attribute.Key("tidemark.attempts")
	// AttrRetryAttempt counts the failed tries of an operation so far,
	// from 1, on the span of a failed try.
	AttrRetryAttempt = attribute.Key("tidemark.retry.attempt")
	// AttrRetryBackoff is the wait, in seconds, before the next try, on
	// the span of a failed try.
	AttrRetryBackoff = attribute.Key("tidemark.retry.backoff")
	// AttrPosition is a shard position, as scan.Position.String formats
	// it, such as "AFTER_SEQUENCE_NUMBER:4955...".
	AttrPosition = attribute.Key("tidemark.position")
	// AttrInitShards is how many shards an initialisation left to read
	// (tracked, listed and not COMPLETED).
	AttrInitShards = attribute.Key("tidemark.init.shards")
	// AttrInitResolved is how many LATEST positions an initialisation
	// resolved.
	AttrInitResolved = attribute.Key("tidemark.init.resolved")
	// AttrInitReused is how many shards to read kept a position stored by
	// an earlier run.
	AttrInitReused = attribute.Key("tidemark.init.reused")
	// AttrInitStrategy is the resolve strategy: "probe" or "full-scan".
	AttrInitStrategy = attribute.Key("tidemark.init.strategy")
	// AttrInitUnanswered is how many probes went unanswered
	// (InitResolved.Unanswered).
	AttrInitUnanswered = attribute.Key("tidemark.init.unanswered")
	// AttrInitT0 is the time, on Kinesis's clock, the LATEST positions
	// were resolved at, in RFC 3339 with nanoseconds, UTC. Absent when
	// nothing was resolved.
	AttrInitT0 = attribute.Key("tidemark.init.t0")
	// AttrInitDone and AttrInitTotal are, on the event of a resolved
	// shard, how many shards of the initialisation were resolved, and of
	// how many.
	AttrInitDone  = attribute.Key("tidemark.init.done")
	AttrInitTotal = attribute.Key("tidemark.init.total")
	// AttrInitCalls is, on the event of a resolved shard, the Kinesis
	// calls resolving it took.
	AttrInitCalls = attribute.Key("tidemark.init.calls")
	// AttrEpoch is a lease's fencing epoch.
	AttrEpoch = attribute.Key("tidemark.lease.epoch")
	// AttrRelease is how a lease held ended: "lost" or "handed_off".
	AttrRelease = attribute.Key("tidemark.lease.release")
	// AttrWindowShards is how many shards had a batch in a window.
	AttrWindowShards = attribute.Key("tidemark.window.shards")
	// AttrWindowPages is how many pages a window held.
	AttrWindowPages = attribute.Key("tidemark.window.pages")
	// AttrWindowAge is how long a window's oldest record had waited in
	// it when it closed, in seconds.
	AttrWindowAge = attribute.Key("tidemark.window.age")
	// AttrWindowWait is, on a process span, how long the batch's oldest
	// record waited in its window, in seconds; absent without windows.
	AttrWindowWait = attribute.Key("tidemark.window.wait")
)

// spanOwnKeys are the tidemark keys of the spans; [WithAttributes] refuses
// them like the other Attr constants.
var spanOwnKeys = []attribute.Key{AttrBytes, AttrMillisBehind, AttrAttempts, AttrRetryAttempt, AttrRetryBackoff,
	AttrPosition, AttrInitShards, AttrInitResolved, AttrInitReused, AttrInitStrategy, AttrInitUnanswered, AttrInitT0,
	AttrInitDone, AttrInitTotal, AttrInitCalls, AttrEpoch, AttrRelease, AttrWindowShards, AttrWindowPages, AttrWindowAge,
	AttrWindowWait}

// semconvKeys are the semantic-convention keys the spans have; NewTraces
// refuses them in [WithAttributes].
var semconvKeys = []attribute.Key{
	semconv.MessagingSystemKey,
	semconv.MessagingDestinationNameKey,
	semconv.MessagingDestinationPartitionIDKey,
	semconv.MessagingOperationNameKey,
	semconv.MessagingOperationTypeKey,
	semconv.MessagingBatchMessageCountKey,
	semconv.ErrorTypeKey,
}

// The operations that name the spans: "{operation} {stream}", as the
// messaging conventions name spans.
const (
	opFetch      = "fetch"
	opProcess    = "process"
	opInitialise = "initialise"
	opAcquired   = "lease acquired"
	opHeld       = "lease held"
	opWindow     = "window"
)

// EventShardResolved is the name of the event of an initialise span for
// each shard whose LATEST the initialisation resolved.
const EventShardResolved = "shard resolved"

// maxInitEvents bounds the shard resolved events kept for one stream's
// initialisation, the latest ones, as the SDK's default span limits keep
// the latest 128 events.
const maxInitEvents = 128

// WithEmptyFetchSpans makes [NewTraces]'s Traces record a fetch span for
// every page, empty ones too: an idle shard then makes about one span per
// Config.IdleWait (1 s by default). Default: only a page that holds
// records makes a fetch span (the metric tidemark.getrecords.pages counts
// every page). An option of NewTraces only.
func WithEmptyFetchSpans() Option {
	return optionFunc(func(c *config) {
		c.tracesOnly = append(c.tracesOnly, "WithEmptyFetchSpans")
		c.emptyFetches = true
	})
}

// Traces records the Loader's hook events as OpenTelemetry spans (see the
// package documentation). Give it to [kinesisload.WithHooks], next to
// [Metrics] or alone. Its methods are fast and safe for concurrent use, as
// the Loader requires; they wait for nothing but a lock held for a few
// map operations (the resolved shards of a pending initialisation).
type Traces struct {
	tracer       trace.Tracer
	extra        []attribute.KeyValue
	emptyFetches bool

	mu sync.Mutex
	// progress holds, by stream, the shards resolved by the pending
	// initialisation, for the events of its span.
	progress map[string][]resolvedShard
}

// resolvedShard is an InitProgress event and when it came.
type resolvedShard struct {
	at time.Time
	e  kinesisload.InitProgress
}

// Interface checks: the hooks Traces makes spans of.
var (
	_ kinesisload.HookBatchDelivered  = (*Traces)(nil)
	_ kinesisload.HookWindowDelivered = (*Traces)(nil)
	_ kinesisload.HookFetched         = (*Traces)(nil)
	_ kinesisload.HookRetry           = (*Traces)(nil)
	_ kinesisload.HookInitProgress    = (*Traces)(nil)
	_ kinesisload.HookInitResolved    = (*Traces)(nil)
	_ kinesisload.HookLeaseAcquired   = (*Traces)(nil)
	_ kinesisload.HookLeaseLost       = (*Traces)(nil)
	_ kinesisload.HookLeaseHandedOff  = (*Traces)(nil)
)

// NewTraces returns a Traces that records its spans on a Tracer named
// [ScopeName] from tp, with the schema URL of the semantic conventions it
// follows. Options: [WithAttributes] and [WithEmptyFetchSpans]. The error
// wraps [ErrNilTracerProvider] or [ErrInvalidOption].
func NewTraces(tp trace.TracerProvider, opts ...Option) (*Traces, error) {
	if tp == nil {
		return nil, ErrNilTracerProvider
	}
	cfg, err := configure("NewTraces", opts)
	if err != nil {
		return nil, err
	}
	for _, a := range cfg.extra {
		if slices.Contains(semconvKeys, a.Key) {
			return nil, fmt.Errorf("%w: WithAttributes: key %q is one NewTraces sets", ErrInvalidOption, string(a.Key))
		}
	}
	return &Traces{
		tracer:       tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		extra:        cfg.extra,
		emptyFetches: cfg.emptyFetches,
		progress:     map[string][]resolvedShard{},
	}, nil
}

// start starts the span "{op} {stream}" at the time at, with the
// attributes of every span, kv, and the extra attributes. The hooks report
// what happened after the fact, so every span is started and ended with
// explicit timestamps, as a root span: the Loader passes no context to
// its hooks.
func (t *Traces) start(op, stream string, kind trace.SpanKind, at time.Time, kv ...attribute.KeyValue) trace.Span {
	attrs := make([]attribute.KeyValue, 0, 2+len(kv)+len(t.extra))
	attrs = append(attrs, semconv.MessagingSystemKey.String(MessagingSystem), semconv.MessagingDestinationName(stream))
	attrs = append(attrs, kv...)
	attrs = append(attrs, t.extra...)
	name := op
	if stream != "" {
		name += " " + stream
	}
	_, s := t.tracer.Start(context.Background(), name,
		trace.WithSpanKind(kind), trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	return s
}

// processAttrs are the attributes of a process span after those of
// every span.
func processAttrs(shard string, kv ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		semconv.MessagingDestinationPartitionID(shard),
		semconv.MessagingOperationName(opProcess),
		semconv.MessagingOperationTypeProcess,
	}, kv...)
}

// OnBatchDelivered implements [kinesisload.HookBatchDelivered]: a process
// span from the moment the consume loop took the batch's page (now less
// e.Latency) to now, just after the durable commit of its checkpoint.
func (t *Traces) OnBatchDelivered(e kinesisload.BatchDelivered) {
	end := time.Now()
	kv := []attribute.KeyValue{semconv.MessagingBatchMessageCount(e.Records),
		AttrBytes.Int64(e.Bytes),
		AttrMillisBehind.Int64(e.MillisBehindLatest),
		AttrAttempts.Int(e.Attempts)}
	if e.Waited > 0 {
		kv = append(kv, AttrWindowWait.Float64(e.Waited.Seconds()))
	}
	s := t.start(opProcess, e.Stream, trace.SpanKindConsumer, end.Add(-e.Latency), processAttrs(e.ShardID, kv...)...)
	s.End(trace.WithTimestamp(end))
}

// OnWindowDelivered implements [kinesisload.HookWindowDelivered]: a
// window span from the read of the window's oldest record (now less
// e.Latency and e.Age) to now, just after the durable commit of every
// shard's checkpoint in it.
func (t *Traces) OnWindowDelivered(e kinesisload.WindowDelivered) {
	end := time.Now()
	s := t.start(opWindow, e.Stream, trace.SpanKindInternal, end.Add(-e.Latency-e.Age),
		semconv.MessagingBatchMessageCount(e.Records),
		AttrBytes.Int64(e.Bytes),
		AttrWindowShards.Int(e.Shards),
		AttrWindowPages.Int(e.Pages),
		AttrWindowReason.String(e.Reason.String()),
		AttrWindowAge.Float64(e.Age.Seconds()),
		AttrAttempts.Int(e.Attempts))
	s.End(trace.WithTimestamp(end))
}

// OnFetched implements [kinesisload.HookFetched]: a fetch span of no
// length (the hook gives no duration) for a page that holds records, or
// for every page with [WithEmptyFetchSpans].
func (t *Traces) OnFetched(e kinesisload.Fetched) {
	if e.Records == 0 && !t.emptyFetches {
		return
	}
	now := time.Now()
	s := t.start(opFetch, e.Stream, trace.SpanKindInternal, now,
		semconv.MessagingDestinationPartitionID(e.ShardID),
		semconv.MessagingBatchMessageCount(e.Records),
		AttrBytes.Int64(e.Bytes),
		AttrMillisBehind.Int64(e.MillisBehindLatest))
	s.End(trace.WithTimestamp(now))
}

// OnRetry implements [kinesisload.HookRetry]: a batch the Sink refused
// (Op "Deliver") makes a process span of no length with status Error, an
// initialisation started over (Op "Initialise") an initialise span of no
// length with status Error. Retries of Kinesis calls make no span: the
// metrics count them.
func (t *Traces) OnRetry(e kinesisload.Retry) {
	switch e.Op {
	case "Deliver":
		t.failed(opProcess, trace.SpanKindConsumer, e, processAttrs(e.ShardID)...)
	case "Initialise":
		t.mu.Lock()
		delete(t.progress, e.Stream) // the next try resolves again
		t.mu.Unlock()
		t.failed(opInitialise, trace.SpanKindInternal, e)
	}
}

// failed records the span of no length of a failed try that e retries:
// status Error with the error's message, error.type, and the error as an
// exception event.
func (t *Traces) failed(op string, kind trace.SpanKind, e kinesisload.Retry, kv ...attribute.KeyValue) {
	now := time.Now()
	kv = append(kv, AttrRetryAttempt.Int(e.Attempt), AttrRetryBackoff.Float64(e.Backoff.Seconds()), semconv.ErrorType(e.Err))
	s := t.start(op, e.Stream, kind, now, kv...)
	msg := "failed"
	if e.Err != nil {
		msg = e.Err.Error()
		s.RecordError(e.Err, trace.WithTimestamp(now))
	}
	s.SetStatus(codes.Error, msg)
	s.End(trace.WithTimestamp(now))
}

// OnInitProgress implements [kinesisload.HookInitProgress]: it keeps the
// event (the latest 128 of a stream) for the span of
// [Traces.OnInitResolved].
func (t *Traces) OnInitProgress(e kinesisload.InitProgress) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.progress[e.Stream]
	if len(p) == maxInitEvents {
		p = append(p[:0], p[1:]...)
	}
	t.progress[e.Stream] = append(p, resolvedShard{now, e})
}

// OnInitResolved implements [kinesisload.HookInitResolved]: an initialise
// span from the start of the initialisation (now less e.Duration) to now,
// with an event for each shard resolved since its start.
func (t *Traces) OnInitResolved(e kinesisload.InitResolved) {
	end := time.Now()
	start := end.Add(-e.Duration)
	t.mu.Lock()
	resolved := t.progress[e.Stream]
	delete(t.progress, e.Stream)
	t.mu.Unlock()
	kv := []attribute.KeyValue{
		AttrInitShards.Int(len(e.Positions)),
		AttrInitResolved.Int(e.Resolved),
		AttrInitReused.Int(e.Reused),
		AttrInitStrategy.String(e.Strategy.String()),
		AttrInitUnanswered.Int(e.Unanswered),
	}
	if !e.T0.IsZero() {
		kv = append(kv, AttrInitT0.String(e.T0.UTC().Format(time.RFC3339Nano)))
	}
	s := t.start(opInitialise, e.Stream, trace.SpanKindInternal, start, kv...)
	if s.IsRecording() {
		for _, r := range resolved {
			if r.at.Before(start) {
				continue // resolved by an earlier try that failed
			}
			s.AddEvent(EventShardResolved, trace.WithTimestamp(r.at), trace.WithAttributes(
				semconv.MessagingDestinationPartitionID(r.e.ShardID),
				AttrPosition.String(r.e.Position.String()),
				AttrInitDone.Int(r.e.Done),
				AttrInitTotal.Int(r.e.Total),
				AttrInitCalls.Int(r.e.Calls),
				AttrBytes.Int64(r.e.Bytes)))
		}
	}
	s.End(trace.WithTimestamp(end))
}

// leaseAttrs are the attributes of a lease span after those of every
// span; pos is left out if it is unset.
func leaseAttrs(shard string, epoch uint64, reason fmt.Stringer, pos scan.Position, kv ...attribute.KeyValue) []attribute.KeyValue {
	a := append([]attribute.KeyValue{
		semconv.MessagingDestinationPartitionID(shard),
		AttrEpoch.Int64(int64(min(epoch, math.MaxInt64))),
		AttrReason.String(reason.String()),
	}, kv...)
	if pos.Kind != 0 {
		a = append(a, AttrPosition.String(pos.String()))
	}
	return a
}

// OnLeaseAcquired implements [kinesisload.HookLeaseAcquired]: a lease
// acquired span of no length.
func (t *Traces) OnLeaseAcquired(e kinesisload.LeaseAcquired) {
	now := time.Now()
	s := t.start(opAcquired, e.Stream, trace.SpanKindInternal, now, leaseAttrs(e.ShardID, e.Epoch, e.Reason, e.Position)...)
	s.End(trace.WithTimestamp(now))
}

// OnLeaseLost implements [kinesisload.HookLeaseLost]: a lease held span
// over the time the lease was held (e.Held, up to now), with status Error.
func (t *Traces) OnLeaseLost(e kinesisload.LeaseLost) {
	end := time.Now()
	s := t.start(opHeld, e.Stream, trace.SpanKindInternal, end.Add(-e.Held), leaseAttrs(e.ShardID, e.Epoch, e.Reason, scan.Position{},
		AttrRelease.String("lost"), semconv.ErrorTypeKey.String(e.Reason.String()))...)
	if e.Err != nil {
		s.RecordError(e.Err, trace.WithTimestamp(end))
	}
	s.SetStatus(codes.Error, "lease lost: "+e.Reason.String())
	s.End(trace.WithTimestamp(end))
}

// OnLeaseHandedOff implements [kinesisload.HookLeaseHandedOff]: a lease
// held span over the time the lease was held (e.Held, up to now).
func (t *Traces) OnLeaseHandedOff(e kinesisload.LeaseHandedOff) {
	end := time.Now()
	s := t.start(opHeld, e.Stream, trace.SpanKindInternal, end.Add(-e.Held), leaseAttrs(e.ShardID, e.Epoch, e.Reason, e.Position,
		AttrRelease.String("handed_off"))...)
	s.End(trace.WithTimestamp(end))
}
