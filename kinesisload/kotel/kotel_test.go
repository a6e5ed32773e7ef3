package kotel_test

import (
	"context"
	"errors"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kotel"
	"github.com/tidemark/tidemark/scan"
)

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		mp   metric.MeterProvider
		opts []kotel.Option
		want error
		msg  string // a part of the message
	}{
		{"nil MeterProvider", nil, nil, kotel.ErrNilMeterProvider, "nil MeterProvider"},
		{"nil option", noop.NewMeterProvider(), []kotel.Option{nil}, kotel.ErrInvalidOption, "nil Option"},
		{"empty buckets", noop.NewMeterProvider(), []kotel.Option{kotel.WithBatchLatencyBuckets()}, kotel.ErrInvalidOption, "WithBatchLatencyBuckets: no boundaries"},
		{"decreasing buckets", noop.NewMeterProvider(), []kotel.Option{kotel.WithInitDurationBuckets(1, 2, 2)}, kotel.ErrInvalidOption, "WithInitDurationBuckets: boundary 2 (2) is not above boundary 1 (2)"},
		{"infinite bucket", noop.NewMeterProvider(), []kotel.Option{kotel.WithBatchLatencyBuckets(1, math.Inf(1))}, kotel.ErrInvalidOption, "boundary 1 is +Inf, not finite"},
		{"NaN bucket", noop.NewMeterProvider(), []kotel.Option{kotel.WithBatchLatencyBuckets(math.NaN())}, kotel.ErrInvalidOption, "boundary 0 is NaN, not finite"},
		{"own key", noop.NewMeterProvider(), []kotel.Option{kotel.WithAttributes(kotel.AttrShard.String("x"))}, kotel.ErrInvalidOption, `key "tidemark.shard" is one of kotel's own`},
		{"key twice", noop.NewMeterProvider(), []kotel.Option{kotel.WithAttributes(attribute.String("app", "a")), kotel.WithAttributes(attribute.String("app", "b"))}, kotel.ErrInvalidOption, `key "app" given twice`},
		{"invalid attribute", noop.NewMeterProvider(), []kotel.Option{kotel.WithAttributes(attribute.String("", "a"))}, kotel.ErrInvalidOption, `attribute "" is not valid`},
		{"traces option", noop.NewMeterProvider(), []kotel.Option{kotel.WithEmptyFetchSpans()}, kotel.ErrInvalidOption, "WithEmptyFetchSpans is an option of NewTraces, not New"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := kotel.New(tt.mp, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("New: error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("New: error %q does not contain %q", err, tt.msg)
			}
			if m != nil {
				t.Errorf("New: Metrics %v with an error, want nil", m)
			}
		})
	}
}

// TestNewNoop: the API's no-op MeterProvider works, and every hook can be
// called on it.
func TestNewNoop(t *testing.T) {
	m, err := kotel.New(noop.NewMeterProvider())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	callEveryHook(m)
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

const (
	stream = "orders"
	shard0 = "shardId-000000000000"
	shard1 = "shardId-000000000001"
	shard2 = "shardId-000000000002"
)

func TestOnBatchDelivered(t *testing.T) {
	m, r := newMetrics(t)
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 3, Bytes: 30, Latency: 20 * time.Millisecond, Attempts: 1})
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 2, Bytes: 7, Latency: 2 * time.Second, Attempts: 3})
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard1, Records: 1, Bytes: 5, Latency: 400 * time.Millisecond, Attempts: 1})
	got := collect(t, r)

	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	if diff := cmp.Diff(map[string]int64{s0: 5, s1: 1}, ints(t, got, "tidemark.records.delivered")); diff != "" {
		t.Errorf("tidemark.records.delivered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{s0: 37, s1: 5}, ints(t, got, "tidemark.bytes.delivered")); diff != "" {
		t.Errorf("tidemark.bytes.delivered (-want +got):\n%s", diff)
	}
	lb := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	wantLatency := map[string]hist{"tidemark.stream=orders": {Count: 3, Sum: 2.42, Bounds: lb, Buckets: buckets(lb, 0.02, 2, 0.4)}}
	if diff := cmp.Diff(wantLatency, hists(t, got, "tidemark.batch.latency"), cmp.Comparer(approx)); diff != "" {
		t.Errorf("tidemark.batch.latency (-want +got):\n%s", diff)
	}
	ab := []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20}
	wantAttempts := map[string]hist{"tidemark.stream=orders": {Count: 3, Sum: 5, Bounds: ab, Buckets: buckets(ab, 1, 3, 1)}}
	if diff := cmp.Diff(wantAttempts, hists(t, got, "tidemark.batch.attempts")); diff != "" {
		t.Errorf("tidemark.batch.attempts (-want +got):\n%s", diff)
	}
}

