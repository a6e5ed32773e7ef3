package kotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kotel"
	"github.com/tidemark/tidemark/scan"
)

// newTraces returns a Traces on an SDK TracerProvider that hands every
// ended span, synchronously, to an in-memory exporter.
func newTraces(t *testing.T, opts ...kotel.Option) (*kotel.Traces, *tracetest.InMemoryExporter) {
	t.Helper()
	return newTracesLimits(t, sdktrace.NewSpanLimits(), opts...)
}

// newTracesLimits is newTraces with the SDK's span limits.
func newTracesLimits(t *testing.T, limits sdktrace.SpanLimits, opts ...kotel.Option) (*kotel.Traces, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithRawSpanLimits(limits))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := kotel.NewTraces(tp, opts...)
	if err != nil {
		t.Fatalf("NewTraces: %v", err)
	}
	return tr, exp
}

// attrs returns a span's or event's attributes by key.
func attrs(kv []attribute.KeyValue) map[string]any {
	out := map[string]any{}
	for _, a := range kv {
		out[string(a.Key)] = a.Value.AsInterface()
	}
	return out
}

// common returns the attributes of every span of stream orders, with kv.
func common(kv ...any) map[string]any {
	out := map[string]any{"messaging.system": "aws_kinesis", "messaging.destination.name": stream}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// named returns the spans called name.
func named(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only span called name, failing the test if there is
// not exactly one.
func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := named(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans %q, want 1; all spans: %v", len(got), name, spanNames(spans))
	}
	return got[0]
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// checkRoot fails the test unless s is a root span of kotel's scope.
func checkRoot(t *testing.T, s tracetest.SpanStub) {
	t.Helper()
	if s.Parent.IsValid() {
		t.Errorf("span %q has parent %v, want a root span", s.Name, s.Parent.SpanID())
	}
	if s.InstrumentationScope.Name != kotel.ScopeName || s.InstrumentationScope.SchemaURL != semconv.SchemaURL {
		t.Errorf("span %q: scope %q, schema %q; want %q, %q", s.Name, s.InstrumentationScope.Name,
			s.InstrumentationScope.SchemaURL, kotel.ScopeName, semconv.SchemaURL)
	}
}

// checkEnd fails the test unless s ended between before and after, and
// lasted d.
func checkEnd(t *testing.T, s tracetest.SpanStub, before, after time.Time, d time.Duration) {
	t.Helper()
	if s.EndTime.Before(before) || s.EndTime.After(after) {
		t.Errorf("span %q ended at %v, want between %v and %v", s.Name, s.EndTime, before, after)
	}
	if got := s.EndTime.Sub(s.StartTime); got != d {
		t.Errorf("span %q lasted %v, want %v", s.Name, got, d)
	}
}

func TestNewTracesErrors(t *testing.T) {
	tp := tracenoop.NewTracerProvider()
	tests := []struct {
		name string
		tp   trace.TracerProvider
		opts []kotel.Option
		want error
		msg  string // a part of the message
	}{
		{"nil TracerProvider", nil, nil, kotel.ErrNilTracerProvider, "nil TracerProvider"},
		{"nil option", tp, []kotel.Option{nil}, kotel.ErrInvalidOption, "nil Option"},
		{"metrics option", tp, []kotel.Option{kotel.WithBatchLatencyBuckets(1, 2)}, kotel.ErrInvalidOption, "WithBatchLatencyBuckets is an option of New, not NewTraces"},
		{"metrics option 2", tp, []kotel.Option{kotel.WithInitDurationBuckets(1, 2)}, kotel.ErrInvalidOption, "WithInitDurationBuckets is an option of New, not NewTraces"},
		{"own key", tp, []kotel.Option{kotel.WithAttributes(kotel.AttrBytes.Int(1))}, kotel.ErrInvalidOption, `key "tidemark.bytes" is one of kotel's own`},
		{"semconv key", tp, []kotel.Option{kotel.WithAttributes(semconv.MessagingDestinationPartitionID("x"))}, kotel.ErrInvalidOption, `key "messaging.destination.partition.id" is one NewTraces sets`},
		{"error.type", tp, []kotel.Option{kotel.WithAttributes(attribute.String("error.type", "x"))}, kotel.ErrInvalidOption, `key "error.type" is one NewTraces sets`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := kotel.NewTraces(tt.tp, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("NewTraces: error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("NewTraces: error %q does not contain %q", err, tt.msg)
			}
			if tr != nil {
				t.Errorf("NewTraces: Traces %v with an error, want nil", tr)
			}
		})
	}
}

// TestNewTracesConsumerGroup: a semantic-convention key kotel does not set
// is welcome.
func TestNewTracesConsumerGroup(t *testing.T) {
	tr, exp := newTraces(t, kotel.WithAttributes(semconv.MessagingConsumerGroupName("billing")))
	tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 1, Attempts: 1})
	s := one(t, exp.GetSpans(), "process orders")
	if g := attrs(s.Attributes)["messaging.consumer.group.name"]; g != "billing" {
		t.Errorf("messaging.consumer.group.name = %v, want billing", g)
	}
}

