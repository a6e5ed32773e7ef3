package bench_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// Issue 11, section 6: big streams, bounded resources.

var (
	hotDuration  = flag.Duration("hot.duration", 20*time.Second, "how long BenchmarkHotShardsMemory runs each Loader")
	idleDuration = flag.Duration("idle.duration", 5*time.Second, "how long BenchmarkIdleStream measures (the issue asks for a minute: -idle.duration=1m)")
)

// BenchmarkLoaderInitScale times a Loader's whole initialisation (from Run
// to OnInitResolved: ListShards, Load, the Resolver on every shard, the
// journaled batch on a file journal) on 1,000 and 20,000 shards of 10
// records of 50 bytes each, 10 ms apart and then a minute of silence (the
// fake's manual clock), every read call 1 ms late, 8 resolver workers.
// The ideal is ceil(shards/8) times one shard resolved alone (mean of 8).
// Before the batch was split into parts, 20,000 shards failed: the batch
// (5 MB) was larger than one journal record (4 MiB).
func BenchmarkLoaderInitScale(b *testing.B) {
	for _, shards := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			const workers, perShard = 8, 10
			clk := kinesistest.NewManualClock(time.Now().Add(-time.Hour))
			fake := kinesistest.New(kinesistest.WithClock(clk), kinesistest.WithoutLimits(), kinesistest.WithShardLimit(shards))
			kinesistest.NewStream(b, fake, "s", shards)
			ids, keys := allShardKeys(b, fake, "s")
			data := make([]byte, 50)
			for range perShard {
				for lo := 0; lo < shards; lo += 500 {
					var batch []types.PutRecordsRequestEntry
					for i := lo; i < min(lo+500, shards); i++ {
						batch = append(batch, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(keys[i])})
					}
					if _, err := fake.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: batch}); err != nil {
						b.Fatal(err)
					}
				}
				clk.Advance(10 * time.Millisecond)
			}
			clk.Advance(time.Minute)
			client := latency{Client: fake, d: time.Millisecond}
			resolver, err := scan.NewResolver(scan.Config{Workers: workers, Now: clk.Now, QueueSize: shards})
			if err != nil {
				b.Fatal(err)
			}
			var one time.Duration
			const samples = 8
			for i := range samples {
				start := time.Now()
				if _, err := resolver.Resolve(context.Background(), scan.Request{Client: client, Stream: "s", Shards: ids[i : i+1]}); err != nil {
					b.Fatal(err)
				}
				one += time.Since(start)
			}
			one /= samples
			ideal := time.Duration(math.Ceil(float64(shards)/workers)) * one

			var init time.Duration
			var resolved int
			for b.Loop() {
				hook := initHook{got: make(chan kinesisload.InitResolved, 1)}
				l := newLoader(b, client, "s", newSink(0, math.MaxInt64), fileStore(b), func(c *kinesisload.Config) {
					c.StartPosition = scan.Latest()
					c.ListShardsInterval = time.Hour
				}, kinesisload.WithResolver(resolver), kinesisload.WithHooks(hook), quiet())
				done := make(chan struct{})
				var ev kinesisload.InitResolved
				go func() { ev = <-hook.got; close(done) }()
				init = runUntil(b, l, done, 10*time.Minute)
				resolved = ev.Resolved
			}
			if resolved != shards {
				b.Fatalf("the Loader resolved %d shards, want %d", resolved, shards)
			}
			b.ReportMetric(float64(one.Microseconds())/1000, "one-shard-ms")
			b.ReportMetric(ideal.Seconds(), "ideal-s")
			b.ReportMetric(init.Seconds(), "loader-init-s")
			b.ReportMetric(init.Seconds()/ideal.Seconds(), "loader-init/ideal")
		})
	}
}

