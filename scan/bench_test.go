package scan_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// BenchmarkMillionRecords resolves one shard holding 1,000,000 records of
// 100 bytes (1,000 s of history at the Kinesis write limit of 1,000
// records/s, then a minute of silence) with each strategy, on the fake with
// the real per-shard limits (5 GetRecords calls and 2 MiB per second) and a
// manual clock that only the retry backoffs advance. Reported per strategy:
// bytes and records read, calls, sim-s (the modelled time: the manual clock's
// advance, that is the backoffs the throttling forced) and limit-s (the time
// the limits imply: max(GetRecords calls / 5, bytes / 2 MiB)); and the
// full/probe ratios. Both strategies must find the same position.
func BenchmarkMillionRecords(b *testing.B) {
	const records = 1_000_000
	w := newWorld(b, kinesistest.WithLimits(kinesistest.DefaultLimits()))
	kinesistest.NewStream(b, w.fake, "s", 1)
	load := time.Now()
	want := putN(b, w.fake, "s", shard0, records, 100, func(i int) {
		if i > 0 && i%100 == 0 {
			w.clock.Advance(100 * time.Millisecond)
		}
	})
	w.clock.Advance(time.Minute)
	b.Logf("loaded %d records in %v", records, time.Since(load))

	run := func(st scan.Strategy) (scan.ShardResult, int64, time.Duration) {
		w.clock.Advance(10 * time.Second) // let the read budget refill
		before, _ := w.fake.Stats("s", shard0)
		cfg := w.testConfig(st, 0)
		start := time.Now()
		res, err := newResolver(b, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
		wall := time.Since(start)
		if err != nil {
			b.Fatalf("%s: %v", st, err)
		}
		if got := res[0].Position.String(); got != after(want) {
			b.Fatalf("%s: position %s, want %s", st, got, after(want))
		}
		after, _ := w.fake.Stats("s", shard0)
		return res[0], after.GetRecordsCalls + after.GetRecordsThrottled - before.GetRecordsCalls - before.GetRecordsThrottled, wall
	}
	limitTime := func(r scan.ShardResult, getRecords int64) float64 {
		return math.Max(float64(getRecords)/5, float64(r.Stats.Bytes)/(2<<20))
	}
	var probe, full scan.ShardResult
	var probeGets, fullGets int64
	var probeWall, fullWall time.Duration
	for b.Loop() {
		probe, probeGets, probeWall = run(scan.StrategyProbe)
		full, fullGets, fullWall = run(scan.StrategyFullScan)
	}
	b.ReportMetric(float64(probe.Stats.Bytes), "probe-bytes")
	b.ReportMetric(float64(full.Stats.Bytes), "full-bytes")
	b.ReportMetric(float64(full.Stats.Bytes)/float64(probe.Stats.Bytes), "bytes-ratio")
	b.ReportMetric(float64(probe.Stats.Records), "probe-records")
	b.ReportMetric(float64(full.Stats.Records), "full-records")
	b.ReportMetric(float64(probe.Stats.Calls), "probe-calls")
	b.ReportMetric(float64(full.Stats.Calls), "full-calls")
	b.ReportMetric(float64(probe.Stats.Retries), "probe-throttled")
	b.ReportMetric(float64(full.Stats.Retries), "full-throttled")
	b.ReportMetric(probe.Stats.Duration.Seconds(), "probe-sim-s")
	b.ReportMetric(full.Stats.Duration.Seconds(), "full-sim-s")
	b.ReportMetric(full.Stats.Duration.Seconds()/probe.Stats.Duration.Seconds(), "sim-ratio")
	b.ReportMetric(limitTime(probe, probeGets), "probe-limit-s")
	b.ReportMetric(limitTime(full, fullGets), "full-limit-s")
	b.ReportMetric(float64(probeWall.Microseconds())/1000, "probe-wall-ms")
	b.ReportMetric(float64(fullWall.Microseconds())/1000, "full-wall-ms")
}

// latency adds a fixed delay to every call, standing in for the network.
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

// BenchmarkThousandShards resolves 1,000 identical shards (300 records, 10
// ms apart, each) with 8 workers and the default strategy, through a client
// that adds 1 ms to every call, and compares the wall time with the ideal:
// ceil(1000/8) times the time of one shard alone.
func BenchmarkThousandShards(b *testing.B) {
	const shards, workers, perShard = 1000, 8, 300
	w := newWorld(b, kinesistest.WithShardLimit(shards))
	kinesistest.NewStream(b, w.fake, "s", shards)
	ids := shardIDs(b, w.fake, "s")
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = hashKeyOf(b, w.fake, "s", id)
	}
	data := make([]byte, 50)
	for range perShard {
		for lo := 0; lo < shards; lo += 500 {
			var batch []types.PutRecordsRequestEntry
			for i := lo; i < min(lo+500, shards); i++ {
				batch = append(batch, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(keys[i])})
			}
			if _, err := w.fake.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: batch}); err != nil {
				b.Fatal(err)
			}
		}
		w.clock.Advance(10 * time.Millisecond)
	}
	w.clock.Advance(time.Minute)
	client := latency{Client: w.fake, d: time.Millisecond}
	cfg := w.testConfig(scan.StrategyProbe, 0)
	cfg.Workers = workers

	// One shard alone, averaged over a few shards.
	var one time.Duration
	var calls int
	const samples = 8
	for i := range samples {
		start := time.Now()
		res, err := newResolver(b, cfg).Resolve(context.Background(), scan.Request{Client: client, Stream: "s", Shards: ids[i : i+1]})
		one += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		calls += res[0].Stats.Calls
	}
	one /= samples
	ideal := time.Duration(math.Ceil(float64(shards)/workers)) * one

	var wall time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := newResolver(b, cfg).Resolve(context.Background(), scan.Request{Client: client, Stream: "s", Shards: ids})
		wall = time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(res) != shards {
			b.Fatalf("%d results", len(res))
		}
	}
	b.ReportMetric(float64(calls)/samples, "calls/shard")
	b.ReportMetric(float64(one.Microseconds())/1000, "one-shard-ms")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(wall.Seconds()/ideal.Seconds(), "wall/ideal")
}

// BenchmarkProbeGrowth resolves shards of 10,000 and 1,000,000 records
// (100 bytes, written at 1,000 records/s) that have been idle for a minute,
// an hour and a day, with the default strategy. The cost follows the
// logarithm of the time since the last record (at most the retention), not
// the number of records.
func BenchmarkProbeGrowth(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		w := newWorld(b)
		kinesistest.NewStream(b, w.fake, "s", 1)
		want := putN(b, w.fake, "s", shard0, n, 100, w.every(time.Millisecond))
		idle := time.Duration(0)
		for _, until := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
			w.clock.Advance(until - idle)
			idle = until
			b.Run(fmt.Sprintf("records=%d/idle=%v", n, until), func(b *testing.B) {
				var last scan.ShardResult
				for b.Loop() {
					res, err := newResolver(b, w.testConfig(scan.StrategyProbe, 0)).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}})
					if err != nil {
						b.Fatal(err)
					}
					if got := res[0].Position.String(); got != after(want) {
						b.Fatalf("position %s, want %s", got, after(want))
					}
					last = res[0]
				}
				b.ReportMetric(float64(last.Stats.Calls), "calls")
				b.ReportMetric(float64(last.Stats.Probes), "probes")
				b.ReportMetric(float64(last.Stats.Bytes), "bytes")
			})
		}
	}
}