// TestTracesProcess: a delivered batch is a CONSUMER span named after the
// stream, from the page's taking (Latency before the hook) to the hook.
func TestTracesProcess(t *testing.T) {
	tr, exp := newTraces(t)
	before := time.Now()
	tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 3, Bytes: 30,
		MillisBehindLatest: 1500, Latency: 250 * time.Millisecond, Attempts: 2})
	after := time.Now()

	s := one(t, exp.GetSpans(), "process orders")
	checkRoot(t, s)
	if s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kind %v, want %v", s.SpanKind, trace.SpanKindConsumer)
	}
	want := common("messaging.destination.partition.id", shard0, "messaging.operation.name", "process",
		"messaging.operation.type", "process", "messaging.batch.message_count", int64(3),
		"tidemark.bytes", int64(30), "tidemark.millis_behind_latest", int64(1500), "tidemark.attempts", int64(2))
	if diff := cmp.Diff(want, attrs(s.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	checkEnd(t, s, before, after, 250*time.Millisecond)
	if s.Status.Code != codes.Unset || len(s.Events) != 0 {
		t.Errorf("status %v, events %v; want Unset and none", s.Status, s.Events)
	}
}

// TestTracesWindow: a window is an INTERNAL span from the read of its
// oldest record (Age and Latency before the hook) to the hook; a batch of
// a window has its wait in the window on its process span, and no such
// attribute without windows.
func TestTracesWindow(t *testing.T) {
	tr, exp := newTraces(t)
	before := time.Now()
	tr.OnWindowDelivered(kinesisload.WindowDelivered{Stream: stream, Shards: 3, Records: 40, Bytes: 400, Pages: 5,
		Reason: kinesisload.WindowRecords, Age: 800 * time.Millisecond, Latency: 50 * time.Millisecond, Attempts: 2})
	after := time.Now()
	s := one(t, exp.GetSpans(), "window orders")
	checkRoot(t, s)
	if s.SpanKind != trace.SpanKindInternal {
		t.Errorf("kind %v, want %v", s.SpanKind, trace.SpanKindInternal)
	}
	want := common("messaging.batch.message_count", int64(40), "tidemark.bytes", int64(400), "tidemark.window.shards", int64(3),
		"tidemark.window.pages", int64(5), "tidemark.window.reason", "records", "tidemark.window.age", 0.8, "tidemark.attempts", int64(2))
	if diff := cmp.Diff(want, attrs(s.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	checkEnd(t, s, before, after, 850*time.Millisecond)

	tr, exp = newTraces(t)
	tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, Attempts: 1, Waited: 250 * time.Millisecond})
	tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard1, Records: 1, Bytes: 1, Attempts: 1})
	for _, p := range named(exp.GetSpans(), "process orders") {
		a := attrs(p.Attributes)
		wait, ok := a["tidemark.window.wait"]
		switch a["messaging.destination.partition.id"] {
		case shard0:
			if wait != 0.25 {
				t.Errorf("a batch that waited 250 ms in its window: tidemark.window.wait = %v, want 0.25", wait)
			}
		case shard1:
			if ok {
				t.Errorf("a batch without a window: tidemark.window.wait = %v, want none", wait)
			}
		}
	}
}