// allShardKeys is shardKeys over every page of ListShards.
func allShardKeys(tb testing.TB, api scan.Client, stream string) (ids, keys []string) {
	tb.Helper()
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := api.ListShards(context.Background(), in)
		if err != nil {
			tb.Fatalf("ListShards %s: %v", stream, err)
		}
		for _, s := range out.Shards {
			ids = append(ids, aws.ToString(s.ShardId))
			keys = append(keys, aws.ToString(s.HashKeyRange.StartingHashKey))
		}
		if out.NextToken == nil {
			return ids, keys
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// hotClient is an endless stream of open, busy shards: every GetRecords
// returns a full page of freshly allocated and written records (as the
// SDK's decoder would), MillisBehindLatest one minute. It holds no data of
// its own, so the process's memory is the Loader's. Other calls go to an
// embedded fake.
type hotClient struct {
	scan.Client
	shards  []types.Shard
	recSize int
	perPage int
	tmpl    []byte
	calls   atomic.Int64
}

func newHotClient(b *testing.B, shards, recSize, perPage int) *hotClient {
	fake := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(b, fake, "s", 1)
	c := &hotClient{Client: fake, recSize: recSize, perPage: perPage, tmpl: make([]byte, recSize)}
	for i := range c.tmpl {
		c.tmpl[i] = byte('a' + i%26)
	}
	for i := range shards {
		c.shards = append(c.shards, types.Shard{
			ShardId:             aws.String(fmt.Sprintf("shardId-%012d", i)),
			HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String("0"), EndingHashKey: aws.String("1")},
			SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String("1")},
		})
	}
	return c
}

func (c *hotClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return &kinesis.ListShardsOutput{Shards: c.shards}, nil
}

func (c *hotClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(aws.ToString(in.ShardId) + "/1")}, nil
}

func (c *hotClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.calls.Add(1)
	shard, n, _ := strings.Cut(aws.ToString(in.ShardIterator), "/")
	next, err := strconv.Atoi(n)
	if err != nil {
		return nil, err
	}
	count := min(c.perPage, int(aws.ToInt32(in.Limit)))
	recs := make([]types.Record, count)
	for i := range recs {
		data := make([]byte, c.recSize)
		copy(data, c.tmpl)
		recs[i] = types.Record{Data: data, PartitionKey: aws.String("k"), SequenceNumber: aws.String(fmt.Sprintf("%056d", next+i))}
	}
	return &kinesis.GetRecordsOutput{Records: recs, MillisBehindLatest: aws.Int64(60000),
		NextShardIterator: aws.String(fmt.Sprintf("%s/%d", shard, next+count))}, nil
}

// BenchmarkHotShardsMemory: 1,000 shards that always have a full 10 MB
// page to read (100 records of 100 KiB), a Sink that takes 2 s per batch,
// the Loader's default bounds, for -hot.duration. The baseline, in the
// same run, is the Loader with the bounds switched off (set far above
// anything reachable) on 25 shards, whose memory per shard multiplied by
// 1,000 is what 1,000 shards would need without bounds (running it on
// 1,000 would take about 20 GB). Reported: peak Go heap in use and peak RSS
// (VmHWM), MiB delivered per second.
func BenchmarkHotShardsMemory(b *testing.B) {
	const recSize, perPage, sinkPause = 100 << 10, 100, 2 * time.Second
	run := func(shards int, bounded bool) (heap, rss, mibs float64) {
		client := newHotClient(b, shards, recSize, perPage)
		sk := newSink(sinkPause, math.MaxInt64)
		l := newLoader(b, client, "s", sk, newMemStore(), func(c *kinesisload.Config) {
			c.ListShardsInterval = time.Hour
			if !bounded {
				c.MaxBufferedBytes = 1 << 50
				c.MaxConcurrentDeliveries = 1 << 30
			}
		}, quiet())
		mp := startMemPeak()
		elapsed := runFor(b, l, *hotDuration)
		heap, rss = mp.end()
		var bytes int64
		for _, t := range sk.tallies() {
			bytes += t.bytes
		}
		return heap, rss, float64(bytes) / (1 << 20) / elapsed.Seconds()
	}
	var bHeap, bRSS, bRate, uHeap, uRSS, uRate float64
	for b.Loop() {
		uHeap, uRSS, uRate = run(25, false)
		bHeap, bRSS, bRate = run(1000, true)
	}
	b.ReportMetric(bHeap, "bounded-1000-peak-heap-MiB")
	b.ReportMetric(bRSS, "bounded-1000-peak-RSS-MiB")
	b.ReportMetric(bRate, "bounded-1000-delivered-MiB/s")
	b.ReportMetric(uHeap/25, "unbounded-heap-MiB-per-shard")
	b.ReportMetric(uRSS/25, "unbounded-RSS-MiB-per-shard")
	b.ReportMetric(uRate, "unbounded-25-delivered-MiB/s")
	b.ReportMetric(uHeap/25*1000, "unbounded-1000-heap-MiB-extrapolated")
	b.ReportMetric(bRSS/512, "bounded-RSS/goal")
}

