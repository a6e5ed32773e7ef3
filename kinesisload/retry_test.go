package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// retryLog is a hook that keeps every Retry and Throttled event.
type retryLog struct {
	mu        sync.Mutex
	retries   []Retry
	throttled []Throttled
}

func (h *retryLog) OnRetry(e Retry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.retries = append(h.retries, e)
}

func (h *retryLog) OnThrottled(e Throttled) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.throttled = append(h.throttled, e)
}

// maxAttempt returns the highest Attempt reported for op (and shard, when
// not empty).
func (h *retryLog) maxAttempt(op, shard string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.retries {
		if e.Op == op && (shard == "" || e.ShardID == shard) {
			n = max(n, e.Attempt)
		}
	}
	return n
}

// waitAttempts waits until op (on shard, if set) was retried at least n
// times in a row, failing if Run returns first.
func (h *retryLog) waitAttempts(t *testing.T, r *running, op, shard string, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for h.maxAttempt(op, shard) < n {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("Run returned %v while %s was failing transiently (attempt %d), want it to keep retrying", err, op, h.maxAttempt(op, shard))
		case <-deadline:
			t.Fatalf("%s (shard %q) retried only %d times, want %d", op, shard, h.maxAttempt(op, shard), n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

var (
	errInternal = &types.InternalFailureException{Message: aws.String("We encountered an internal error")}
	errRefused  = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
)

// quickRetries makes the Loader's Kinesis backoff short, so that many
// attempts fit in a test.
func quickRetries(cfg Config) Config {
	cfg.KinesisBackoff, cfg.KinesisMaxBackoff = time.Millisecond, 5*time.Millisecond
	return cfg
}

// TestLoaderRidesOutKinesisOutage fails every GetRecords and ListShards
// call for far more attempts than any old bound (5 per call, 5 ListShards)
// while records keep arriving: the Loader keeps retrying, its hooks and
// Stats show it, and after the outage every record is delivered.
func TestLoaderRidesOutKinesisOutage(t *testing.T) {
	s := newFakeStream(t, 2)
	shard0, shard1 := "shardId-000000000000", "shardId-000000000001"
	rec, hk, ih := newRecorder(), &retryLog{}, newInitHook()
	cfg := quickRetries(Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: 10 * time.Millisecond})
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih, hk, rec))
	ih.wait(t)
	var want []string
	for i := range 3 {
		want = append(want, fmt.Sprintf("before-%d", i))
		s.put([]string{shard0, shard1}[i%2], want[i])
	}
	rec.waitFor(t, want...)

	keys := []string{s.startingHashKey(shard0), s.startingHashKey(shard1)} // s.put lists shards
	removeGet := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: errInternal})
	removeList := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Err: errRefused})
	for i := range 10 {
		d := fmt.Sprintf("during-%d", i)
		want = append(want, d)
		if _, err := s.f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(s.name),
			PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(keys[i%2]), Data: []byte(d)}); err != nil {
			t.Fatal(err)
		}
	}
	const attempts = 30
	hk.waitAttempts(t, r, "GetRecords", shard0, attempts)
	hk.waitAttempts(t, r, "GetRecords", shard1, attempts)
	hk.waitAttempts(t, r, "ListShards", "", attempts)
	st := r.l.Stats()
	if !st.Running || !st.Initialised || st.Retries < attempts || !strings.Contains(st.LastError, "connection refused") {
		t.Errorf("Stats during the outage = %+v, want running, initialised, >= %d stream retries, the last error", st, attempts)
	}
	for _, sh := range st.Shards {
		if sh.Retries < attempts || !strings.Contains(sh.LastError, "InternalFailure") || sh.LastErrorAt.IsZero() {
			t.Errorf("Stats of shard %s = %+v, want >= %d retries and the InternalFailure", sh.ShardID, sh, attempts)
		}
	}
	removeGet()
	removeList()
	for i := range 3 {
		d := fmt.Sprintf("after-%d", i)
		want = append(want, d)
		s.put([]string{shard0, shard1}[i%2], d)
	}
	rec.waitFor(t, want...)
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
}

