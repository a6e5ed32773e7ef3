package kotel_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
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
)

// newTraces returns a Traces on an SDK TracerProvider that hands every
// ended span, synchronously, to an in-memory exporter.
func newTraces(t *testing.T, opts ...kotel.Option) (*kotel.Traces, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
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
		tr.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, Latency: time.Millisecond, Attempts: 1})
	}},
	{"OnRetry", func(tr *kotel.Traces) {
		tr.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard0, Op: "Deliver", Attempt: 1, Err: errors.New("refused")})
	}},
	{"OnFetched", func(tr *kotel.Traces) {
		tr.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, MillisBehindLatest: 5})
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
	named := regexp.MustCompile(`\b(?:messaging|tidemark|error)\.[a-z_.]*[a-z]`)
	for _, k := range named.FindAllString(spansDoc, -1) {
		if !keys[k] && k != "messaging.consumer.group.name" {
			t.Errorf("doc.go's section on spans names %s, which no span has", k)
		}
	}
}
