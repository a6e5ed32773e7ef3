package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// withTune paces test readers faster than Kinesis allows.
func withTune(f func(*readerConfig)) Option {
	return optionFunc(func(o *options) { o.tune = f })
}

// fast is the option every fake-backed test uses: no pacing between reads.
var fast = withTune(func(rc *readerConfig) {
	rc.minInterval = time.Millisecond
	rc.readBytesPerSecond = -1
})

// event is one entry of a test's ordered log: a delivery or a state change.
type event struct {
	kind  string // "deliver", "state"
	shard string
	data  string     // delivered record data
	seq   string     // delivered record sequence number
	state ShardState // new state
	batch int        // index of the batch within this sink
	cp    scan.Position
}

// recorder is a Sink that logs every record it accepts, and a hook that
// logs state changes into the same ordered log.
type recorder struct {
	mu      sync.Mutex
	log     []event
	batches int
	// fail, when set, is consulted first; a non-nil error refuses the batch.
	fail func(b Batch) error
	// notify receives the data of every accepted record (non-blocking).
	notify chan string
	// stopped receives what Run returned, when start was given this
	// recorder as the Sink.
	stopped chan error
}

func newRecorder() *recorder { return &recorder{notify: make(chan string, 10000)} }

func (r *recorder) Deliver(ctx context.Context, b Batch) error {
	if r.fail != nil {
		if err := r.fail(b); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.batches++
	for _, rec := range b.Records {
		r.log = append(r.log, event{kind: "deliver", shard: b.ShardID, data: string(rec.Data), seq: rec.SequenceNumber, batch: r.batches, cp: b.Checkpoint})
	}
	r.mu.Unlock()
	for _, rec := range b.Records {
		select {
		case r.notify <- string(rec.Data):
		default:
		}
	}
	return nil
}

func (r *recorder) OnShardState(e ShardStateChanged) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, event{kind: "state", shard: e.ShardID, state: e.To})
}

// delivered returns the data of every accepted record, in order.
func (r *recorder) delivered() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.log {
		if e.kind == "deliver" {
			out = append(out, e.data)
		}
	}
	return out
}

func (r *recorder) events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// waitFor waits until every record in want has been delivered. It fails
// at once if a Loader the recorder was given to has stopped.
func (r *recorder) waitFor(t *testing.T, want ...string) {
	t.Helper()
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	deadline := time.After(20 * time.Second)
	for {
		got := r.delivered()
		missing := 0
		for _, w := range want {
			if !slices.Contains(got, w) {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		select {
		case <-r.notify:
		case <-time.After(20 * time.Millisecond):
		case err := <-stopped:
			t.Fatalf("the Loader stopped (%v) with %d of %d records missing; delivered: %q", err, missing, len(want), got)
		case <-deadline:
			t.Fatalf("timed out waiting for %d of %d records; delivered so far: %q", missing, len(want), got)
		}
	}
}

// stream is a fake stream with helpers to put records on chosen shards.
type stream struct {
	t     *testing.T
	f     *kinesistest.Fake
	name  string
	clock *offsetClock
}

// offsetClock is the real time plus an offset that a test moves forward.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func newFakeStream(t *testing.T, shards int, opts ...kinesistest.Option) *stream {
	t.Helper()
	clk := &offsetClock{}
	f := kinesistest.New(append([]kinesistest.Option{kinesistest.WithoutLimits(), kinesistest.WithClock(clk)}, opts...)...)
	kinesistest.NewStream(t, f, "orders", shards)
	return &stream{t: t, f: f, name: "orders", clock: clk}
}

// settle moves the fake's clock 2 s forward, so the records put so far
// arrived more than a second before a Loader that starts now: T0 comes from
// Kinesis's Date, whole seconds floored, so records of the second before the
// start may count as after it (see scan.Resolver.Now).
func (s *stream) settle() {
	s.clock.off.Add(int64(2 * time.Second))
}

// put writes one record whose data is data to shard, and returns its
// sequence number.
func (s *stream) put(shard, data string) string {
	s.t.Helper()
	out, err := s.f.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName:      aws.String(s.name),
		PartitionKey:    aws.String("k"),
		ExplicitHashKey: aws.String(s.startingHashKey(shard)),
		Data:            []byte(data),
	})
	if err != nil {
		s.t.Fatalf("put %s on %s: %v", data, shard, err)
	}
	if got := aws.ToString(out.ShardId); got != shard {
		s.t.Fatalf("put %s: landed on %s, want %s", data, got, shard)
	}
	return aws.ToString(out.SequenceNumber)
}

