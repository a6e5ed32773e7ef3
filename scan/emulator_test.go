package scan_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// localEnv is a kinesis-local started for one test, with a client and
// the helpers of the cases run against it.
type localEnv struct {
	client  *kinesis.Client
	streams atomic.Int64
}

// startKinesisLocal starts kinesis-local for t. The cases against it are
// written by other people against the real service: real time, real
// HTTP (so server time comes from the Date header), real arrival
// timestamps. Expiry (24 h retention, 300 s iterators) and throttling
// (not enforced) are covered by the fake only.
func startKinesisLocal(t *testing.T) *localEnv {
	e := emulator.Start(t, emulator.KinesisLocal)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(http.DefaultClient.CloseIdleConnections) // the emulator's health check
	return &localEnv{client: kinesis.New(kinesis.Options{
		Region:       emulator.Region,
		BaseEndpoint: aws.String(e.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})}
}

// newStream creates a stream of its own for t.
func (e *localEnv) newStream(t *testing.T, shards int) string {
	name := fmt.Sprintf("scan-%d", e.streams.Add(1))
	kinesistest.NewStream(t, e.client, name, shards)
	return name
}

// resolve resolves shards of stream through c with cfg, unpaced unless
// cfg says otherwise.
func (e *localEnv) resolve(t *testing.T, cfg scan.Config, c scan.Client, stream string, shards ...string) ([]scan.ShardResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if cfg.CallInterval == 0 {
		// kinesis-local does not enforce the 5 calls a second per
		// shard that pacing keeps to (pacing has tests of its own):
		// the scans of a record per page run at its speed.
		cfg.CallInterval = -1
	}
	return newResolver(t, cfg).Resolve(ctx, scan.Request{Client: c, Stream: stream, Shards: shards})
}

// pause sleeps d after every 20th put: records of distinct arrival times.
func pause(d time.Duration) func(int) {
	return func(i int) {
		if i > 0 && i%20 == 0 {
			time.Sleep(d)
		}
	}
}

// On kinesis-local, every strategy and page limit resolves "now" to just
// after the last record, whatever the shard holds: nothing, one record,
// records sharing timestamps, bursts with gaps, a closed shard.
func TestKinesisLocalResolvesNowAfterTheLastRecord(t *testing.T) {
	e := startKinesisLocal(t)
	client, newStream, resolve := e.client, e.newStream, e.resolve
	t.Run("server time", func(t *testing.T) {
		name := newStream(t, 1)
		out, err := client.GetShardIterator(context.Background(), &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: aws.String(shard0), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := awsmiddleware.GetServerTime(out.ResultMetadata); !ok || time.Since(st).Abs() > time.Minute {
			t.Errorf("server time %v, %v: the resolver's server-time path is not exercised", st, ok)
		}
	})

	setups := []struct {
		name  string
		setup func(t *testing.T, stream string) string
	}{
		{"empty shard", func(t *testing.T, stream string) string { return trimHorizon }},
		{"one record", func(t *testing.T, stream string) string {
			return after(putN(t, client, stream, shard0, 1, 10, nil))
		}},
		{"records sharing timestamps", func(t *testing.T, stream string) string {
			return after(putN(t, client, stream, shard0, 45, 10, nil))
		}},
		{"gaps between bursts", func(t *testing.T, stream string) string {
			return after(putN(t, client, stream, shard0, 60, 10, pause(400*time.Millisecond)))
		}},
		{"closed shard", func(t *testing.T, stream string) string {
			seq := putN(t, client, stream, shard0, 30, 10, pause(200*time.Millisecond))
			split(t, client, stream, shard0)
			if err := kinesistest.WaitActive(context.Background(), client, stream); err != nil {
				t.Fatal(err)
			}
			return after(seq)
		}},
	}
	for _, tc := range setups {
		t.Run(tc.name, func(t *testing.T) {
			stream := newStream(t, 1)
			want := tc.setup(t, stream)
			time.Sleep(300 * time.Millisecond) // some silence before now
			for _, st := range strategies {
				for _, limit := range []int32{1, 10000} {
					cfg := scan.Config{Strategy: st, PageLimit: limit, HeadLimit: limit}
					res, err := resolve(t, cfg, client, stream, shard0)
					if err != nil {
						t.Fatalf("%s, limit %d: %v", st, limit, err)
					}
					if diff := cmp.Diff(map[string]string{shard0: want}, positions(res)); diff != "" {
						t.Errorf("%s, limit %d: positions (-want +got):\n%s", st, limit, diff)
					}
				}
			}
		})
	}

}

// On kinesis-local, a scan meets what real pages and clocks do: empty
// pages in the middle, a skewed local clock, records that arrive while it
// runs.
func TestKinesisLocalScanMeetsOddPagesAndClocks(t *testing.T) {
	e := startKinesisLocal(t)
	client, newStream, resolve := e.client, e.newStream, e.resolve
	t.Run("empty pages in the middle", func(t *testing.T) {
		stream := newStream(t, 1)
		want := after(putN(t, client, stream, shard0, 40, 10, pause(300*time.Millisecond)))
		for _, st := range strategies {
			c := &recorder{Client: client, emptyEvery: 3}
			res, err := resolve(t, scan.Config{Strategy: st, PageLimit: 6, HeadLimit: 1}, c, stream, shard0)
			if err != nil {
				t.Fatalf("%s: %v", st, err)
			}
			if got := res[0].Position.String(); got != want || c.empties.Load() == 0 {
				t.Errorf("%s: %s after %d empty pages, want %s after some", st, got, c.empties.Load(), want)
			}
		}
	})

	t.Run("clock skew", func(t *testing.T) {
		stream := newStream(t, 1)
		want := after(putN(t, client, stream, shard0, 40, 10, pause(250*time.Millisecond)))
		for _, skew := range []time.Duration{-time.Hour, -5 * time.Second, 5 * time.Second, time.Hour} {
			cfg := scan.Config{HeadLimit: 1, Now: func() time.Time { return time.Now().Add(skew) }}
			res, err := resolve(t, cfg, client, stream, shard0)
			if err != nil {
				t.Fatalf("skew %v: %v", skew, err)
			}
			if got := res[0].Position.String(); got != want {
				t.Errorf("skew %v: %s, want %s", skew, got, want)
			}
		}
	})

	t.Run("records arrive during the scan", func(t *testing.T) {
		// With a resolution of 1 ms the probe strategy makes about ten
		// bisection probes, each with a GetRecords call (they are in the
		// past, so never refused); the full scan reads 40 records 10 at a
		// time. So the calls chosen below always happen.
		var calls sync.WaitGroup
		defer calls.Wait()
		for st, ns := range map[scan.Strategy][]int{scan.StrategyProbe: {1, 2, 5, 9}, scan.StrategyFullScan: {1, 3, 5}} {
			cfg := scan.Config{Strategy: st, PageLimit: 10, HeadLimit: 1, Resolution: time.Millisecond}
			for _, n := range ns {
				calls.Go(func() {
					t.Run(fmt.Sprintf("%s before call %d", st, n), func(t *testing.T) {
						stream := newStream(t, 1)
						putN(t, client, stream, shard0, 40, 10, pause(200*time.Millisecond))
						c := &onCall{Client: client, n: n, entered: make(chan struct{}), release: make(chan struct{})}
						type outcome struct {
							res []scan.ShardResult
							err error
						}
						done := make(chan outcome)
						go func() {
							res, err := resolve(t, cfg, c, stream, shard0)
							done <- outcome{res, err}
						}()
						var want string
						select {
						case <-c.entered:
							want = after(putN(t, client, stream, shard0, 15, 10, nil))
							close(c.release)
						case o := <-done:
							t.Fatalf("the scan ended (%v) before GetRecords call %d", o.err, n)
						}
						o := <-done
						if o.err != nil {
							t.Fatalf("call %d: %v", n, o.err)
						}
						if got := o.res[0].Position.String(); got != want {
							t.Errorf("records put before GetRecords call %d: %s, want %s", n, got, want)
						}
					})
				})
			}
		}
	})

}

// On kinesis-local, a batch fails whole for a missing shard, stops at its
// context's cancel, and reads at most Workers shards at once.
func TestKinesisLocalBatchFailsWholeAndKeepsItsBound(t *testing.T) {
	e := startKinesisLocal(t)
	client, newStream, resolve := e.client, e.newStream, e.resolve
	t.Run("a missing shard fails the batch", func(t *testing.T) {
		stream := newStream(t, 3)
		ids := shardIDs(t, client, stream)
		for _, id := range ids {
			putN(t, client, stream, id, 5, 10, nil)
		}
		missing := "shardId-000000000042"
		res, err := resolve(t, scan.Config{}, client, stream, append(ids, missing)...)
		var se *scan.ShardError
		if !errors.As(err, &se) || se.Shard != missing || se.Stream != stream || res != nil {
			t.Fatalf("Resolve = %d results, %v; want none and a ShardError for %s", len(res), err, missing)
		}
		var nf *types.ResourceNotFoundException
		if !errors.As(err, &nf) {
			t.Errorf("error %v is not a ResourceNotFoundException", err)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		stream := newStream(t, 2)
		ids := shardIDs(t, client, stream)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &onCall{Client: client, n: 2, cancel: cancel}
		res, err := newResolver(t, scan.Config{HeadLimit: 1}).Resolve(ctx, scan.Request{Client: c, Stream: stream, Shards: ids})
		if !errors.Is(err, context.Canceled) || res != nil {
			t.Fatalf("Resolve = %d results, %v; want none and context.Canceled", len(res), err)
		}
	})

	t.Run("worker bound", func(t *testing.T) {
		var names []string
		for range 3 {
			names = append(names, newStream(t, 20))
		}
		r := newResolver(t, scan.Config{Workers: 8})
		cc := newCounting(client, 8)
		ids := make([][]string, len(names))
		for i, name := range names {
			ids[i] = shardIDs(t, client, name)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(names))
		for i, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				_, errs[i] = r.Resolve(ctx, scan.Request{Client: cc, Stream: name, Shards: ids[i]})
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		if cc.max != 8 {
			t.Errorf("at most %d shards at once, want exactly 8", cc.max)
		}
	})
}

// onCall counts GetRecords calls. If n > 0, the nth call signals entered
// (if set) and waits for release, and cancels (if set) the batch first.
type onCall struct {
	scan.Client
	n, calls int
	mu       sync.Mutex
	entered  chan struct{}
	release  chan struct{}
	cancel   context.CancelFunc
}

func (c *onCall) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.mu.Lock()
	c.calls++
	hit := c.calls == c.n
	c.mu.Unlock()
	if hit {
		if c.cancel != nil {
			c.cancel()
		}
		if c.entered != nil {
			close(c.entered)
			select {
			case <-c.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return c.Client.GetRecords(ctx, in, optFns...)
}
