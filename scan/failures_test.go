package scan_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// fourShards returns a world with stream "s" of four shards holding
// records, and the shard IDs.
func fourShards(t *testing.T) (*world, []string) {
	t.Helper()
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 4)
	ids := shardIDs(t, w.fake, "s")
	for i, id := range ids {
		putN(t, w.fake, "s", id, 20+i, 10, w.every(time.Second))
	}
	w.clock.Advance(time.Minute)
	return w, ids
}

func throttled() error {
	return &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for shard")}
}

// TestResolveAllOrNothing fails a batch in each way a batch can fail: it
// returns an error that names the stream and the shard, no results, and
// leaves no goroutine behind.
func TestResolveAllOrNothing(t *testing.T) {
	tests := []struct {
		name string
		// arm prepares the failure on shard ids[2]; ctx is the Resolve
		// context, cancel cancels it.
		arm       func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc)
		wantIs    error
		wantShard bool // the error is a ShardError for ids[2]
	}{
		{
			name: "a shard is not found",
			arm: func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc) {
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Shard: shard, Err: &types.ResourceNotFoundException{Message: aws.String("gone")}})
			},
			wantShard: true,
		},
		{
			// Throttling is retried until the batch deadline, not
			// Retries times.
			name: "a shard keeps throttling past the batch deadline",
			arm: func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc) {
				cfg.BatchTimeout = 100 * time.Millisecond
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard, Err: throttled()})
			},
			wantIs:    context.DeadlineExceeded,
			wantShard: true,
		},
		{
			name: "a scan panics",
			arm: func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc) {
				c.panicOn = shard
			},
			wantIs:    scan.ErrPanic,
			wantShard: true,
		},
		{
			name: "the batch deadline passes",
			arm: func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc) {
				cfg.BatchTimeout = 50 * time.Millisecond
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard, Block: make(chan struct{})})
			},
			wantIs: context.DeadlineExceeded,
		},
		{
			name: "the caller cancels",
			arm: func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc) {
				entered := make(chan struct{}, 1)
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard, Entered: entered, Block: make(chan struct{})})
				go func() { <-entered; cancel() }()
			},
			wantIs: context.Canceled,
		},
		{
			name: "the caller cancels during a backoff",
			arm: func(t *testing.T, w *world, cfg *scan.Config, c *recorder, shard string, cancel context.CancelFunc) {
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard, Err: throttled()})
				cfg.Sleep = nil // the real timer
				cfg.Backoff = []time.Duration{time.Hour}
				cfg.Hooks.Retry = func(scan.RetryEvent) { cancel() }
			},
			wantIs: context.Canceled,
		},
	}
	for _, tc := range tests {
		for _, st := range strategies {
			t.Run(tc.name+"/"+st.String(), func(t *testing.T) {
				defer goleak.VerifyNone(t)
				w, ids := fourShards(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cfg := w.testConfig(st, 0)
				cfg.Workers = 2
				c := &recorder{Client: w.fake}
				tc.arm(t, w, &cfg, c, ids[2], cancel)
				var mu sync.Mutex
				resolved := 0
				cfg.Hooks.ShardResolved = func(string, scan.ShardResult) { mu.Lock(); resolved++; mu.Unlock() }
				res, err := newResolver(t, cfg).Resolve(ctx, scan.Request{Client: c, Stream: "s", Shards: ids})
				if n := c.inFlight.Load(); n != 0 {
					t.Errorf("%d calls still in flight when Resolve returned", n)
				}
				if err == nil {
					t.Fatalf("Resolve succeeded with %v, want an error", positions(res))
				}
				if res != nil {
					t.Errorf("Resolve returned %d results with its error, want none", len(res))
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("error %q is not %q", err, tc.wantIs)
				}
				if !strings.Contains(err.Error(), `stream "s"`) {
					t.Errorf("error %q does not name the stream", err)
				}
				var se *scan.ShardError
				if tc.wantShard {
					if !errors.As(err, &se) || se.Shard != ids[2] || se.Stream != "s" {
						t.Errorf("error %q is not a ShardError for stream s shard %s", err, ids[2])
					}
					if !strings.Contains(err.Error(), ids[2]) {
						t.Errorf("error %q does not name shard %s", err, ids[2])
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if resolved >= len(ids) {
					t.Errorf("all %d shards were reported resolved", resolved)
				}
			})
		}
	}
}

func TestResolveQueueFull(t *testing.T) {
	t.Run("a batch larger than the queue", func(t *testing.T) {
		w, ids := fourShards(t)
		cfg := w.testConfig(scan.StrategyProbe, 0)
		cfg.QueueSize = 3
		before := w.fake.Calls(kinesistest.OpGetShardIterator)
		res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids})
		if !errors.Is(err, scan.ErrQueueFull) || res != nil {
			t.Fatalf("Resolve = %d results, %v; want none and ErrQueueFull", len(res), err)
		}
		if n := w.fake.Calls(kinesistest.OpGetShardIterator) - before; n != 0 {
			t.Errorf("%d calls were made for a batch refused at once", n)
		}
	})
	t.Run("a queue held by another batch", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		w, ids := fourShards(t)
		cfg := w.testConfig(scan.StrategyProbe, 0)
		cfg.Workers = 1
		cfg.QueueSize = 2
		r := newResolver(t, cfg)
		entered, release := make(chan struct{}, 1), make(chan struct{})
		w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Shard: ids[0], Nth: 1, Entered: entered, Block: release})

		// Batch A: two shards; the worker holds ids[0], ids[1] waits.
		var wg sync.WaitGroup
		var errA, errC error
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errA = r.Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[:2]})
		}()
		<-entered
		// One place is left: two shards do not fit, one does.
		if _, err := r.Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[2:]}); !errors.Is(err, scan.ErrQueueFull) {
			t.Errorf("batch B: %v, want ErrQueueFull", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errC = r.Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[3:]})
		}()
		close(release)
		wg.Wait()
		if errA != nil || errC != nil {
			t.Fatalf("batch A: %v, batch C: %v; want both resolved", errA, errC)
		}
		// Every place was given back.
		res, err := r.Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[:2]})
		if err != nil || len(res) != 2 {
			t.Errorf("batch D = %d results, %v; want 2 and no error", len(res), err)
		}
	})
}