// TestTracesFetch: a page with records is an INTERNAL span of no length;
// an empty page is none, unless WithEmptyFetchSpans.
func TestTracesFetch(t *testing.T) {
	for _, empties := range []bool{false, true} {
		var opts []kotel.Option
		if empties {
			opts = append(opts, kotel.WithEmptyFetchSpans())
		}
		tr, exp := newTraces(t, opts...)
		before := time.Now()
		tr.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard1, Records: 4, Bytes: 40, MillisBehindLatest: 9000})
		tr.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0})
		after := time.Now()

		spans := named(exp.GetSpans(), "fetch orders")
		want := []map[string]any{common("messaging.destination.partition.id", shard1, "messaging.batch.message_count", int64(4),
			"tidemark.bytes", int64(40), "tidemark.millis_behind_latest", int64(9000))}
		if empties {
			want = append(want, common("messaging.destination.partition.id", shard0, "messaging.batch.message_count", int64(0),
				"tidemark.bytes", int64(0), "tidemark.millis_behind_latest", int64(0)))
		}
		var got []map[string]any
		for _, s := range spans {
			got = append(got, attrs(s.Attributes))
			checkRoot(t, s)
			if s.SpanKind != trace.SpanKindInternal {
				t.Errorf("kind %v, want %v", s.SpanKind, trace.SpanKindInternal)
			}
			checkEnd(t, s, before, after, 0)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("WithEmptyFetchSpans %v: fetch spans (-want +got):\n%s", empties, diff)
		}
	}
}

// TestTracesRefusedDelivery: a batch the Sink refused is a process span
// of no length with status Error, error.type and an exception event; a
// retried Kinesis call makes no span.
func TestTracesRefusedDelivery(t *testing.T) {
	tr, exp := newTraces(t)
	refused := errors.New("sink down")
	before := time.Now()
	tr.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard1, Op: "Deliver", Attempt: 2, Backoff: 1500 * time.Millisecond, Err: refused})
	after := time.Now()
	tr.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard1, Op: "GetRecords", Attempt: 1, Err: refused})
	tr.OnRetry(kinesisload.Retry{Stream: stream, Op: "ListShards", Attempt: 1, Err: refused})

	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("spans %v, want one (for Deliver)", spanNames(spans))
	}
	s := one(t, spans, "process orders")
	checkRoot(t, s)
	checkEnd(t, s, before, after, 0)
	if s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kind %v, want %v", s.SpanKind, trace.SpanKindConsumer)
	}
	want := common("messaging.destination.partition.id", shard1, "messaging.operation.name", "process",
		"messaging.operation.type", "process", "tidemark.retry.attempt", int64(2), "tidemark.retry.backoff", 1.5,
		"error.type", "*errors.errorString")
	if diff := cmp.Diff(want, attrs(s.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if s.Status.Code != codes.Error || s.Status.Description != "sink down" {
		t.Errorf("status %+v, want Error, sink down", s.Status)
	}
	if len(s.Events) != 1 || s.Events[0].Name != semconv.ExceptionEventName ||
		attrs(s.Events[0].Attributes)["exception.message"] != "sink down" {
		t.Errorf("events %+v, want one exception event with message sink down", s.Events)
	}
}

// traceHookCalls call each hook method of Traces that makes a span, once
// per span of the package documentation's table, with events that give
// every attribute of the span. by is the method's name.
var traceHookCalls = []struct {
	by   string
	call func(*kotel.Traces)
}{
	{"OnBatchDelivered", func(tr *kotel.Traces) {
		tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, Latency: time.Millisecond, Attempts: 1, Waited: time.Millisecond})
	}},
	{"OnRetry", func(tr *kotel.Traces) {
		tr.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard0, Op: "Deliver", Attempt: 1, Err: errors.New("refused")})
	}},
	{"OnWindowDelivered", func(tr *kotel.Traces) {
		tr.OnWindowDelivered(kinesisload.WindowDelivered{Stream: stream, Shards: 2, Records: 3, Bytes: 4, Pages: 2, Reason: kinesisload.WindowBudget,
			Age: time.Second, Latency: time.Millisecond, Attempts: 1})
	}},
	{"OnFetched", func(tr *kotel.Traces) {
		tr.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, MillisBehindLatest: 5})
	}},
	{"OnInitResolved", func(tr *kotel.Traces) {
		tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard0, Position: scan.AfterSequence("1"), Done: 1, Total: 1, Calls: 1, Bytes: 1})
		tr.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: 1, Duration: time.Hour, T0: time.Now()})
	}},
	{"OnRetry", func(tr *kotel.Traces) {
		tr.OnRetry(kinesisload.Retry{Stream: stream, Op: "Initialise", Attempt: 1, Err: errors.New("ListShards failed")})
	}},
	{"OnLeaseAcquired", func(tr *kotel.Traces) {
		tr.OnLeaseAcquired(kinesisload.LeaseAcquired{Stream: stream, ShardID: shard0, Epoch: 1, Reason: kinesisload.AcquireInitial, Position: scan.TrimHorizon()})
	}},
	{"OnLeaseHandedOff", func(tr *kotel.Traces) {
		tr.OnLeaseHandedOff(kinesisload.LeaseHandedOff{Stream: stream, ShardID: shard0, Epoch: 1, Reason: kinesisload.HandoffClose,
			Position: scan.AfterSequence("1"), Held: time.Second})
	}},
	{"OnLeaseLost", func(tr *kotel.Traces) {
		tr.OnLeaseLost(kinesisload.LeaseLost{Stream: stream, ShardID: shard0, Epoch: 1, Reason: kinesisload.LostExpired,
			Err: errors.New("expired"), Held: time.Second})
	}},
}

