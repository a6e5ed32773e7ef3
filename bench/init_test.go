package bench_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// latency adds a fixed delay to every read call, standing in for the
// network (as scan's BenchmarkThousandShards does).
type latency struct {
	scan.Client
	d time.Duration
}

func (l latency) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	time.Sleep(l.d)
	return l.Client.GetShardIterator(ctx, in, optFns...)
}

func (l latency) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	time.Sleep(l.d)
	return l.Client.GetRecords(ctx, in, optFns...)
}

// initHook signals when the Loader's initialisation is journaled.
type initHook struct {
	got chan kinesisload.InitResolved
}

func (h initHook) OnInitResolved(e kinesisload.InitResolved) {
	select {
	case h.got <- e:
	default:
	}
}

// BenchmarkLoaderInitThousandShards is scan's BenchmarkThousandShards one
// level up: 1,000 shards of 300 records of 50 bytes, 10 ms apart, then a
// minute of silence (the fake's manual clock, which the resolver reads as
// its Now), every call 1 ms late, 8 resolver workers. It times one shard
// alone (mean of 8; the ideal is ceil(1000/8) times that), the Resolver
// alone on all 1,000, and a Loader's whole initialisation from Run to
// OnInitResolved (ListShards, Load, Resolve, one journaled batch of 1,000
// positions on a file journal), with the same Resolver.
func BenchmarkLoaderInitThousandShards(b *testing.B) {
	const shards, workers, perShard = 1000, 8, 300
	clk := kinesistest.NewManualClock(time.Now().Add(-time.Hour))
	fake := kinesistest.New(kinesistest.WithClock(clk), kinesistest.WithoutLimits(), kinesistest.WithShardLimit(shards))
	kinesistest.NewStream(b, fake, "s", shards)
	ids, keys := shardKeys(b, fake, "s")
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
	resolver, err := scan.NewResolver(scan.Config{Workers: workers, Now: clk.Now})
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

	var alone, init time.Duration
	var resolved int
	for b.Loop() {
		start := time.Now()
		res, err := resolver.Resolve(context.Background(), scan.Request{Client: client, Stream: "s", Shards: ids})
		alone = time.Since(start)
		if err != nil || len(res) != shards {
			b.Fatalf("Resolve: %d results, %v", len(res), err)
		}

		hook := initHook{got: make(chan kinesisload.InitResolved, 1)}
		l := newLoader(b, client, "s", newSink(0, math.MaxInt64), fileStore(b), func(c *kinesisload.Config) { c.StartPosition = scan.Latest() },
			kinesisload.WithResolver(resolver), kinesisload.WithHooks(hook), quiet())
		done := make(chan struct{})
		var ev kinesisload.InitResolved
		go func() { ev = <-hook.got; close(done) }()
		init = runUntil(b, l, done, 5*time.Minute)
		resolved = ev.Resolved
	}
	if resolved != shards {
		b.Fatalf("the Loader resolved %d shards, want %d", resolved, shards)
	}
	b.ReportMetric(float64(one.Microseconds())/1000, "one-shard-ms")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric(alone.Seconds(), "resolver-s")
	b.ReportMetric(init.Seconds(), "loader-init-s")
	b.ReportMetric(alone.Seconds()/ideal.Seconds(), "resolver/ideal")
	b.ReportMetric(init.Seconds()/ideal.Seconds(), "loader-init/ideal")
}