// TestOnWindowDelivered: windows are counted by what closed them, their
// sizes and ages recorded per stream; a shard's last wait in a window is
// its tidemark.shard.window_wait, kept once the stream has windows (a
// batch that waited 0 too), and absent for a stream without.
func TestOnWindowDelivered(t *testing.T) {
	m, r := newMetrics(t)
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: "plain", ShardID: shard0, Records: 1, Bytes: 1, Attempts: 1})
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 3, Bytes: 30, Attempts: 1, Waited: 700 * time.Millisecond})
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard1, Records: 2, Bytes: 20, Attempts: 1, Waited: 300 * time.Millisecond})
	m.OnWindowDelivered(kinesisload.WindowDelivered{Stream: stream, Shards: 2, Records: 5, Bytes: 50, Pages: 3, Reason: kinesisload.WindowWait, Age: 700 * time.Millisecond, Attempts: 1})
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard1, Records: 1, Bytes: 2000, Attempts: 1})
	m.OnWindowDelivered(kinesisload.WindowDelivered{Stream: stream, Shards: 1, Records: 1, Bytes: 2000, Pages: 1, Reason: kinesisload.WindowBudget, Attempts: 1})
	got := collect(t, r)

	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders,tidemark.window.reason=wait": 1, "tidemark.stream=orders,tidemark.window.reason=budget": 1},
		ints(t, got, "tidemark.windows")); diff != "" {
		t.Errorf("tidemark.windows (-want +got):\n%s", diff)
	}
	rb := []float64{1, 10, 100, 1000, 10000, 100000, 1000000}
	if diff := cmp.Diff(map[string]hist{"tidemark.stream=orders": {Count: 2, Sum: 6, Bounds: rb, Buckets: buckets(rb, 5, 1)}}, hists(t, got, "tidemark.window.records")); diff != "" {
		t.Errorf("tidemark.window.records (-want +got):\n%s", diff)
	}
	bb := []float64{1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}
	if diff := cmp.Diff(map[string]hist{"tidemark.stream=orders": {Count: 2, Sum: 2050, Bounds: bb, Buckets: buckets(bb, 50, 2000)}}, hists(t, got, "tidemark.window.bytes")); diff != "" {
		t.Errorf("tidemark.window.bytes (-want +got):\n%s", diff)
	}
	sb := []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	if diff := cmp.Diff(map[string]hist{"tidemark.stream=orders": {Count: 2, Sum: 3, Bounds: sb, Buckets: buckets(sb, 2, 1)}}, hists(t, got, "tidemark.window.shards")); diff != "" {
		t.Errorf("tidemark.window.shards (-want +got):\n%s", diff)
	}
	lb := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	if diff := cmp.Diff(map[string]hist{"tidemark.stream=orders": {Count: 2, Sum: 0.7, Bounds: lb, Buckets: buckets(lb, 0.7, 0)}}, hists(t, got, "tidemark.window.age"), cmp.Comparer(approx)); diff != "" {
		t.Errorf("tidemark.window.age (-want +got):\n%s", diff)
	}
	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	if diff := cmp.Diff(map[string]int64{s0: 700, s1: 0}, ints(t, got, "tidemark.shard.window_wait")); diff != "" {
		t.Errorf("tidemark.shard.window_wait (-want +got):\n%s", diff)
	}
}

// approx compares float64s up to rounding.
func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(a)) }

