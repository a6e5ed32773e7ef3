package kotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// hashKeys route a record to shard 0 or shard 1 of a two-shard stream
// (even hash-key ranges: shard 1 starts at 2^127).
var hashKeys = []string{"0", "170141183460469231731687303715884105728"}

// putRecords puts n records, alternately into shard 0 and shard 1.
func putRecords(fake *kinesistest.Fake, n int) error {
	for i := range n {
		_, err := fake.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(stream),
			PartitionKey: aws.String(fmt.Sprint("k", i)), ExplicitHashKey: aws.String(hashKeys[i%2]), Data: []byte(fmt.Sprint("record ", i))})
		if err != nil {
			return fmt.Errorf("PutRecord %d: %w", i, err)
		}
	}
	return nil
}

// countingSink counts the records of each shard and closes the Loader once
// want records arrived.
type countingSink struct {
	mu     sync.Mutex
	want   int
	got    map[string]int64
	total  int
	loader *kinesisload.Loader
	// refuse is a shard whose first delivery the Sink refuses with
	// errSinkDown; "" for none.
	refuse  string
	refused bool
}

var errSinkDown = errors.New("sink down")

func (s *countingSink) Deliver(_ context.Context, b kinesisload.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.ShardID == s.refuse && !s.refused {
		s.refused = true
		return errSinkDown
	}
	s.got[b.ShardID] += int64(len(b.Records))
	s.total += len(b.Records)
	if s.total == s.want {
		go func() { _ = s.loader.Close(context.Background()) }()
	}
	return nil
}

// runLoader runs a Loader over fake with m as its hook until sink closes
// it, and fails the test if Run returns anything but ErrClosed.
func runLoader(t *testing.T, fake *kinesistest.Fake, start scan.Position, sink *countingSink, hooks ...kinesisload.Hook) {
	t.Helper()
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = stream
	cfg.Sink = sink
	cfg.Dir = t.TempDir()
	cfg.StartPosition = start
	cfg.IdleWait = 200 * time.Millisecond
	loader, err := kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithHooks(hooks...),
		kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("kinesisload.New: %v", err)
	}
	sink.loader = loader
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := loader.Run(ctx); !errors.Is(err, kinesisload.ErrClosed) {
		t.Fatalf("Run: %v, want ErrClosed", err)
	}
}

