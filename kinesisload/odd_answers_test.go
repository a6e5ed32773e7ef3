package kinesisload

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// oddClient wraps a Kinesis client and spoils chosen answers, the way a
// proxy, an emulator or a bug could: no output at all, or an open shard's
// page without NextShardIterator.
type oddClient struct {
	scan.Client
	// records, if set, may replace the answer to GetRecords call n (from
	// 1, counting every call through this client).
	records func(n int, out *kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput
	// iterators, if set, may replace the answer to GetShardIterator call n.
	iterators func(n int, out *kinesis.GetShardIteratorOutput) *kinesis.GetShardIteratorOutput

	mu      sync.Mutex
	n, nIt  int
	spoiled int
}

func (c *oddClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.Client.GetRecords(ctx, in, opts...)
	if err != nil || c.records == nil {
		return out, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	odd := c.records(c.n, out)
	if odd != out {
		c.spoiled++
	}
	return odd, nil
}

func (c *oddClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := c.Client.GetShardIterator(ctx, in, opts...)
	if err != nil || c.iterators == nil {
		return out, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nIt++
	odd := c.iterators(c.nIt, out)
	if odd != out {
		c.spoiled++
	}
	return odd, nil
}

func (c *oddClient) spoilt() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spoiled
}

// The odd answers, each applied to the answers it names.
var oddAnswers = []struct {
	name      string
	records   func(*kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput
	iterators func(*kinesis.GetShardIteratorOutput) *kinesis.GetShardIteratorOutput
}{
	{name: "nil GetRecords output", records: func(*kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput { return nil }},
	{name: "no NextShardIterator", records: func(o *kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput {
		c := *o
		c.NextShardIterator, c.ChildShards = nil, nil
		return &c
	}},
	{name: "no NextShardIterator, empty ChildShards", records: func(o *kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput {
		c := *o
		c.NextShardIterator, c.ChildShards = nil, []types.ChildShard{}
		return &c
	}},
	{name: "nil GetShardIterator output", iterators: func(*kinesis.GetShardIteratorOutput) *kinesis.GetShardIteratorOutput { return nil }},
	{name: "no ShardIterator", iterators: func(o *kinesis.GetShardIteratorOutput) *kinesis.GetShardIteratorOutput {
		return &kinesis.GetShardIteratorOutput{ResultMetadata: o.ResultMetadata}
	}},
}

// every returns a spoiler that spoils answers 1, 3, 5, ...: every other
// answer, so that the reader can make progress between them.
func every[T any](f func(T) T) func(int, T) T {
	if f == nil {
		return nil
	}
	return func(n int, out T) T {
		if n%2 == 1 {
			return f(out)
		}
		return out
	}
}

// An open shard is never taken as ended on an odd answer: the reader
// retries (reporting it) and reads every record once, in order, without
// an end page.
func TestReaderOddAnswersOnAnOpenShard(t *testing.T) {
	for _, tt := range oddAnswers {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			e := newRDEnv(t, kinesistest.WithoutLimits())
			want := e.put("r", 6, 0, time.Millisecond)
			odd := &oddClient{Client: e.fake, records: every(tt.records), iterators: every(tt.iterators)}
			e.client.Client = odd
			cfg := e.config(scan.TrimHorizon())
			cfg.limit = 2
			var retries int
			cfg.hooks.onRetry = func(_, _ string, _ int, _ time.Duration, err error) {
				retries++
			}
			pages := startReader(t, cfg).readN(len(want))
			for _, p := range pages {
				if p.end {
					t.Fatalf("an end page on an open shard: %+v", p)
				}
			}
			if diff := cmp.Diff(want, rdData(pages)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if odd.spoilt() == 0 || retries == 0 {
				t.Errorf("%d answers spoiled, %d retries reported; want both", odd.spoilt(), retries)
			}
		})
	}
}

// A closed shard's end without ChildShards (kinesalite never sends them)
// is confirmed with ListShards, and then believed.
func TestReaderConfirmsEndWithListShards(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newRDEnv(t, kinesistest.WithoutLimits())
	want := e.put("r", 3, 0, time.Millisecond)
	e.split()
	odd := &oddClient{Client: e.fake, records: func(_ int, o *kinesis.GetRecordsOutput) *kinesis.GetRecordsOutput {
		if o.NextShardIterator != nil {
			return o
		}
		c := *o
		c.ChildShards = nil
		return &c
	}}
	e.client.Client = odd
	pages, err := startReader(t, e.config(scan.TrimHorizon())).drain()
	if err != nil {
		t.Fatalf("run = %v", err)
	}
	if len(pages) == 0 || !pages[len(pages)-1].end {
		t.Fatalf("no end page: %+v", pages)
	}
	if diff := cmp.Diff(want, rdData(pages)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if n := e.fake.Calls(kinesistest.OpListShards); n != 1 {
		t.Errorf("ListShards calls = %d, want 1 (to confirm the end)", n)
	}
}

// End to end: a Loader whose every other answer is odd keeps its open
// shard ACTIVE and delivers every record put after its start.
func TestLoaderOddAnswersKeepShardOpen(t *testing.T) {
	for _, tt := range oddAnswers {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeStream(t, 1)
			odd := &oddClient{Client: s.f, records: every(tt.records), iterators: every(tt.iterators)}
			testOddAnswersKeepShardOpen(t, odd, func(data string) { s.put(shard0, data) }, s.name)
		})
	}
}

func testOddAnswersKeepShardOpen(t *testing.T, odd *oddClient, put func(string), stream string) {
	t.Helper()
	store := memStore(t, journal.NewMemory())
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: stream, Sink: rec, RecordsPerCall: 1},
		WithClient(odd), WithStore(store), WithHooks(rec, ih), WithResolver(fastResolver(t)), withTune(func(rc *readerConfig) {
			rc.minInterval = time.Millisecond
			rc.readBytesPerSecond = -1
			rc.retry = backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}
		}))
	ih.wait(t)
	want := []string{"a", "b", "c"}
	for _, d := range want {
		put(d)
	}
	rec.waitFor(t, want...)
	if odd.spoilt() == 0 {
		t.Fatal("no answer was spoiled")
	}
	put("d")
	rec.waitFor(t, "d")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	for _, e := range rec.events() {
		if e.kind == "state" && (e.state == StateDraining || e.state == StateCompleted) {
			t.Errorf("the open shard became %v", e.state)
		}
	}
	got := rec.delivered()
	if !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("delivered %q, want a, b, c, d once each", got)
	}
	p, _ := store.Load(context.Background(), stream)
	if st := p[shard0].State; st != StateActive {
		t.Errorf("shard 0 is %v, want ACTIVE", st)
	}
}
