package kotel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// ofShard returns the spans of shard, in the order they ended.
func ofShard(spans tracetest.SpanStubs, shard string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if attrs(s.Attributes)["messaging.destination.partition.id"] == shard {
			out = append(out, s)
		}
	}
	return out
}

// withStatus returns the spans of spans whose status is code.
func withStatus(spans tracetest.SpanStubs, code codes.Code) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Status.Code == code {
			out = append(out, s)
		}
	}
	return out
}

// count sums the attribute messaging.batch.message_count of spans.
func count(spans tracetest.SpanStubs) int64 {
	var n int64
	for _, s := range spans {
		n += attrs(s.Attributes)["messaging.batch.message_count"].(int64)
	}
	return n
}

// TestTracesLoaderTrimHorizon: a real Loader reading a two-shard stream
// from TRIM_HORIZON, whose Sink refuses shard 0's first batch once,
// records an initialisation, then for each shard a lease acquired, the
// pages fetched and the batches processed, and a lease held until Close
// handed it off; the refused try is a process span with status Error
// within the span of the batch it delayed. The spans' times agree with the
// durations the hooks gave.
func TestTracesLoaderTrimHorizon(t *testing.T) {
	tr, exp := newTraces(t)
	fake := kinesistest.New()
	kinesistest.NewStream(t, fake, stream, 2)
	const n = 6
	if err := putRecords(fake, n); err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{want: n, got: map[string]int64{}, refuse: shard0}
	runLoader(t, fake, scan.TrimHorizon(), sink, tr)
	spans := exp.GetSpans()
	for _, s := range spans {
		checkRoot(t, s)
	}

	init := one(t, spans, "initialise orders")
	want := common("tidemark.init.shards", int64(2), "tidemark.init.resolved", int64(0), "tidemark.init.reused", int64(0),
		"tidemark.init.strategy", "probe", "tidemark.init.unanswered", int64(0))
	if diff := cmp.Diff(want, attrs(init.Attributes)); diff != "" {
		t.Errorf("initialise: attributes (-want +got):\n%s", diff)
	}
	if !init.StartTime.Before(init.EndTime) {
		t.Errorf("initialise: from %v to %v, want a span of InitResolved.Duration > 0", init.StartTime, init.EndTime)
	}

	failed := withStatus(named(spans, "process orders"), codes.Error)
	if len(failed) != 1 {
		t.Fatalf("%d process spans with status Error, want 1 (the refused try)", len(failed))
	}
	if got := attrs(failed[0].Attributes); got["messaging.destination.partition.id"] != shard0 ||
		got["tidemark.retry.attempt"] != int64(1) || failed[0].Status.Description != errSinkDown.Error() {
		t.Errorf("refused try: attributes %v, status %+v; want shard %s, attempt 1, %q", got, failed[0].Status, shard0, errSinkDown)
	}

	for _, shard := range []string{shard0, shard1} {
		sh := ofShard(spans, shard)
		acquired := one(t, sh, "lease acquired orders")
		held := one(t, sh, "lease held orders")
		fetched := named(sh, "fetch orders")
		processed := withStatus(named(sh, "process orders"), codes.Unset)
		if len(fetched) == 0 || len(processed) == 0 {
			t.Fatalf("shard %s: %d fetch spans, %d process spans; want some of each", shard, len(fetched), len(processed))
		}
		if a := attrs(acquired.Attributes); a["tidemark.lease.reason"] != "initial" || a["tidemark.lease.epoch"] != int64(0) {
			t.Errorf("shard %s: lease acquired: %v, want reason initial, epoch 0", shard, a)
		}
		if a := attrs(held.Attributes); a["tidemark.lease.release"] != "handed_off" || a["tidemark.lease.reason"] != "close" {
			t.Errorf("shard %s: lease held: %v, want handed_off on close", shard, a)
		}
		if got := count(fetched); got != n/2 {
			t.Errorf("shard %s: fetch spans hold %d records, want %d", shard, got, n/2)
		}
		if got := count(processed); got != n/2 {
			t.Errorf("shard %s: process spans hold %d records, want %d", shard, got, n/2)
		}
		if sink.got[shard] != n/2 {
			t.Errorf("shard %s: the Sink got %d records, want %d", shard, sink.got[shard], n/2)
		}

		// In time: initialised, acquired, fetched, taken for delivery,
		// committed, handed off. The lease held span starts when the lease
		// was acquired: Held before its hook.
		if init.EndTime.After(acquired.StartTime) {
			t.Errorf("shard %s: lease acquired at %v, before the initialisation ended (%v)", shard, acquired.StartTime, init.EndTime)
		}
		if acquired.StartTime.After(fetched[0].StartTime) {
			t.Errorf("shard %s: first page fetched at %v, before the lease was acquired (%v)", shard, fetched[0].StartTime, acquired.StartTime)
		}
		if fetched[0].StartTime.After(processed[0].StartTime) {
			t.Errorf("shard %s: first batch taken for delivery at %v, before its page was fetched (%v)", shard, processed[0].StartTime, fetched[0].StartTime)
		}
		if last := processed[len(processed)-1]; last.EndTime.After(held.EndTime) {
			t.Errorf("shard %s: last batch committed at %v, after the lease was handed off (%v)", shard, last.EndTime, held.EndTime)
		}
		if d := held.StartTime.Sub(acquired.StartTime); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("shard %s: lease held from %v, %v from its acquisition (%v); want within 50ms", shard, held.StartTime, d, acquired.StartTime)
		}
	}

	// The refused try lies within the span of the batch it delayed (from
	// the page's taking to the commit), which took two tries, and within
	// the lease held. A span's start is its hook's time less the duration
	// the hook gives, measured a moment before the hook: it may lag the
	// true start by that moment, so 50ms are allowed (leaving out the
	// duration would put the start after the refusal by the backoff, at
	// least 500ms).
	const lag = 50 * time.Millisecond
	var retried tracetest.SpanStubs
	for _, s := range withStatus(named(ofShard(spans, shard0), "process orders"), codes.Unset) {
		if attrs(s.Attributes)["tidemark.attempts"] == int64(2) {
			retried = append(retried, s)
		}
	}
	if len(retried) != 1 {
		t.Fatalf("%d process spans of shard %s with tidemark.attempts 2, want 1", len(retried), shard0)
	}
	at := failed[0].StartTime
	if at.Before(retried[0].StartTime.Add(-lag)) || at.After(retried[0].EndTime) {
		t.Errorf("refused try at %v, outside the span of its batch (%v to %v)", at, retried[0].StartTime, retried[0].EndTime)
	}
	if held := one(t, ofShard(spans, shard0), "lease held orders"); at.Before(held.StartTime.Add(-lag)) {
		t.Errorf("refused try at %v, before the lease held span's start (%v)", at, held.StartTime)
	}
}