func TestResolveRetries(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			w, ids := fourShards(t)
			want := map[string]string{}
			base := w.testConfig(st, 0)
			base.PageLimit = 5 // several pages, so that there are five calls
			res0, err := newResolver(t, base).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[:1]})
			if err != nil {
				t.Fatal(err)
			}
			want[ids[0]] = res0[0].Position.String()

			// Throttle the second and third GetRecords calls, and time out
			// the fifth.
			w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: 2, Err: throttled()})
			w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: 3, Err: throttled()})
			w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: 5, Block: make(chan struct{})})
			cfg := w.testConfig(st, 0)
			cfg.CallTimeout = 20 * time.Millisecond
			cfg.PageLimit = 5
			cfg.HeadLimit = 1
			cfg.CallInterval = -1 // only backoff sleeps
			var slept []time.Duration
			sleep := cfg.Sleep
			cfg.Sleep = func(ctx context.Context, d time.Duration) error {
				slept = append(slept, d)
				return sleep(ctx, d)
			}
			var events []scan.RetryEvent
			cfg.Hooks.Retry = func(e scan.RetryEvent) { events = append(events, e) }
			c := &recorder{Client: w.fake}
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: ids[:1]})
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(want, positions(res)); diff != "" {
				t.Errorf("positions (-want +got):\n%s", diff)
			}
			if len(events) != 3 || res[0].Stats.Retries != 3 {
				t.Fatalf("%d retry events, Stats.Retries = %d; want 3 and 3: %+v", len(events), res[0].Stats.Retries, events)
			}
			for i, wantAttempt := range []int{1, 2, 1} {
				e := events[i]
				if e.Stream != "s" || e.Shard != ids[0] || e.Op != "GetRecords" || e.Attempt != wantAttempt || e.Err == nil {
					t.Errorf("event %d = %+v, want stream s, shard %s, GetRecords, attempt %d, an error", i, e, ids[0], wantAttempt)
				}
				base := scan.DefaultBackoff()[wantAttempt-1]
				if e.Backoff < base || e.Backoff > base+base/5 {
					t.Errorf("event %d: backoff %v, want %v plus at most 20%% jitter", i, e.Backoff, base)
				}
				if slept[i] != e.Backoff {
					t.Errorf("slept %v before retry %d, the event said %v", slept[i], i, e.Backoff)
				}
			}
			if !errors.Is(events[2].Err, context.DeadlineExceeded) {
				t.Errorf("third retry after %v, want the call timeout", events[2].Err)
			}
			if c.withSDKRetries != 0 {
				t.Errorf("%d of %d calls left the SDK's retries on", c.withSDKRetries, c.calls)
			}
		})
	}
}