// runFor runs l for d, closes it and returns how long it ran.
func runFor(tb testing.TB, l *kinesisload.Loader, d time.Duration) time.Duration {
	tb.Helper()
	done := make(chan struct{})
	time.AfterFunc(d, func() { close(done) })
	return runUntil(tb, l, done, d+time.Minute)
}

// BenchmarkConsumeAtLimitBounds is BenchmarkConsumeAtLimit's 16-shard cases
// run twice in the same process: with the Loader's default bounds
// (MaxBufferedBytes 128 MiB, MaxConcurrentDeliveries 64) and with them
// switched off. Reported: each one's steady rate per shard as a fraction
// of 2 MiB/s, bounded over unbounded, and the GetRecords calls the fake
// throttled (ProvisionedThroughputExceeded) in each.
func BenchmarkConsumeAtLimitBounds(b *testing.B) {
	for _, c := range []struct {
		shards   int
		page     int32
		perShard int
		latency  time.Duration
	}{
		{16, 41, 41 * 60, 30 * time.Millisecond},
		{16, 10000, 1023 * 4, 0},
	} {
		b.Run(fmt.Sprintf("shards=%d/page=%d/latency=%v", c.shards, c.page, c.latency), func(b *testing.B) {
			rate := func(bounded bool) (mean, low float64, throttles int64) {
				fake := limitFake(b, c.shards, c.perShard)
				sk := newSink(sinkDelay, int64(c.shards*c.perShard))
				l := newLoader(b, latency{Client: fake, d: c.latency}, "s", sk, fileStore(b), func(cfg *kinesisload.Config) {
					cfg.RecordsPerCall = c.page
					if !bounded {
						cfg.MaxBufferedBytes = 1 << 50
						cfg.MaxConcurrentDeliveries = 1 << 30
					}
				}, quiet())
				runUntil(b, l, sk.done, 5*time.Minute)
				checkOrder(b, sk.tallies(), c.shards, c.perShard)
				mean, low = steady(sk.tallies())
				return mean, low, throttled(b, fake, "s")
			}
			var on, onLow, off, offLow float64
			var onThrottled, offThrottled int64
			for b.Loop() {
				off, offLow, offThrottled = rate(false)
				on, onLow, onThrottled = rate(true)
			}
			b.ReportMetric(on/readBudget, "bounded-of-budget")
			b.ReportMetric(onLow/readBudget, "bounded-lowest-shard-of-budget")
			b.ReportMetric(off/readBudget, "unbounded-of-budget")
			b.ReportMetric(offLow/readBudget, "unbounded-lowest-shard-of-budget")
			b.ReportMetric(on/off, "bounded/unbounded")
			b.ReportMetric(float64(onThrottled), "bounded-throttled")
			b.ReportMetric(float64(offThrottled), "unbounded-throttled")
		})
	}
}