// TestLoaderTrimHorizon: a real Loader reading a two-shard stream from
// TRIM_HORIZON reports every delivered record, a millis-behind gauge for
// each shard, both shards ACTIVE, and an initialisation that resolved
// nothing.
func TestLoaderTrimHorizon(t *testing.T) {
	m, r := newMetrics(t)
	fake := kinesistest.New()
	kinesistest.NewStream(t, fake, stream, 2)
	const n = 6
	if err := putRecords(fake, n); err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{want: n, got: map[string]int64{}}
	runLoader(t, fake, scan.TrimHorizon(), sink, m)
	got := collect(t, r)

	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	if diff := cmp.Diff(map[string]int64{s0: n / 2, s1: n / 2}, ints(t, got, "tidemark.records.delivered")); diff != "" {
		t.Errorf("tidemark.records.delivered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{shard0: n / 2, shard1: n / 2}, sink.got); diff != "" {
		t.Errorf("records the Sink got (-want +got):\n%s", diff)
	}
	behind := ints(t, got, "tidemark.shard.millis_behind_latest")
	for _, k := range []string{s0, s1} {
		if v, ok := behind[k]; !ok || v < 0 {
			t.Errorf("tidemark.shard.millis_behind_latest{%s} = %d, %v; want a value >= 0", k, v, ok)
		}
	}
	if len(behind) != 2 {
		t.Errorf("tidemark.shard.millis_behind_latest has %d series (%v), want 2", len(behind), behind)
	}
	if v := ints(t, got, "tidemark.shards")["tidemark.state=ACTIVE,tidemark.stream=orders"]; v != 2 {
		t.Errorf("tidemark.shards{ACTIVE} = %d, want 2", v)
	}
	var toActive int64
	for k, v := range ints(t, got, "tidemark.shard.state_changes") {
		if strings.HasSuffix(k, ",tidemark.state.to=ACTIVE,tidemark.stream=orders") {
			toActive += v
		}
	}
	if toActive != 2 {
		t.Errorf("tidemark.shard.state_changes to ACTIVE: %d, want 2", toActive)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 0}, ints(t, got, "tidemark.init.resolved")); diff != "" {
		t.Errorf("tidemark.init.resolved (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"tidemark.stream=orders": 1}, floats(t, got, "tidemark.init.progress")); diff != "" {
		t.Errorf("tidemark.init.progress (-want +got):\n%s", diff)
	}
	pages := ints(t, got, "tidemark.getrecords.pages")
	if pages[s0] < 1 || pages[s1] < 1 {
		t.Errorf("tidemark.getrecords.pages = %v, want at least 1 per shard", pages)
	}
	// One process: each shard's lease acquired as initial, handed off by
	// Close, none held after.
	if diff := cmp.Diff(map[string]int64{"tidemark.lease.reason=initial," + s0: 1, "tidemark.lease.reason=initial," + s1: 1},
		ints(t, got, "tidemark.leases.acquired")); diff != "" {
		t.Errorf("tidemark.leases.acquired (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.lease.reason=close," + s0: 1, "tidemark.lease.reason=close," + s1: 1},
		ints(t, got, "tidemark.leases.handed_off")); diff != "" {
		t.Errorf("tidemark.leases.handed_off (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 0}, ints(t, got, "tidemark.leases.held")); diff != "" {
		t.Errorf("tidemark.leases.held (-want +got):\n%s", diff)
	}
}

// initSignal is a hook that closes a channel once initialisation is
// journaled.
type initSignal struct {
	once sync.Once
	done chan struct{}
}

func (s *initSignal) OnInitResolved(kinesisload.InitResolved) { s.once.Do(func() { close(s.done) }) }

// TestLoaderLatest: a Loader starting at LATEST resolves both shards (the
// init instruments count them) and delivers only the records put after
// initialisation.
func TestLoaderLatest(t *testing.T) {
	m, r := newMetrics(t)
	fake := kinesistest.New()
	kinesistest.NewStream(t, fake, stream, 2)
	if err := putRecords(fake, 4); err != nil { // before the start: never delivered
		t.Fatal(err)
	}
	// T0, which LATEST resolves at, is Kinesis's Date floored to the
	// second: the second before the start may count as after it.
	time.Sleep(2 * time.Second)
	const n = 2
	sink := &countingSink{want: n, got: map[string]int64{}}
	sig := &initSignal{done: make(chan struct{})}
	putErr := make(chan error, 1)
	go func() {
		select {
		case <-sig.done:
			putErr <- putRecords(fake, n)
		case <-time.After(30 * time.Second):
			putErr <- errors.New("initialisation did not finish in 30 s")
		}
	}()
	runLoader(t, fake, scan.Latest(), sink, m, sig)
	if err := <-putErr; err != nil {
		t.Fatal(err)
	}
	got := collect(t, r)

	if diff := cmp.Diff(map[string]int64{"tidemark.stream=orders": 2}, ints(t, got, "tidemark.init.resolved")); diff != "" {
		t.Errorf("tidemark.init.resolved (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"tidemark.stream=orders": 1}, floats(t, got, "tidemark.init.progress")); diff != "" {
		t.Errorf("tidemark.init.progress (-want +got):\n%s", diff)
	}
	if v := ints(t, got, "tidemark.init.calls")["tidemark.stream=orders"]; v < 2 {
		t.Errorf("tidemark.init.calls = %d, want at least one call per shard", v)
	}
	if h := hists(t, got, "tidemark.init.duration")["tidemark.stream=orders"]; h.Count != 1 {
		t.Errorf("tidemark.init.duration count = %d, want 1", h.Count)
	}
	s0 := "tidemark.shard=" + shard0 + ",tidemark.stream=orders"
	s1 := "tidemark.shard=" + shard1 + ",tidemark.stream=orders"
	if diff := cmp.Diff(map[string]int64{s0: n / 2, s1: n / 2}, ints(t, got, "tidemark.records.delivered")); diff != "" {
		t.Errorf("tidemark.records.delivered (-want +got):\n%s", diff)
	}
	if h := hists(t, got, "tidemark.batch.attempts")["tidemark.stream=orders"]; h.Sum != float64(h.Count) {
		t.Errorf("tidemark.batch.attempts: sum %v over %d batches, want 1 attempt each", h.Sum, h.Count)
	}
}