func TestOnFetched(t *testing.T) {
	m, r := newMetrics(t)
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 4, Bytes: 40, MillisBehindLatest: 9000})
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 0, Bytes: 0, MillisBehindLatest: 0})
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard1, Records: 2, Bytes: 6, MillisBehindLatest: 1500})
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard2, Records: 0, Bytes: 0, MillisBehindLatest: 0}) // idle
	got := collect(t, r)

	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	s2 := "tidemark.shard=" + shard2 + ",tidemark.stream=orders"
	for _, c := range []struct {
		name string
		want map[string]int64
	}{
		{"tidemark.getrecords.pages", map[string]int64{s0: 2, s1: 1, s2: 1}},
		// An idle shard's series exist from its first page on, at 0.
		{"tidemark.records.fetched", map[string]int64{s0: 4, s1: 2, s2: 0}},
		{"tidemark.bytes.fetched", map[string]int64{s0: 40, s1: 6, s2: 0}},
		{"tidemark.shard.millis_behind_latest", map[string]int64{s0: 0, s1: 1500, s2: 0}}, // the last page's
	} {
		if diff := cmp.Diff(c.want, ints(t, got, c.name)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	// A gauge is read again at every collection: a later page replaces it.
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard1, MillisBehindLatest: 0})
	got = collect(t, r)
	if diff := cmp.Diff(map[string]int64{s0: 0, s1: 0, s2: 0}, ints(t, got, "tidemark.shard.millis_behind_latest")); diff != "" {
		t.Errorf("tidemark.shard.millis_behind_latest after a second collection (-want +got):\n%s", diff)
	}
}

func TestOnShardState(t *testing.T) {
	m, r := newMetrics(t)
	const shard3 = "shardId-000000000003"
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard3, MillisBehindLatest: 10})
	for _, e := range []kinesisload.ShardStateChanged{
		{Stream: stream, ShardID: shard0, From: 0, To: kinesisload.StateDiscovered},
		{Stream: stream, ShardID: shard0, From: kinesisload.StateDiscovered, To: kinesisload.StateActive},
		{Stream: stream, ShardID: shard1, From: 0, To: kinesisload.StateActive},
		// shard2 was restored from an earlier run: its first event has a From.
		{Stream: stream, ShardID: shard2, From: kinesisload.StateActive, To: kinesisload.StateDraining},
		// shard3 finishes: it leaves both gauges.
		{Stream: stream, ShardID: shard3, From: kinesisload.StateActive, To: kinesisload.StateCompleted},
	} {
		m.OnShardState(e)
	}
	got := collect(t, r)

	wantChanges := map[string]int64{
		"tidemark.state.from=NONE,tidemark.state.to=DISCOVERED,tidemark.stream=orders":   1,
		"tidemark.state.from=DISCOVERED,tidemark.state.to=ACTIVE,tidemark.stream=orders": 1,
		"tidemark.state.from=NONE,tidemark.state.to=ACTIVE,tidemark.stream=orders":       1,
		"tidemark.state.from=ACTIVE,tidemark.state.to=DRAINING,tidemark.stream=orders":   1,
		"tidemark.state.from=ACTIVE,tidemark.state.to=COMPLETED,tidemark.stream=orders":  1,
	}
	if diff := cmp.Diff(wantChanges, ints(t, got, "tidemark.shard.state_changes")); diff != "" {
		t.Errorf("tidemark.shard.state_changes (-want +got):\n%s", diff)
	}
	wantShards := map[string]int64{
		"tidemark.state=DISCOVERED,tidemark.stream=orders":     0,
		"tidemark.state=PENDING_PARENT,tidemark.stream=orders": 0,
		"tidemark.state=ACTIVE,tidemark.stream=orders":         2,
		"tidemark.state=DRAINING,tidemark.stream=orders":       1,
	}
	if diff := cmp.Diff(wantShards, ints(t, got, "tidemark.shards")); diff != "" {
		t.Errorf("tidemark.shards (-want +got):\n%s", diff)
	}
	if b, ok := got["tidemark.shard.millis_behind_latest"]; ok {
		t.Errorf("tidemark.shard.millis_behind_latest of a COMPLETED shard: %+v, want no data", b.Data)
	}

	// Every shard completes: the stream's live states are all 0.
	m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: shard0, From: kinesisload.StateActive, To: kinesisload.StateCompleted})
	m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: shard1, From: kinesisload.StateActive, To: kinesisload.StateCompleted})
	m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: shard2, From: kinesisload.StateDraining, To: kinesisload.StateCompleted})
	got = collect(t, r)
	for k := range wantShards {
		wantShards[k] = 0
	}
	if diff := cmp.Diff(wantShards, ints(t, got, "tidemark.shards")); diff != "" {
		t.Errorf("tidemark.shards after every shard completed (-want +got):\n%s", diff)
	}
}