// TestSpanTable: every span of the package documentation's table is made
// by the hook, with the kind and status the table gives, and there is no
// other; every attribute key of the spans is named in the documentation,
// and the documentation of the spans names no key they lack.
func TestSpanTable(t *testing.T) {
	type row struct{ Name, Kind, Status, By string }
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	spansDoc := doc[strings.Index(doc, "// # Spans"):]
	var want []row
	line := regexp.MustCompile(`(?m)^//\t([a-z][a-z ]*? \{stream\})\s{2,}([A-Z]+)\s+(Unset|Error|Ok)\s+(On\w+)`)
	for _, m := range line.FindAllStringSubmatch(spansDoc, -1) {
		want = append(want, row{m[1], m[2], m[3], m[4]})
	}
	if len(want) != len(traceHookCalls) {
		t.Fatalf("parsed %d rows of the span table in doc.go, want %d", len(want), len(traceHookCalls))
	}

	var got []row
	keys := map[string]bool{}
	for _, c := range traceHookCalls {
		tr, exp := newTraces(t)
		c.call(tr)
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Errorf("%s made spans %v, want one", c.by, spanNames(spans))
			continue
		}
		s := spans[0]
		got = append(got, row{strings.Replace(s.Name, " "+stream, " {stream}", 1), strings.ToUpper(s.SpanKind.String()), s.Status.Code.String(), c.by})
		for _, a := range s.Attributes {
			keys[string(a.Key)] = true
		}
		for _, e := range s.Events {
			if e.Name == semconv.ExceptionEventName {
				continue // the SDK's
			}
			for _, a := range e.Attributes {
				keys[string(a.Key)] = true
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans: doc.go's table (-want) against the hooks' (+got):\n%s", diff)
	}
	for k := range keys {
		if !strings.Contains(spansDoc, k) {
			t.Errorf("attribute %s is not in doc.go's section on spans", k)
		}
	}
	named := regexp.MustCompile(`\b(?:messaging|tidemark|error)\.[a-z0-9_.]*[a-z0-9]`)
	for _, k := range named.FindAllString(spansDoc, -1) {
		if !keys[k] && k != "messaging.consumer.group.name" {
			t.Errorf("doc.go's section on spans names %s, which no span has", k)
		}
	}
}

// TestTracesInit: an initialisation is an INTERNAL span from its start
// (Duration before the hook) to the hook, with an event for each shard it
// resolved; a shard resolved before its start (by a try that failed) is
// left out.
func TestTracesInit(t *testing.T) {
	tr, exp := newTraces(t)
	tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard2, Position: scan.AfterSequence("7"), Done: 1, Total: 3, Calls: 9})
	stale := time.Now()
	time.Sleep(50 * time.Millisecond)
	tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard0, Position: scan.AfterSequence("1"), Done: 1, Total: 2, Calls: 3, Bytes: 100})
	tr.OnInitProgress(kinesisload.InitProgress{Stream: "other", ShardID: shard0, Position: scan.TrimHorizon(), Done: 1, Total: 1, Calls: 1})
	tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard1, Position: scan.AfterSequence("2"), Done: 2, Total: 2, Calls: 5})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 500, time.FixedZone("CET", 3600))
	// The initialisation started 25 ms after the stale event: 25 ms
	// before the others.
	took := time.Since(stale) - 25*time.Millisecond
	before := time.Now()
	tr.OnInitResolved(kinesisload.InitResolved{
		Stream:     stream,
		Resolved:   2,
		Reused:     1,
		Strategy:   scan.StrategyFullScan,
		Unanswered: 4,
		Positions:  map[string]scan.Position{shard0: scan.AfterSequence("1"), shard1: scan.AfterSequence("2"), shard2: scan.TrimHorizon()},
		Duration:   took,
		T0:         t0,
	})
	after := time.Now()

	s := one(t, exp.GetSpans(), "initialise orders")
	checkRoot(t, s)
	checkEnd(t, s, before, after, took)
	if s.SpanKind != trace.SpanKindInternal || s.Status.Code != codes.Unset {
		t.Errorf("kind %v, status %v; want %v, Unset", s.SpanKind, s.Status, trace.SpanKindInternal)
	}
	want := common("tidemark.init.shards", int64(3), "tidemark.init.resolved", int64(2), "tidemark.init.reused", int64(1),
		"tidemark.init.strategy", "full-scan", "tidemark.init.unanswered", int64(4), "tidemark.init.t0", "2026-03-01T11:00:00.0000005Z")
	if diff := cmp.Diff(want, attrs(s.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	wantEvents := []map[string]any{
		{"messaging.destination.partition.id": shard0, "tidemark.position": "AFTER_SEQUENCE_NUMBER:1",
			"tidemark.init.done": int64(1), "tidemark.init.total": int64(2), "tidemark.init.calls": int64(3), "tidemark.bytes": int64(100)},
		{"messaging.destination.partition.id": shard1, "tidemark.position": "AFTER_SEQUENCE_NUMBER:2",
			"tidemark.init.done": int64(2), "tidemark.init.total": int64(2), "tidemark.init.calls": int64(5), "tidemark.bytes": int64(0)},
	}
	var gotEvents []map[string]any
	for _, e := range s.Events {
		gotEvents = append(gotEvents, attrs(e.Attributes))
		if e.Name != kotel.EventShardResolved {
			t.Errorf("event %q, want %q", e.Name, kotel.EventShardResolved)
		}
		if e.Time.Before(s.StartTime) || e.Time.After(s.EndTime) {
			t.Errorf("event at %v, outside the span (%v to %v)", e.Time, s.StartTime, s.EndTime)
		}
	}
	if diff := cmp.Diff(wantEvents, gotEvents); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Nothing resolved: no T0, no events. The other stream's event was
	// kept for its own initialisation.
	tr.OnInitResolved(kinesisload.InitResolved{Stream: stream, Reused: 3, Duration: time.Hour})
	tr.OnInitResolved(kinesisload.InitResolved{Stream: "other", Resolved: 1, Duration: time.Hour})
	spans := named(exp.GetSpans(), "initialise orders")
	if len(spans) != 2 {
		t.Fatalf("%d spans initialise orders, want 2", len(spans))
	}
	if _, ok := attrs(spans[1].Attributes)["tidemark.init.t0"]; ok || len(spans[1].Events) != 0 {
		t.Errorf("second initialisation: attributes %v, events %v; want no tidemark.init.t0 and no events", attrs(spans[1].Attributes), spans[1].Events)
	}
	if o := one(t, exp.GetSpans(), "initialise other"); len(o.Events) != 1 {
		t.Errorf("initialise other: %d events, want 1", len(o.Events))
	}
}

// TestTracesInitStartedOver: an initialisation started over is an
// initialise span of no length with status Error, and forgets the shards
// it resolved.
func TestTracesInitStartedOver(t *testing.T) {
	tr, exp := newTraces(t)
	tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard0, Position: scan.AfterSequence("1"), Done: 1, Total: 2, Calls: 3})
	before := time.Now()
	tr.OnRetry(kinesisload.Retry{Stream: stream, Op: "Initialise", Attempt: 1, Backoff: 250 * time.Millisecond, Err: errors.New("ListShards: boom")})
	after := time.Now()
	tr.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: 2, Duration: time.Hour})

	spans := named(exp.GetSpans(), "initialise orders")
	if len(spans) != 2 {
		t.Fatalf("%d spans initialise orders, want 2 (the failed try, then the initialisation)", len(spans))
	}
	failed := spans[0]
	checkRoot(t, failed)
	checkEnd(t, failed, before, after, 0)
	want := common("tidemark.retry.attempt", int64(1), "tidemark.retry.backoff", 0.25, "error.type", "*errors.errorString")
	if diff := cmp.Diff(want, attrs(failed.Attributes)); diff != "" {
		t.Errorf("failed try: attributes (-want +got):\n%s", diff)
	}
	if failed.SpanKind != trace.SpanKindInternal || failed.Status.Code != codes.Error || failed.Status.Description != "ListShards: boom" {
		t.Errorf("failed try: kind %v, status %+v; want %v, Error ListShards: boom", failed.SpanKind, failed.Status, trace.SpanKindInternal)
	}
	if n := len(spans[1].Events); n != 0 {
		t.Errorf("initialisation after the failed try: %d events, want none", n)
	}
}