// closeOnInit is a hook that closes the Loader of a countingSink once
// initialisation is journaled.
type closeOnInit struct {
	sink *countingSink
	once sync.Once
}

func (c *closeOnInit) OnInitResolved(kinesisload.InitResolved) {
	c.once.Do(func() { go func() { _ = c.sink.loader.Close(context.Background()) }() })
}

// TestTracesLoaderLatest: a Loader starting at LATEST records an
// initialise span that resolved both shards, with T0 and an event for
// each shard within the span.
func TestTracesLoaderLatest(t *testing.T) {
	tr, exp := newTraces(t)
	fake := kinesistest.New()
	kinesistest.NewStream(t, fake, stream, 2)
	if err := putRecords(fake, 4); err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{want: -1, got: map[string]int64{}}
	runLoader(t, fake, scan.Latest(), sink, tr, &closeOnInit{sink: sink})

	s := one(t, exp.GetSpans(), "initialise orders")
	checkRoot(t, s)
	if s.SpanKind != trace.SpanKindInternal || s.Status.Code != codes.Unset {
		t.Errorf("kind %v, status %v; want %v, Unset", s.SpanKind, s.Status, trace.SpanKindInternal)
	}
	a := attrs(s.Attributes)
	if a["tidemark.init.resolved"] != int64(2) || a["tidemark.init.shards"] != int64(2) || a["tidemark.init.strategy"] != "probe" {
		t.Errorf("attributes %v, want 2 shards, 2 resolved, probe", a)
	}
	t0, err := time.Parse(time.RFC3339Nano, a["tidemark.init.t0"].(string))
	if err != nil {
		t.Errorf("tidemark.init.t0: %v", err)
	} else if d := t0.Sub(s.StartTime); d < -5*time.Second || d > 5*time.Second {
		t.Errorf("tidemark.init.t0 %v, %v from the start of the initialisation (%v)", t0, d, s.StartTime)
	}
	got := map[string]int64{}
	for _, e := range s.Events {
		ea := attrs(e.Attributes)
		got[ea["messaging.destination.partition.id"].(string)] = ea["tidemark.init.total"].(int64)
		if e.Time.Before(s.StartTime) || e.Time.After(s.EndTime) {
			t.Errorf("event %v at %v, outside the span (%v to %v)", ea, e.Time, s.StartTime, s.EndTime)
		}
		if p, _ := ea["tidemark.position"].(string); p == "" {
			t.Errorf("event %v without tidemark.position", ea)
		}
	}
	if diff := cmp.Diff(map[string]int64{shard0: 2, shard1: 2}, got); diff != "" {
		t.Errorf("shard resolved events, tidemark.init.total by shard (-want +got):\n%s", diff)
	}
}