func TestInit(t *testing.T) {
	m, r := newMetrics(t)
	m.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard0, Position: scan.AfterSequence("1"), Done: 1, Total: 4, Calls: 3, Bytes: 100})
	m.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard1, Position: scan.AfterSequence("2"), Done: 2, Total: 4, Calls: 5, Bytes: 0})
	got := collect(t, r)
	if diff := cmp.Diff(map[string]float64{"tidemark.stream=orders": 0.5}, floats(t, got, "tidemark.init.progress")); diff != "" {
		t.Errorf("tidemark.init.progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 8}, ints(t, got, "tidemark.init.calls")); diff != "" {
		t.Errorf("tidemark.init.calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 100}, ints(t, got, "tidemark.init.bytes")); diff != "" {
		t.Errorf("tidemark.init.bytes (-want +got):\n%s", diff)
	}
	for _, name := range []string{"tidemark.init.duration", "tidemark.init.resolved", "tidemark.init.reused"} {
		if d, ok := got[name]; ok {
			t.Errorf("%s before OnInitResolved: %+v, want no data", name, d.Data)
		}
	}

	m.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: 4, Reused: 2, Duration: 90 * time.Second})
	m.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: 0, Reused: 6, Duration: 50 * time.Millisecond})
	got = collect(t, r)
	if diff := cmp.Diff(map[string]float64{"tidemark.stream=orders": 1}, floats(t, got, "tidemark.init.progress")); diff != "" {
		t.Errorf("tidemark.init.progress after OnInitResolved (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 4}, ints(t, got, "tidemark.init.resolved")); diff != "" {
		t.Errorf("tidemark.init.resolved (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 8}, ints(t, got, "tidemark.init.reused")); diff != "" {
		t.Errorf("tidemark.init.reused (-want +got):\n%s", diff)
	}
	ib := []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	want := map[string]hist{"tidemark.stream=orders": {Count: 2, Sum: 90.05, Bounds: ib, Buckets: buckets(ib, 90, 0.05)}}
	if diff := cmp.Diff(want, hists(t, got, "tidemark.init.duration"), cmp.Comparer(approx)); diff != "" {
		t.Errorf("tidemark.init.duration (-want +got):\n%s", diff)
	}
}

// TestInitProgressTotalZero: an event with Total 0 (which the Loader never
// sends) does not divide by zero.
func TestInitProgressTotalZero(t *testing.T) {
	m, r := newMetrics(t)
	m.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard0, Calls: 1})
	got := collect(t, r)
	if p, ok := got["tidemark.init.progress"]; ok {
		t.Errorf("tidemark.init.progress: %+v, want no data", p.Data)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 1}, ints(t, got, "tidemark.init.calls")); diff != "" {
		t.Errorf("tidemark.init.calls (-want +got):\n%s", diff)
	}
}