// TestTracesInitEventsBounded: a stream keeps the latest 128 resolved
// shards for its initialise span (on an SDK that would take more).
func TestTracesInitEventsBounded(t *testing.T) {
	limits := sdktrace.NewSpanLimits()
	limits.EventCountLimit = 1000
	tr, exp := newTracesLimits(t, limits)
	const n = 130
	for i := 1; i <= n; i++ {
		tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: fmt.Sprintf("shardId-%012d", i), Done: i, Total: n})
	}
	tr.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: n, Duration: time.Hour})
	s := one(t, exp.GetSpans(), "initialise orders")
	var done []int64
	for _, e := range s.Events {
		done = append(done, attrs(e.Attributes)["tidemark.init.done"].(int64))
	}
	var want []int64
	for i := n - 127; i <= n; i++ {
		want = append(want, int64(i))
	}
	if diff := cmp.Diff(want, done); diff != "" {
		t.Errorf("tidemark.init.done of the events (-want +got):\n%s", diff)
	}
}

// TestTracesLeases: an acquired lease is an INTERNAL span of no length;
// a lease lost or handed off is an INTERNAL span over the time it was held
// (Held before the hook), with status Error if it was lost.
func TestTracesLeases(t *testing.T) {
	tr, exp := newTraces(t)
	before := time.Now()
	tr.OnLeaseAcquired(kinesisload.LeaseAcquired{Stream: stream, ShardID: shard0, Epoch: 7, Reason: kinesisload.AcquireExpired,
		Position: scan.AfterSequence("42")})
	tr.OnLeaseAcquired(kinesisload.LeaseAcquired{Stream: stream, ShardID: shard1, Reason: kinesisload.AcquireInitial})
	mid := time.Now()
	tr.OnLeaseLost(kinesisload.LeaseLost{Stream: stream, ShardID: shard0, Epoch: 7, Reason: kinesisload.LostSelfFenced,
		Err: errors.New("lease renewal failed for 30s"), Held: 90 * time.Second})
	tr.OnLeaseLost(kinesisload.LeaseLost{Stream: stream, ShardID: shard2, Epoch: 2, Reason: kinesisload.LostCommitRefused, Held: time.Second})
	tr.OnLeaseHandedOff(kinesisload.LeaseHandedOff{Stream: stream, ShardID: shard1, Reason: kinesisload.HandoffRebalance,
		Position: scan.AfterSequence("43"), Held: 2 * time.Hour})
	after := time.Now()
	spans := exp.GetSpans()

	acquired := named(spans, "lease acquired orders")
	if len(acquired) != 2 {
		t.Fatalf("%d spans lease acquired orders, want 2", len(acquired))
	}
	for i, want := range []map[string]any{
		common("messaging.destination.partition.id", shard0, "tidemark.lease.epoch", int64(7), "tidemark.lease.reason", "expired",
			"tidemark.position", "AFTER_SEQUENCE_NUMBER:42"),
		common("messaging.destination.partition.id", shard1, "tidemark.lease.epoch", int64(0), "tidemark.lease.reason", "initial"),
	} {
		s := acquired[i]
		checkRoot(t, s)
		checkEnd(t, s, before, mid, 0)
		if diff := cmp.Diff(want, attrs(s.Attributes)); diff != "" {
			t.Errorf("lease acquired %d: attributes (-want +got):\n%s", i, diff)
		}
		if s.SpanKind != trace.SpanKindInternal || s.Status.Code != codes.Unset {
			t.Errorf("lease acquired %d: kind %v, status %v; want %v, Unset", i, s.SpanKind, s.Status, trace.SpanKindInternal)
		}
	}

	held := named(spans, "lease held orders")
	if len(held) != 3 {
		t.Fatalf("%d spans lease held orders, want 3", len(held))
	}
	for i, c := range []struct {
		attrs  map[string]any
		held   time.Duration
		status sdktrace.Status
		err    string // the exception event's message; "" for none
	}{
		{common("messaging.destination.partition.id", shard0, "tidemark.lease.epoch", int64(7), "tidemark.lease.reason", "self_fenced",
			"tidemark.lease.release", "lost", "error.type", "self_fenced"),
			90 * time.Second, sdktrace.Status{Code: codes.Error, Description: "lease lost: self_fenced"}, "lease renewal failed for 30s"},
		{common("messaging.destination.partition.id", shard2, "tidemark.lease.epoch", int64(2), "tidemark.lease.reason", "commit_refused",
			"tidemark.lease.release", "lost", "error.type", "commit_refused"),
			time.Second, sdktrace.Status{Code: codes.Error, Description: "lease lost: commit_refused"}, ""},
		{common("messaging.destination.partition.id", shard1, "tidemark.lease.epoch", int64(0), "tidemark.lease.reason", "rebalance",
			"tidemark.lease.release", "handed_off", "tidemark.position", "AFTER_SEQUENCE_NUMBER:43"),
			2 * time.Hour, sdktrace.Status{Code: codes.Unset}, ""},
	} {
		s := held[i]
		checkRoot(t, s)
		checkEnd(t, s, mid, after, c.held)
		if diff := cmp.Diff(c.attrs, attrs(s.Attributes)); diff != "" {
			t.Errorf("lease held %d: attributes (-want +got):\n%s", i, diff)
		}
		if s.SpanKind != trace.SpanKindInternal || s.Status != c.status {
			t.Errorf("lease held %d: kind %v, status %+v; want %v, %+v", i, s.SpanKind, s.Status, trace.SpanKindInternal, c.status)
		}
		var msgs []string
		for _, e := range s.Events {
			msgs = append(msgs, attrs(e.Attributes)["exception.message"].(string))
		}
		if want := []string{c.err}; (c.err == "" && len(msgs) != 0) || (c.err != "" && !cmp.Equal(want, msgs)) {
			t.Errorf("lease held %d: exception events %q, want %q", i, msgs, c.err)
		}
	}
}

