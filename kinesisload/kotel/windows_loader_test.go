package kotel_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// multiCounting is countingSink as a kinesisload.MultiSink.
type multiCounting struct{ *countingSink }

func (m multiCounting) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	for _, b := range bs {
		if err := m.Deliver(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// TestLoaderWindows: a real Loader with a MultiSink whose one window holds
// both shards' records (it closes at MaxBatchRecords) reports the window:
// tidemark.windows by reason, its records and shards, each shard's wait,
// and a window span that holds the process spans of its two batches.
func TestLoaderWindows(t *testing.T) {
	m, r := newMetrics(t)
	tr, exp := newTraces(t)
	fake := kinesistest.New()
	kinesistest.NewStream(t, fake, stream, 2)
	const n = 6
	if err := putRecords(fake, n); err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{want: n, got: map[string]int64{}}
	cfg := kinesisload.Config{Stream: stream, Sink: multiCounting{sink}, Dir: t.TempDir(), StartPosition: scan.TrimHorizon(),
		MaxBatchRecords: n, MaxBatchWait: time.Hour}
	loader, err := kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithHooks(m, tr), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	sink.loader = loader
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := loader.Run(ctx); !errors.Is(err, kinesisload.ErrClosed) {
		t.Fatalf("Run: %v, want ErrClosed", err)
	}
	got := collect(t, r)
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders,tidemark.window.reason=records": 1}, ints(t, got, "tidemark.windows")); diff != "" {
		t.Errorf("tidemark.windows (-want +got):\n%s", diff)
	}
	if h := hists(t, got, "tidemark.window.shards")["tidemark.stream=orders"]; h.Count != 1 || h.Sum != 2 {
		t.Errorf("tidemark.window.shards = %+v, want one window of 2 shards", h)
	}
	if h := hists(t, got, "tidemark.window.records")["tidemark.stream=orders"]; h.Count != 1 || h.Sum != n {
		t.Errorf("tidemark.window.records = %+v, want one window of %d records", h, n)
	}
	if waits := ints(t, got, "tidemark.shard.window_wait"); len(waits) != 2 {
		t.Errorf("tidemark.shard.window_wait = %v, want a series per shard", waits)
	}
	w := one(t, exp.GetSpans(), "window orders")
	if a := attrs(w.Attributes); a["tidemark.window.shards"] != int64(2) || a["messaging.batch.message_count"] != int64(n) {
		t.Errorf("window span attributes %v, want 2 shards and %d records", a, n)
	}
	ps := named(exp.GetSpans(), "process orders")
	if len(ps) != 2 {
		t.Fatalf("%d process spans, want 2", len(ps))
	}
	for _, p := range ps {
		if p.StartTime.Before(w.StartTime.Add(-50*time.Millisecond)) || p.EndTime.After(w.EndTime) {
			t.Errorf("process span %v-%v is not within the window span %v-%v", p.StartTime, p.EndTime, w.StartTime, w.EndTime)
		}
		if _, ok := attrs(p.Attributes)["tidemark.window.wait"]; !ok {
			t.Errorf("process span %v has no tidemark.window.wait", attrs(p.Attributes))
		}
	}
}