func TestThrottledRetryRenewed(t *testing.T) {
	m, r := newMetrics(t)
	boom := errors.New("boom")
	m.OnThrottled(kinesisload.Throttled{Stream: stream, ShardID: shard0, Op: "GetRecords", Backoff: time.Second, Err: boom})
	m.OnThrottled(kinesisload.Throttled{Stream: stream, ShardID: shard0, Op: "GetRecords", Backoff: time.Second, Err: boom})
	m.OnThrottled(kinesisload.Throttled{Stream: stream, Op: "ListShards", Err: boom})
	m.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard0, Op: "Deliver", Attempt: 1, Err: boom})
	m.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard1, Op: "GetShardIterator", Attempt: 1, Err: boom})
	m.OnRetry(kinesisload.Retry{Stream: stream, Op: "ListShards", Attempt: 2, Err: boom})
	m.OnIteratorRenewed(kinesisload.IteratorRenewed{Stream: stream, ShardID: shard1, From: "AFTER_SEQUENCE_NUMBER 42"})
	m.OnIteratorRenewed(kinesisload.IteratorRenewed{Stream: stream, ShardID: shard1, From: "AFTER_SEQUENCE_NUMBER 43"})
	got := collect(t, r)

	wantThrottles := map[string]int64{
		"tidemark.op=GetRecords,tidemark.shard=" + shard0 + ",tidemark.stream=orders": 2,
		"tidemark.op=ListShards,tidemark.stream=orders":                               1,
	}
	if diff := cmp.Diff(wantThrottles, ints(t, got, "tidemark.throttles")); diff != "" {
		t.Errorf("tidemark.throttles (-want +got):\n%s", diff)
	}
	wantRetries := map[string]int64{
		"tidemark.op=Deliver,tidemark.shard=" + shard0 + ",tidemark.stream=orders":          1,
		"tidemark.op=GetShardIterator,tidemark.shard=" + shard1 + ",tidemark.stream=orders": 1,
		"tidemark.op=ListShards,tidemark.stream=orders":                                     1,
	}
	if diff := cmp.Diff(wantRetries, ints(t, got, "tidemark.retries")); diff != "" {
		t.Errorf("tidemark.retries (-want +got):\n%s", diff)
	}
	wantRenewals := map[string]int64{"tidemark.shard=" + shard1 + ",tidemark.stream=orders": 2}
	if diff := cmp.Diff(wantRenewals, ints(t, got, "tidemark.iterator.renewals")); diff != "" {
		t.Errorf("tidemark.iterator.renewals (-want +got):\n%s", diff)
	}
}

func TestKPLHooks(t *testing.T) {
	m, r := newMetrics(t)
	m.OnDecodeFailed(kinesisload.DecodeFailed{Stream: stream, ShardID: shard0, SequenceNumber: "1", Err: kinesisload.ErrBadAggregate})
	m.OnDecodeFailed(kinesisload.DecodeFailed{Stream: stream, ShardID: shard0, SequenceNumber: "2", Err: kinesisload.ErrBadAggregate})
	m.OnDecodeFailed(kinesisload.DecodeFailed{Stream: stream, ShardID: shard1, SequenceNumber: "3", Err: kinesisload.ErrBadAggregate})
	// Records user records of one aggregate are outside the range.
	m.OnHashKeyOutOfRange(kinesisload.HashKeyOutOfRange{Stream: stream, ShardID: shard1, SequenceNumber: "4", Records: 5, SubSequenceNumber: 2})
	m.OnHashKeyOutOfRange(kinesisload.HashKeyOutOfRange{Stream: stream, ShardID: shard1, SequenceNumber: "5", Records: 1})
	got := collect(t, r)

	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	if diff := cmp.Diff(map[string]int64{s0: 2, s1: 1}, ints(t, got, "tidemark.kpl.decode_failures")); diff != "" {
		t.Errorf("tidemark.kpl.decode_failures (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{s1: 6}, ints(t, got, "tidemark.kpl.out_of_range")); diff != "" {
		t.Errorf("tidemark.kpl.out_of_range (-want +got):\n%s", diff)
	}
}

func TestLeaseHooks(t *testing.T) {
	m, r := newMetrics(t)
	const shard3 = "shardId-000000000003"
	for _, e := range []kinesisload.LeaseAcquired{
		{Stream: stream, ShardID: shard0, Epoch: 1, Reason: kinesisload.AcquireInitial},
		{Stream: stream, ShardID: shard1, Epoch: 4, Reason: kinesisload.AcquireExpired},
		{Stream: stream, ShardID: shard2, Epoch: 7, Reason: kinesisload.AcquireHandoff},
		{Stream: stream, ShardID: shard3, Epoch: 2, Reason: kinesisload.AcquireUnowned},
	} {
		m.OnLeaseAcquired(e)
	}
	m.OnLeaseLost(kinesisload.LeaseLost{Stream: stream, ShardID: shard1, Epoch: 4, Reason: kinesisload.LostSelfFenced, Held: time.Second})
	m.OnLeaseHandedOff(kinesisload.LeaseHandedOff{Stream: stream, ShardID: shard2, Epoch: 7, Reason: kinesisload.HandoffRebalance, Held: time.Second})
	// shard3 ends: released without a handoff; it leaves the gauges.
	m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: shard3, From: kinesisload.StateActive, To: kinesisload.StateCompleted})
	// shard1 comes back, taken again after its holder expired.
	m.OnLeaseAcquired(kinesisload.LeaseAcquired{Stream: stream, ShardID: shard1, Epoch: 6, Reason: kinesisload.AcquireExpired})
	got := collect(t, r)

	sh := func(id, reason string) string {
		k := "tidemark.shard=" + id + ",tidemark.stream=orders"
		if reason != "" {
			k = "tidemark.lease.reason=" + reason + "," + k
		}
		return k
	}
	for _, c := range []struct {
		name string
		want map[string]int64
	}{
		{"tidemark.leases.acquired", map[string]int64{sh(shard0, "initial"): 1, sh(shard1, "expired"): 2, sh(shard2, "handoff"): 1, sh(shard3, "unowned"): 1}},
		{"tidemark.leases.lost", map[string]int64{sh(shard1, "self_fenced"): 1}},
		{"tidemark.leases.handed_off", map[string]int64{sh(shard2, "rebalance"): 1}},
		{"tidemark.leases.held", map[string]int64{"tidemark.stream=orders": 2}},
		{"tidemark.lease.epoch", map[string]int64{sh(shard0, ""): 1, sh(shard1, ""): 6}},
	} {
		if diff := cmp.Diff(c.want, ints(t, got, c.name)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}

	// Every lease goes: the stream's held gauge stays, at 0.
	m.OnLeaseHandedOff(kinesisload.LeaseHandedOff{Stream: stream, ShardID: shard0, Epoch: 1, Reason: kinesisload.HandoffClose})
	m.OnLeaseLost(kinesisload.LeaseLost{Stream: stream, ShardID: shard1, Epoch: 6, Reason: kinesisload.LostCommitRefused})
	got = collect(t, r)
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 0}, ints(t, got, "tidemark.leases.held")); diff != "" {
		t.Errorf("tidemark.leases.held after every lease went (-want +got):\n%s", diff)
	}
	if e, ok := got["tidemark.lease.epoch"]; ok {
		t.Errorf("tidemark.lease.epoch with no lease held: %+v, want no data", e.Data)
	}
}