func (s *stream) shardInfo(shard string) (lo, hi *big.Int) {
	s.t.Helper()
	out, err := s.f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(s.name)})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, sh := range out.Shards {
		if aws.ToString(sh.ShardId) == shard {
			lo, _ = new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
			hi, _ = new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
			return lo, hi
		}
	}
	s.t.Fatalf("no shard %s", shard)
	return nil, nil
}

func (s *stream) startingHashKey(shard string) string {
	lo, _ := s.shardInfo(shard)
	return lo.String()
}

// split splits shard in the middle of its hash range.
func (s *stream) split(shard string) {
	s.t.Helper()
	lo, hi := s.shardInfo(shard)
	mid := new(big.Int).Add(lo, hi)
	mid.Rsh(mid, 1)
	_, err := s.f.SplitShard(context.Background(), &kinesis.SplitShardInput{
		StreamName: aws.String(s.name), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(mid.String()),
	})
	if err != nil {
		s.t.Fatalf("split %s: %v", shard, err)
	}
}

func (s *stream) merge(a, b string) {
	s.t.Helper()
	_, err := s.f.MergeShards(context.Background(), &kinesis.MergeShardsInput{
		StreamName: aws.String(s.name), ShardToMerge: aws.String(a), AdjacentShardToMerge: aws.String(b),
	})
	if err != nil {
		s.t.Fatalf("merge %s %s: %v", a, b, err)
	}
}

// openShards lists the shards that are open now.
func (s *stream) openShards() []string {
	s.t.Helper()
	out, err := s.f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(s.name)})
	if err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, sh := range out.Shards {
		if sh.SequenceNumberRange.EndingSequenceNumber == nil {
			ids = append(ids, aws.ToString(sh.ShardId))
		}
	}
	return ids
}

// initHook signals when initialisation has been journaled.
type initHook struct {
	ch  chan InitResolved
	run func(InitResolved)
}

func newInitHook() *initHook { return &initHook{ch: make(chan InitResolved, 16)} }

func (h *initHook) OnInitResolved(e InitResolved) {
	if h.run != nil {
		h.run(e)
	}
	h.ch <- e
}

func (h *initHook) wait(t *testing.T) InitResolved {
	t.Helper()
	select {
	case e := <-h.ch:
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("initialisation did not finish")
		return InitResolved{}
	}
}

// running is a Loader running in a goroutine.
type running struct {
	l    *Loader
	done chan error
}

func start(t *testing.T, ctx context.Context, cfg Config, opts ...Option) *running {
	t.Helper()
	if cfg.IdleWait == 0 {
		cfg.IdleWait = 200 * time.Millisecond
	}
	if cfg.SinkBackoff == 0 {
		cfg.SinkBackoff = time.Millisecond
	}
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("TIDEMARK_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts = append([]Option{fast, WithLogger(logger)}, opts...)
	cfg, opts = withTestReadMode(cfg, opts)
	cfg, opts = withTestWindows(cfg, opts)
	l, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := &running{l: l, done: make(chan error, 1)}
	rec, _ := cfg.Sink.(*recorder)
	if rec != nil {
		rec.mu.Lock()
		rec.stopped = make(chan error, 1)
		rec.mu.Unlock()
	}
	go func() {
		err := l.Run(ctx)
		if rec != nil {
			rec.stopped <- err
		}
		r.done <- err
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after Close")
		}
	})
	return r
}

// stop closes the Loader gracefully and returns what Run returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.l.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// wait waits for Run to return by itself.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func memStore(t *testing.T, j journal.Journal) *JournalStore {
	t.Helper()
	s, err := NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func indexOf(events []event, match func(event) bool) int {
	return slices.IndexFunc(events, match)
}

var errBoom = errors.New("boom")

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// fastResolver is a Resolver whose retries do not wait.
func fastResolver(t *testing.T) *scan.Resolver {
	t.Helper()
	r, err := scan.NewResolver(scan.Config{Backoff: []time.Duration{time.Millisecond}, Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