// TestTracesNoop: the API's no-op TracerProvider works, and every hook
// can be called on it.
func TestTracesNoop(t *testing.T) {
	tr, err := kotel.NewTraces(tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatalf("NewTraces: %v", err)
	}
	for _, c := range traceHookCalls {
		c.call(tr)
	}
}

// TestTracesOptions: WithAttributes adds its attributes to every span.
func TestTracesOptions(t *testing.T) {
	tr, exp := newTraces(t, kotel.WithAttributes(attribute.String("app", "billing"), attribute.Int("replica", 2)))
	for _, c := range traceHookCalls {
		c.call(tr)
	}
	spans := exp.GetSpans()
	if len(spans) != len(traceHookCalls) {
		t.Errorf("%d spans, want %d", len(spans), len(traceHookCalls))
	}
	for _, s := range spans {
		a := attrs(s.Attributes)
		if a["app"] != "billing" || a["replica"] != int64(2) {
			t.Errorf("span %q lacks app=billing,replica=2: %v", s.Name, a)
		}
	}
}

// TestTracesConcurrent: hooks called from many goroutines at once lose no
// span (and -race finds no race), resolver workers' progress included.
func TestTracesConcurrent(t *testing.T) {
	limits := sdktrace.NewSpanLimits()
	limits.EventCountLimit = 1000
	tr, exp := newTracesLimits(t, limits)
	const workers, perWorker = 8, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				tr.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 1})
				tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 1, Attempts: 1})
				if i == 0 {
					tr.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: fmt.Sprint(w), Done: w + 1, Total: workers})
				}
			}
		})
	}
	wg.Wait()
	tr.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: workers, Duration: time.Hour})
	spans := exp.GetSpans()
	for name, want := range map[string]int{"fetch orders": workers * perWorker, "process orders": workers * perWorker, "initialise orders": 1} {
		if got := len(named(spans, name)); got != want {
			t.Errorf("%d spans %q, want %d", got, name, want)
		}
	}
	if n := len(one(t, spans, "initialise orders").Events); n != workers {
		t.Errorf("initialise orders: %d events, want %d", n, workers)
	}
}