// callEveryHook calls every hook method once, with events that make every
// instrument report.
func callEveryHook(m *kotel.Metrics) {
	m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, Latency: time.Millisecond, Attempts: 1, Waited: time.Millisecond})
	m.OnWindowDelivered(kinesisload.WindowDelivered{Stream: stream, Shards: 1, Records: 1, Bytes: 1, Pages: 1, Reason: kinesisload.WindowWait, Age: time.Millisecond, Attempts: 1})
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 1, Bytes: 1, MillisBehindLatest: 5})
	m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: shard0, To: kinesisload.StateActive})
	m.OnInitProgress(kinesisload.InitProgress{Stream: stream, ShardID: shard0, Done: 1, Total: 1, Calls: 1, Bytes: 1})
	m.OnInitResolved(kinesisload.InitResolved{Stream: stream, Resolved: 1, Duration: time.Second})
	m.OnThrottled(kinesisload.Throttled{Stream: stream, ShardID: shard0, Op: "GetRecords"})
	m.OnRetry(kinesisload.Retry{Stream: stream, ShardID: shard0, Op: "GetRecords", Attempt: 1})
	m.OnIteratorRenewed(kinesisload.IteratorRenewed{Stream: stream, ShardID: shard0})
	m.OnDecodeFailed(kinesisload.DecodeFailed{Stream: stream, ShardID: shard0, SequenceNumber: "1"})
	m.OnHashKeyOutOfRange(kinesisload.HashKeyOutOfRange{Stream: stream, ShardID: shard0, SequenceNumber: "1", Records: 1})
	m.OnLeaseAcquired(kinesisload.LeaseAcquired{Stream: stream, ShardID: shard1, Epoch: 1, Reason: kinesisload.AcquireInitial})
	m.OnLeaseAcquired(kinesisload.LeaseAcquired{Stream: stream, ShardID: shard0, Epoch: 1, Reason: kinesisload.AcquireInitial})
	m.OnLeaseLost(kinesisload.LeaseLost{Stream: stream, ShardID: shard1, Epoch: 1, Reason: kinesisload.LostSelfFenced})
	m.OnLeaseHandedOff(kinesisload.LeaseHandedOff{Stream: stream, ShardID: shard1, Epoch: 1, Reason: kinesisload.HandoffRebalance})
}