// TestLoaderRetriesFailedStartup makes the first initialisations fail
// transiently: ListShards fails more often than the old bound, then the
// LATEST scan exhausts its own retries. Run does not return: it starts the
// initialisation over until Kinesis answers, and then reads.
func TestLoaderRetriesFailedStartup(t *testing.T) {
	s := newFakeStream(t, 2)
	shard0, shard1 := "shardId-000000000000", "shardId-000000000001"
	s.put(shard0, "old-0")
	s.put(shard1, "old-1")
	s.settle()
	for n := 1; n <= 8; n++ {
		s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Nth: n, Err: errRefused})
	}
	removeGet := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: errInternal})
	rec, hk, ih := newRecorder(), &retryLog{}, newInitHook()
	cfg := quickRetries(Config{Stream: s.name, Sink: rec})
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())),
		WithResolver(fastResolver(t)), WithHooks(ih, hk, rec))
	hk.waitAttempts(t, r, "ListShards", "", 8)
	hk.waitAttempts(t, r, "Initialise", "", 3)
	if st := r.l.Stats(); !st.Running || st.Initialised {
		t.Errorf("Stats while initialisation fails = %+v, want running, not initialised", st)
	}
	removeGet()
	ih.wait(t)
	if st := r.l.Stats(); !st.Initialised {
		t.Errorf("Stats after initialisation = %+v, want initialised", st)
	}
	s.put(shard0, "new-0")
	s.put(shard1, "new-1")
	rec.waitFor(t, "new-0", "new-1")
	for _, d := range rec.delivered() {
		if strings.HasPrefix(d, "old") {
			t.Errorf("delivered %s, which was before LATEST", d)
		}
	}
}

// TestLoaderSinkRetriesForever refuses a batch far more often than the
// default SinkRetries: with SinkRetriesForever the Loader keeps trying.
func TestLoaderSinkRetriesForever(t *testing.T) {
	s := newFakeStream(t, 1)
	shard0 := "shardId-000000000000"
	rec, hk := newRecorder(), &retryLog{}
	var mu sync.Mutex
	refusals := 0
	rec.fail = func(Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if refusals < 40 {
			refusals++
			return errBoom
		}
		return nil
	}
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), SinkRetries: SinkRetriesForever,
		SinkBackoff: time.Millisecond, SinkMaxBackoff: time.Millisecond}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(hk, rec))
	s.put(shard0, "r1")
	rec.waitFor(t, "r1")
	if n := hk.maxAttempt("Deliver", shard0); n != 40 {
		t.Errorf("Deliver retried %d times, want 40", n)
	}
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
}

// failingStore fails every Save that moves a shard to a record position.
type failingStore struct{ PositionStore }

func (s failingStore) Save(ctx context.Context, stream string, updates []ShardProgress) error {
	for _, u := range updates {
		if u.Position.Kind == scan.KindAfterSequence {
			return errors.New("disk full")
		}
	}
	return s.PositionStore.Save(ctx, stream, updates)
}