func TestResolveRetryBounds(t *testing.T) {
	tests := []struct {
		name      string
		retries   int
		err       error
		wantCalls int
	}{
		{"internal failure", 0, &types.InternalFailureException{Message: aws.String("oops")}, 4},
		{"internal failure, one retry", 1, &types.InternalFailureException{Message: aws.String("oops")}, 2},
		{"internal failure, retries off", -1, &types.InternalFailureException{Message: aws.String("oops")}, 1},
		{"invalid argument is not retried", 0, &types.InvalidArgumentException{Message: aws.String("bad")}, 1},
		{"access denied is not retried", 0, &types.AccessDeniedException{Message: aws.String("no")}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, ids := fourShards(t)
			w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Err: tc.err})
			cfg := w.testConfig(scan.StrategyProbe, 0)
			cfg.Retries = tc.retries
			_, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[:1]})
			if !errors.Is(err, tc.err) {
				t.Fatalf("Resolve: %v, want %v", err, tc.err)
			}
			if got := w.fake.Calls(kinesistest.OpGetShardIterator); got != tc.wantCalls {
				t.Errorf("%d GetShardIterator calls, want %d", got, tc.wantCalls)
			}
		})
	}
}

// TestResolveThrottlingIsNotARetry throttles a scan more often than
// Retries allows: throttling is retried while the batch's context lives,
// without using up the budget for failures, and with backoff.
func TestResolveThrottlingIsNotARetry(t *testing.T) {
	for _, retries := range []int{-1, 0, 2} {
		t.Run(fmt.Sprintf("retries %d", retries), func(t *testing.T) {
			w, ids := fourShards(t)
			const throttles = 8
			for n := 1; n <= throttles; n++ {
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Nth: n, Err: throttled()})
			}
			// And one real failure, which Retries must still allow
			// (unless retries are off).
			if retries >= 0 {
				w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Nth: throttles + 1, Err: &types.InternalFailureException{Message: aws.String("oops")}})
			}
			cfg := w.testConfig(scan.StrategyProbe, 0)
			cfg.Retries = retries
			var events []scan.RetryEvent
			cfg.Hooks.Retry = func(e scan.RetryEvent) { events = append(events, e) }
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[:1]})
			if err != nil {
				t.Fatalf("Resolve: %v, want throttling retried beyond Retries = %d", err, retries)
			}
			want := throttles
			if retries >= 0 {
				want++
			}
			if len(events) != want || res[0].Stats.Retries != want {
				t.Errorf("%d retry events, Stats.Retries = %d; want %d", len(events), res[0].Stats.Retries, want)
			}
			for i, e := range events {
				if e.Backoff <= 0 {
					t.Errorf("retry %d after %v without backoff", i+1, e.Err)
				}
			}
		})
	}
}

// TestResolvePacesCalls resolves shards on a fake that enforces the
// per-shard limits of 5 GetRecords and 5 GetShardIterator calls per
// second: the scan keeps within them, and is never throttled.
func TestResolvePacesCalls(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			limits := kinesistest.Limits{GetRecordsPerSecond: 5, GetShardIteratorPerSecond: 5}
			w := newWorld(t, kinesistest.WithLimits(limits))
			kinesistest.NewStream(t, w.fake, "s", 1)
			putN(t, w.fake, "s", shard0, 300, 1, w.every(time.Second))
			w.clock.Advance(time.Minute)
			cfg := w.testConfig(st, 0)
			cfg.PageLimit = 20 // many calls, close together
			var throttledCalls int
			cfg.Hooks.Retry = func(scan.RetryEvent) { throttledCalls++ }
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Stats.Calls < 10 {
				t.Fatalf("only %d calls: the test does not exercise the limits", res[0].Stats.Calls)
			}
			fs, err := w.fake.Stats("s", shard0)
			if err != nil {
				t.Fatal(err)
			}
			if throttledCalls != 0 || fs.GetRecordsThrottled != 0 || fs.GetShardIteratorThrottled != 0 {
				t.Errorf("%d retries, %d GetRecords and %d GetShardIterator calls throttled by the fake; want none: the scan must pace its calls",
					throttledCalls, fs.GetRecordsThrottled, fs.GetShardIteratorThrottled)
			}
		})
	}
}