// TestInstrumentTable: every instrument of the package documentation's
// table exists with the kind, unit and attribute keys the table gives, and
// there is no other.
func TestInstrumentTable(t *testing.T) {
	type row struct{ Kind, Unit, Attrs string }
	want := map[string]row{}
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	letters := map[string]attribute.Key{"S": kotel.AttrStream, "H": kotel.AttrShard, "O": kotel.AttrOp,
		"State": kotel.AttrState, "From": kotel.AttrStateFrom, "To": kotel.AttrStateTo, "Reason": kotel.AttrReason, "Window": kotel.AttrWindowReason}
	line := regexp.MustCompile(`(?m)^//\t(tidemark\.\S+)\s+(\S+)\s+(\S+)\s+((?:(?:S|H|O|State|From|To|Reason|Window) )*(?:S|H|O|State|From|To|Reason|Window))\s+On`)
	for _, mm := range line.FindAllStringSubmatch(string(src), -1) {
		var keys []string
		for _, l := range strings.Fields(mm[4]) {
			keys = append(keys, string(letters[l]))
		}
		want[mm[1]] = row{mm[2], mm[3], strings.Join(slices.Sorted(slices.Values(keys)), " ")}
	}
	if len(want) != 32 {
		t.Fatalf("parsed %d rows of the table in doc.go, want 32", len(want))
	}

	m, r := newMetrics(t)
	callEveryHook(m)
	got := map[string]row{}
	for name, md := range collect(t, r) {
		var kind string
		var sets []attribute.Set
		switch d := md.Data.(type) {
		case metricdata.Sum[int64]:
			kind = "Int64Counter"
			if !d.IsMonotonic {
				kind = "Int64UpDownCounter"
			}
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Gauge[int64]:
			kind = "Int64ObservableGauge" // the only int64 gauges kotel makes
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Gauge[float64]:
			kind = "Float64Gauge"
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			kind = "Float64Histogram"
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[int64]:
			kind = "Int64Histogram"
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		default:
			kind = "unexpected"
		}
		if md.Description == "" {
			t.Errorf("%s has no description", name)
		}
		var keys []string
		for _, kv := range sets[0].ToSlice() {
			keys = append(keys, string(kv.Key))
		}
		got[name] = row{kind, md.Unit, strings.Join(slices.Sorted(slices.Values(keys)), " ")}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instruments: doc.go's table (-want) against the SDK's (+got):\n%s", diff)
	}
}

// TestOptions: WithAttributes adds its attributes to every data point of
// every instrument; the bucket options set the histograms' boundaries.
func TestOptions(t *testing.T) {
	m, r := newMetrics(t,
		kotel.WithAttributes(attribute.String("app", "billing"), attribute.Int("replica", 2)),
		kotel.WithBatchLatencyBuckets(0.1, 1),
		kotel.WithInitDurationBuckets(10, 100, 1000))
	callEveryHook(m)
	got := collect(t, r)
	if len(got) != 32 {
		t.Errorf("%d instruments reported, want 32", len(got))
	}
	for name, md := range got {
		var sets []attribute.Set
		switch d := md.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Gauge[float64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		}
		if len(sets) == 0 {
			t.Errorf("%s: no data points", name)
		}
		for _, s := range sets {
			app, _ := s.Value("app")
			replica, _ := s.Value("replica")
			if app.AsString() != "billing" || replica.AsInt64() != 2 {
				t.Errorf("%s: data point %s lacks app=billing,replica=2", name, key(s))
			}
		}
	}
	for _, c := range []struct {
		name   string
		bounds []float64
	}{
		{"tidemark.batch.latency", []float64{0.1, 1}},
		{"tidemark.window.age", []float64{0.1, 1}},
		{"tidemark.init.duration", []float64{10, 100, 1000}},
	} {
		for k, h := range hists(t, got, c.name) {
			if diff := cmp.Diff(c.bounds, h.Bounds); diff != "" {
				t.Errorf("%s %s: bounds (-want +got):\n%s", c.name, k, diff)
			}
		}
	}
}