// TestLoaderStopErrorsAreTyped checks every kind of stop: errors.As gives a
// *RunError naming stream, shard and operation, errors.Is its one class and
// the cause.
func TestLoaderStopErrorsAreTyped(t *testing.T) {
	shard0 := "shardId-000000000000"
	classes := []error{ErrSink, ErrKinesis, ErrLineage, ErrJournal, ErrInvalidConfig}
	denied := &types.AccessDeniedException{Message: aws.String("not authorized")}
	tests := []struct {
		name  string
		setup func(s *stream, cfg *Config, store *PositionStore)
		class error
		cause error // errors.Is target, if set
		shard string
		op    string
		says  string
	}{
		{
			name: "the sink gives up",
			setup: func(s *stream, cfg *Config, _ *PositionStore) {
				cfg.Sink.(*recorder).fail = func(Batch) error { return errBoom }
			},
			class: ErrSink, cause: errBoom, shard: shard0, op: "Deliver", says: "refused the batch",
		},
		{
			name: "reading is denied",
			setup: func(s *stream, _ *Config, _ *PositionStore) {
				s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: denied})
			},
			class: ErrKinesis, cause: denied, shard: shard0, op: "GetRecords",
		},
		{
			name: "listing is denied",
			setup: func(s *stream, _ *Config, _ *PositionStore) {
				s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Err: denied})
			},
			class: ErrKinesis, cause: denied, op: "ListShards",
		},
		{
			name: "a transient failure outlasts KinesisMaxAttempts",
			setup: func(s *stream, cfg *Config, _ *PositionStore) {
				cfg.KinesisMaxAttempts = 3
				s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: errInternal})
			},
			class: ErrKinesis, cause: errInternal, shard: shard0, op: "GetRecords", says: "giving up",
		},
		{
			name: "the store cannot save",
			setup: func(_ *stream, _ *Config, store *PositionStore) {
				*store = failingStore{*store}
			},
			class: ErrJournal, shard: shard0, op: "Save", says: "disk full",
		},
		{
			name: "a tracked shard vanished",
			setup: func(_ *stream, _ *Config, store *PositionStore) {
				ghost := ShardProgress{ShardID: "shardId-000000000009", State: StateActive, Position: scan.TrimHorizon()}
				if err := (*store).Save(context.Background(), "orders", []ShardProgress{ghost}); err != nil {
					panic(err)
				}
			},
			class: ErrLineage, shard: "shardId-000000000009", op: "Lineage", says: "shardId-000000000009",
		},
		{
			name: "a selected shard does not exist",
			setup: func(_ *stream, cfg *Config, _ *PositionStore) {
				cfg.Shards = map[string]scan.Position{"shardId-000000000042": {}}
			},
			class: ErrInvalidConfig, shard: "shardId-000000000042", op: "Config",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeStream(t, 1)
			var store PositionStore = memStore(t, journal.NewMemory())
			cfg := quickRetries(Config{Stream: s.name, Sink: newRecorder(), StartPosition: scan.TrimHorizon(), SinkRetries: SinkNoRetries})
			s.put(shard0, "r1")
			tt.setup(s, &cfg, &store)
			r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(store))
			err := r.wait(t)
			var re *RunError
			if !errors.As(err, &re) {
				t.Fatalf("Run = %v (%T), want a *RunError", err, err)
			}
			if re.Stream != s.name || re.Shard != tt.shard || re.Op != tt.op {
				t.Errorf("RunError{Stream: %q, Shard: %q, Op: %q}, want {%q, %q, %q}: %v", re.Stream, re.Shard, re.Op, s.name, tt.shard, tt.op, err)
			}
			for _, c := range classes {
				if got, want := errors.Is(err, c), c == tt.class; got != want {
					t.Errorf("errors.Is(err, %v) = %v, want %v: %v", c, got, want, err)
				}
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("Run = %v, want it to wrap %v", err, tt.cause)
			}
			if !strings.Contains(err.Error(), "stream "+s.name) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Run = %q, want it to name stream %s and say %q", err, s.name, tt.says)
			}
		})
	}
}

// checkStop checks that err, which stopped Run, fits the scheme of
// errors.go: a *RunError naming stream, shard and op, of exactly one class.
func checkStop(t *testing.T, err error, stream, shard, op string, class error) {
	t.Helper()
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("Run = %v (%T), want a *RunError", err, err)
	}
	if re.Stream != stream || re.Shard != shard || re.Op != op {
		t.Errorf("RunError{Stream: %q, Shard: %q, Op: %q}, want {%q, %q, %q}: %v", re.Stream, re.Shard, re.Op, stream, shard, op, err)
	}
	for _, c := range []error{ErrSink, ErrKinesis, ErrLineage, ErrJournal, ErrInvalidConfig} {
		if got, want := errors.Is(err, c), c == class; got != want {
			t.Errorf("errors.Is(err, %v) = %v, want %v: %v", c, got, want, err)
		}
	}
}