// TestResolveExpiredIterator lets a real expiry happen in the middle of a
// read (the clock moves past 300 s while a call is held) and checks where the
// new iterator starts.
func TestResolveExpiredIterator(t *testing.T) {
	t.Run("full scan resumes after the last record seen", func(t *testing.T) {
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		seqs := putSeqs(t, w.fake, "s", shard0, 35, 10, w.every(time.Second))
		w.clock.Advance(time.Minute)
		entered, release := make(chan struct{}, 1), make(chan struct{})
		w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: 3, Entered: entered, Block: release})
		go func() { <-entered; w.clock.Advance(301 * time.Second); close(release) }()
		cfg := w.testConfig(scan.StrategyFullScan, 0)
		cfg.PageLimit = 10
		c := &recorder{Client: w.fake}
		res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}})
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		if got, want := res[0].Position.String(), after(seqs[34]); got != want {
			t.Errorf("position %s, want %s", got, want)
		}
		if diff := cmp.Diff([]string{"TRIM_HORIZON", "AFTER_SEQUENCE_NUMBER:" + seqs[19]}, c.iteratorTypes()); diff != "" {
			t.Errorf("iterators (-want +got):\n%s", diff)
		}
		if res[0].Stats.Retries != 1 {
			t.Errorf("Stats.Retries = %d, want 1", res[0].Stats.Retries)
		}
	})
	t.Run("a probe starts again where it started", func(t *testing.T) {
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		want := putN(t, w.fake, "s", shard0, 35, 10, w.every(time.Second))
		w.clock.Advance(time.Minute)
		entered, release := make(chan struct{}, 1), make(chan struct{})
		w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Nth: 2, Entered: entered, Block: release})
		go func() { <-entered; w.clock.Advance(301 * time.Second); close(release) }()
		c := &recorder{Client: w.fake}
		cfg := w.testConfig(scan.StrategyProbe, 0)
		cfg.HeadLimit = 1
		res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}})
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		if got := res[0].Position.String(); got != after(want) {
			t.Errorf("position %s, want %s", got, after(want))
		}
		its := c.iteratorTypes()
		// The second call is the first time probe: its iterator is
		// requested again, at the same time.
		if len(its) < 3 || its[1] != "AT_TIMESTAMP" || its[2] != "AT_TIMESTAMP" {
			t.Fatalf("iterators %v, want the second requested twice", its)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.iters[1].Timestamp.Equal(*c.iters[2].Timestamp) {
			t.Errorf("probe restarted at %v, it started at %v", *c.iters[2].Timestamp, *c.iters[1].Timestamp)
		}
	})
}