// TestClose: after Close the observable gauges report nothing, the
// counters go on, and Close again returns nil.
func TestClose(t *testing.T) {
	m, r := newMetrics(t)
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, MillisBehindLatest: 5})
	m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: shard0, To: kinesisload.StateActive})
	got := collect(t, r)
	for _, name := range []string{"tidemark.shard.millis_behind_latest", "tidemark.shards"} {
		if _, ok := got[name]; !ok {
			t.Fatalf("%s missing before Close", name)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: shard0, MillisBehindLatest: 5})
	got = collect(t, r)
	for _, name := range []string{"tidemark.shard.millis_behind_latest", "tidemark.shards"} {
		if d, ok := got[name]; ok {
			t.Errorf("%s after Close: %+v, want no data", name, d.Data)
		}
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.shard=" + shard0 + ",tidemark.stream=orders": 2}, ints(t, got, "tidemark.getrecords.pages")); diff != "" {
		t.Errorf("tidemark.getrecords.pages after Close (-want +got):\n%s", diff)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestConcurrent: hooks called from many goroutines at once, while the
// reader collects, lose no measurement (and -race finds no race).
func TestConcurrent(t *testing.T) {
	m, r := newMetrics(t)
	const workers, perWorker = 8, 500
	shards := []string{shard0, shard1}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			sh := shards[w%len(shards)]
			for i := range perWorker {
				m.OnFetched(kinesisload.Fetched{Stream: stream, ShardID: sh, Records: 2, Bytes: 20, MillisBehindLatest: int64(i)})
				m.OnBatchDelivered(kinesisload.BatchDelivered{Stream: stream, ShardID: sh, Records: 2, Bytes: 20, Latency: time.Millisecond, Attempts: 1})
				m.OnRetry(kinesisload.Retry{Stream: stream, ShardID: sh, Op: "GetRecords"})
				m.OnShardState(kinesisload.ShardStateChanged{Stream: stream, ShardID: sh, To: kinesisload.StateActive})
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			var rm metricdata.ResourceMetrics
			_ = r.Collect(context.Background(), &rm)
		}
	})
	wg.Wait()
	got := collect(t, r)
	per := int64(workers / len(shards) * perWorker)
	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	for _, c := range []struct {
		name string
		want map[string]int64
	}{
		{"tidemark.getrecords.pages", map[string]int64{s0: per, s1: per}},
		{"tidemark.records.delivered", map[string]int64{s0: 2 * per, s1: 2 * per}},
		{"tidemark.bytes.delivered", map[string]int64{s0: 20 * per, s1: 20 * per}},
		{"tidemark.retries", map[string]int64{"tidemark.op=GetRecords," + s0: per, "tidemark.op=GetRecords," + s1: per}},
		{"tidemark.shard.state_changes", map[string]int64{"tidemark.state.from=NONE,tidemark.state.to=ACTIVE,tidemark.stream=orders": 2 * per}},
	} {
		if diff := cmp.Diff(c.want, ints(t, got, c.name)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	if diff := cmp.Diff(int64(2), ints(t, got, "tidemark.shards")["tidemark.state=ACTIVE,tidemark.stream=orders"]); diff != "" {
		t.Errorf("tidemark.shards ACTIVE (-want +got):\n%s", diff)
	}
}

// BenchmarkOnFetched is the hook called for every GetRecords page, on the
// SDK, from parallel goroutines.
func BenchmarkOnFetched(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := kotel.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		e := kinesisload.Fetched{Stream: stream, ShardID: shard0, Records: 100, Bytes: 1000, MillisBehindLatest: 7}
		for pb.Next() {
			m.OnFetched(e)
		}
	})
}

// BenchmarkOnBatchDelivered is the hook called for every committed batch.
func BenchmarkOnBatchDelivered(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := kotel.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		e := kinesisload.BatchDelivered{Stream: stream, ShardID: shard0, Records: 100, Bytes: 1000, Latency: 30 * time.Millisecond, Attempts: 1}
		for pb.Next() {
			m.OnBatchDelivered(e)
		}
	})
}