// cpuTime is the process's user plus system CPU time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdleStream: a stream of 1,000 empty shards on the fake (the real
// limits, the real clock) and a Loader with the default configuration, for
// -idle.duration after its initialisation. Measured over that window: the
// process's CPU time as a fraction of one core, its peak RSS and Go heap,
// and the Kinesis calls per second. The baseline, in the same run, is the
// floor of polling: one goroutine per shard that calls GetRecords on the
// same fake once per IdleWait (1 s) and does nothing else, so the fake's
// own cost is in both. The Loader's own CPU is the difference.
func BenchmarkIdleStream(b *testing.B) {
	const shards = 1000
	newFake := func() *countingClient {
		fake := kinesistest.New(kinesistest.WithShardLimit(shards))
		kinesistest.NewStream(b, fake, "s", shards)
		return &countingClient{Client: fake}
	}
	type result struct {
		core, rss, heap, calls float64
	}
	measure := func(body func(ctx context.Context, c *countingClient) (ready <-chan struct{}, wait func())) result {
		c := newFake()
		ctx, cancel := context.WithCancel(context.Background())
		ready, wait := body(ctx, c)
		<-ready
		time.Sleep(2 * time.Second) // past the first polls of every shard
		mp := startMemPeak()
		calls0, cpu0, t0 := c.calls.Load(), cpuTime(b), time.Now()
		time.Sleep(*idleDuration)
		calls1, cpu1, elapsed := c.calls.Load(), cpuTime(b), time.Since(t0)
		heap, rss := mp.end()
		cancel()
		wait()
		return result{core: (cpu1 - cpu0).Seconds() / elapsed.Seconds(), rss: rss, heap: heap, calls: float64(calls1-calls0) / elapsed.Seconds()}
	}
	var floor, loader result
	for b.Loop() {
		floor = measure(func(ctx context.Context, c *countingClient) (<-chan struct{}, func()) {
			ids, _ := allShardKeys(b, c, "s")
			ready := make(chan struct{})
			var started atomic.Int64
			done := make(chan struct{}, len(ids))
			for _, id := range ids {
				go func() {
					defer func() { done <- struct{}{} }()
					out, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("s"), ShardId: aws.String(id), ShardIteratorType: types.ShardIteratorTypeLatest})
					if err != nil {
						return
					}
					if started.Add(1) == int64(len(ids)) {
						close(ready)
					}
					it := out.ShardIterator
					for ctx.Err() == nil {
						res, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it})
						if err == nil {
							it = res.NextShardIterator
						}
						select {
						case <-ctx.Done():
						case <-time.After(kinesisload.DefaultIdleWait):
						}
					}
				}()
			}
			return ready, func() {
				for range ids {
					<-done
				}
			}
		})
		loader = measure(func(ctx context.Context, c *countingClient) (<-chan struct{}, func()) {
			hook := initHook{got: make(chan kinesisload.InitResolved, 1)}
			l := newLoader(b, c, "s", newSink(0, math.MaxInt64), fileStore(b), func(cfg *kinesisload.Config) { cfg.StartPosition = scan.Latest() }, kinesisload.WithHooks(hook), quiet())
			errc := make(chan error, 1)
			go func() { errc <- l.Run(ctx) }()
			ready := make(chan struct{})
			go func() {
				select {
				case <-hook.got:
				case <-ctx.Done():
				}
				close(ready)
			}()
			return ready, func() { <-errc }
		})
	}
	b.ReportMetric(loader.core, "loader-cores")
	b.ReportMetric(floor.core, "floor-cores")
	b.ReportMetric(loader.core-floor.core, "loader-own-cores")
	b.ReportMetric(loader.rss, "loader-peak-RSS-MiB")
	b.ReportMetric(floor.rss, "floor-peak-RSS-MiB")
	b.ReportMetric(loader.heap, "loader-peak-heap-MiB")
	b.ReportMetric(loader.calls, "loader-calls/s")
	b.ReportMetric(floor.calls, "floor-calls/s")
	b.ReportMetric(loader.calls/shards, "loader-calls/s/shard")
}