func TestNewResolverRejects(t *testing.T) {
	tests := []struct {
		cfg   scan.Config
		field string
	}{
		{scan.Config{Strategy: 7}, "Strategy"},
		{scan.Config{Workers: -1}, "Workers"},
		{scan.Config{QueueSize: -1}, "QueueSize"},
		{scan.Config{CallTimeout: -time.Second}, "CallTimeout"},
		{scan.Config{BatchTimeout: -time.Second}, "BatchTimeout"},
		{scan.Config{PageLimit: 10001}, "PageLimit"},
		{scan.Config{PageLimit: -1}, "PageLimit"},
		{scan.Config{HeadLimit: 10001}, "HeadLimit"},
		{scan.Config{InitialWindow: -1}, "InitialWindow"},
		{scan.Config{Resolution: -1}, "Resolution"},
		{scan.Config{Jitter: 1.5}, "Jitter"},
		{scan.Config{Backoff: []time.Duration{time.Second, -1}}, "Backoff[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			_, err := scan.NewResolver(tc.cfg)
			if !errors.Is(err, scan.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewResolver: %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

func TestNewResolverDefaults(t *testing.T) {
	r := newResolver(t, scan.Config{})
	got := r.Config()
	if got.Sleep == nil || got.Now == nil {
		t.Fatalf("Sleep or Now left nil")
	}
	got.Sleep, got.Now = nil, nil
	want := scan.Config{
		Strategy:      scan.StrategyProbe,
		Workers:       8,
		QueueSize:     1024,
		CallTimeout:   30 * time.Second,
		Retries:       3,
		CallInterval:  200 * time.Millisecond,
		Backoff:       []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
		Jitter:        0.2,
		PageLimit:     10000,
		HeadLimit:     100,
		InitialWindow: time.Second,
		Resolution:    100 * time.Millisecond,
		ProbeTimeout:  time.Second,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestResolveRejectsRequests(t *testing.T) {
	w := newWorld(t)
	r := newResolver(t, scan.Config{})
	tests := []struct {
		name string
		req  scan.Request
		want string
	}{
		{"no client", scan.Request{Stream: "s", Shards: []string{shard0}}, "Client"},
		{"no stream", scan.Request{Client: w.fake, Shards: []string{shard0}}, "Stream"},
		{"empty shard", scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0, ""}}, "Shards[1]"},
		{"duplicate shard", scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0, "x", shard0}}, "Shards[0] and Shards[2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := r.Resolve(context.Background(), tc.req)
			if !errors.Is(err, scan.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) || res != nil {
				t.Errorf("Resolve = %v, %v; want no results and ErrInvalidRequest naming %s", res, err, tc.want)
			}
		})
	}
	t.Run("no shards", func(t *testing.T) {
		res, err := r.Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s"})
		if err != nil || res == nil || len(res) != 0 {
			t.Errorf("Resolve = %v, %v; want an empty result", res, err)
		}
	})
}

func TestResolveHookShardResolved(t *testing.T) {
	w, ids := fourShards(t)
	cfg := w.testConfig(scan.StrategyProbe, 0)
	var mu sync.Mutex
	got := map[string]scan.ShardResult{}
	cfg.Hooks.ShardResolved = func(stream string, r scan.ShardResult) {
		mu.Lock()
		defer mu.Unlock()
		if stream != "s" {
			t.Errorf("hook got stream %q", stream)
		}
		if _, dup := got[r.Shard]; dup {
			t.Errorf("hook called twice for %s", r.Shard)
		}
		got[r.Shard] = r
	}
	res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]scan.ShardResult{}
	for _, r := range res {
		want[r.Shard] = r
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hook results (-want +got):\n%s", diff)
	}
}

// stuck holds the first GetShardIterator call until release is closed,
// whatever its context says, as a call stuck in the network would.
type stuck struct {
	scan.Client
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (c *stuck) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	first := false
	c.once.Do(func() { first = true })
	if first {
		close(c.entered)
		<-c.release
	}
	return c.Client.GetShardIterator(ctx, in, optFns...)
}

// TestResolveBatchTimeoutCoversQueueing lets a batch wait for the only
// worker, held by another batch, past its deadline: it fails without a call,
// and gives its place in the queue back.
func TestResolveBatchTimeoutCoversQueueing(t *testing.T) {
	defer goleak.VerifyNone(t)
	w, ids := fourShards(t)
	cfg := w.testConfig(scan.StrategyProbe, 0)
	cfg.Workers = 1
	cfg.QueueSize = 2
	cfg.BatchTimeout = 30 * time.Millisecond
	r := newResolver(t, cfg)
	a := &stuck{Client: w.fake, entered: make(chan struct{}), release: make(chan struct{})}
	errA := make(chan error, 1)
	go func() {
		_, err := r.Resolve(context.Background(), scan.Request{Client: a, Stream: "s", Shards: ids[:1]})
		errA <- err
	}()
	<-a.entered
	b := &recorder{Client: w.fake}
	res, err := r.Resolve(context.Background(), scan.Request{Client: b, Stream: "s", Shards: ids[1:3]})
	if !errors.Is(err, context.DeadlineExceeded) || res != nil {
		t.Fatalf("batch B = %d results, %v; want none and the deadline", len(res), err)
	}
	if b.calls != 0 {
		t.Errorf("batch B made %d calls while queued", b.calls)
	}
	close(a.release)
	if err := <-errA; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("batch A: %v, want the deadline", err)
	}
	// Both batches gave their places back: two shards fit again.
	res, err = r.Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: ids[2:]})
	if err != nil || len(res) != 2 {
		t.Errorf("batch C = %d results, %v; want 2", len(res), err)
	}
}