// sdkRetryCheck is a client that records, per operation, the calls whose
// per-call options leave the SDK's own retryer on.
type sdkRetryCheck struct {
	scan.Client
	mu          sync.Mutex
	calls, with map[string]int
}

func (c *sdkRetryCheck) check(op string, opts []func(*kinesis.Options)) {
	o := kinesis.Options{Retryer: retry.NewStandard()}
	for _, f := range opts {
		f(&o)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
	if _, nop := o.Retryer.(aws.NopRetryer); !nop {
		c.with[op]++
	}
}

func (c *sdkRetryCheck) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	c.check("ListShards", opts)
	return c.Client.ListShards(ctx, in, opts...)
}

func (c *sdkRetryCheck) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.check("GetShardIterator", opts)
	return c.Client.GetShardIterator(ctx, in, opts...)
}

func (c *sdkRetryCheck) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.check("GetRecords", opts)
	return c.Client.GetRecords(ctx, in, opts...)
}

// TestLoaderSwitchesSDKRetriesOff checks that every Kinesis call of the
// Loader (not only of the LATEST scan) turns the SDK's retries off: one
// retry layer, the Loader's.
func TestLoaderSwitchesSDKRetriesOff(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put("shardId-000000000000", "old")
	c := &sdkRetryCheck{Client: s.f, calls: map[string]int{}, with: map[string]int{}}
	rec, ih := newRecorder(), newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(c), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih))
	ih.wait(t)
	s.put("shardId-000000000001", "r1")
	rec.waitFor(t, "r1")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range []string{"ListShards", "GetShardIterator", "GetRecords"} {
		if c.calls[op] == 0 {
			t.Errorf("no %s call: the test does not exercise it", op)
		}
		if c.with[op] != 0 {
			t.Errorf("%d of %d %s calls left the SDK's retries on", c.with[op], c.calls[op], op)
		}
	}
}

// TestLoaderStats follows a Loader's snapshot through its life.
func TestLoaderStats(t *testing.T) {
	s := newFakeStream(t, 2)
	shard0, shard1 := "shardId-000000000000", "shardId-000000000001"
	rec, ih, hk := newRecorder(), newInitHook(), &retryLog{}
	cfg := quickRetries(Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()})
	l, err := New(cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Stream != s.name || st.Running || st.Initialised || len(st.Shards) != 0 {
		t.Errorf("Stats before Run = %+v, want the stream, not running, no shards", st)
	}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih, hk, rec))
	ih.wait(t)
	seq := s.put(shard0, "r1")
	rec.waitFor(t, "r1")
	// A failure on shard 1, retried.
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard1, Nth: 1, Err: errInternal})
	hk.waitAttempts(t, r, "GetRecords", shard1, 1)

	st := r.l.Stats()
	if !st.Running || !st.Initialised || st.Paused {
		t.Errorf("Stats = %+v, want running and initialised", st)
	}
	if len(st.Shards) != 2 {
		t.Fatalf("Stats.Shards = %+v, want 2 shards", st.Shards)
	}
	s0, s1 := st.Shards[0], st.Shards[1]
	if s0.ShardID != shard0 || s0.State != StateActive || s0.Position != scan.AfterSequence(seq) || !s0.Reading || s0.MillisBehindLatest < 0 || s0.Retries != 0 {
		t.Errorf("Stats of %s = %+v, want ACTIVE after %s, reading, a lag, no retries", shard0, s0, seq)
	}
	if s1.ShardID != shard1 || s1.Retries != 1 || !strings.Contains(s1.LastError, "InternalFailure") {
		t.Errorf("Stats of %s = %+v, want 1 retry and the InternalFailure", shard1, s1)
	}
	r.l.Pause()
	if st := r.l.Stats(); !st.Paused {
		t.Errorf("Stats after Pause = %+v, want paused", st)
	}
	r.l.Resume()
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
	if st := r.l.Stats(); st.Running || st.Initialised || st.Shards[0].Reading {
		t.Errorf("Stats after Run returned = %+v, want not running, not initialised, not reading", st)
	}
}
