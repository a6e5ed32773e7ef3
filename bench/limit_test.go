package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

const (
	// limitRecordSize is the data size of the records of the at-the-limit
	// benchmarks: 10 KiB (plus the 1-byte partition key).
	limitRecordSize = 10 << 10
	// readBudget is the fake's (and Kinesis's) read limit per shard.
	readBudget = 2 << 20
	// sinkDelay is how long the Sink of the at-the-limit benchmarks takes
	// per batch.
	sinkDelay = 100 * time.Millisecond
)

// limitFake returns a fake that enforces the real per-shard read limits
// (5 GetRecords calls/s, 2 MiB/s) on the real clock, with the write limits
// off so that the backlog can be written at once, and a stream of shards
// shards holding perShard records of 10 KiB each.
func limitFake(b *testing.B, shards, perShard int) *kinesistest.Fake {
	l := kinesistest.DefaultLimits()
	l.WriteBytesPerSecond, l.WriteRecordsPerSecond = 0, 0
	fake := kinesistest.New(kinesistest.WithLimits(l), kinesistest.WithShardLimit(1000))
	kinesistest.NewStream(b, fake, "s", shards)
	load(b, fake, "s", perShard, limitRecordSize, 1)
	return fake
}

// BenchmarkConsumeAtLimit reads a backlog of 10 KiB records from 1 and 16
// shards of the fake with the real read limits, into a Sink that takes 100
// ms per batch, with the Loader and with a naive sequential loop (below),
// each on a fresh copy of the stream. Reported: each one's steady rate per
// shard in MiB/s and as a fraction of the 2 MiB/s budget, and the Loader's
// rate over the naive loop's. Two page sizes: page=41 records (420 KB, a
// little over a fifth of the budget, so five calls a second spend it) and
// the default page=10000 (capped at 10 MiB by Kinesis: one call spends five
// seconds of budget). With latency=30ms every GetShardIterator and
// GetRecords call of both is 30 ms late, as over a network; the fake alone
// answers in microseconds.
func BenchmarkConsumeAtLimit(b *testing.B) {
	for _, c := range []struct {
		shards   int
		page     int32
		perShard int
		latency  time.Duration
	}{
		{1, 41, 41 * 60, 0},                      // about 24 MiB: 12 s at 2 MiB/s
		{16, 41, 41 * 60, 0},                     //
		{1, 10000, 1023 * 4, 0},                  // four 10 MiB pages: 15 s at 2 MiB/s
		{16, 10000, 1023 * 4, 0},                 //
		{1, 41, 41 * 60, 30 * time.Millisecond},  // a network round trip
		{16, 41, 41 * 60, 30 * time.Millisecond}, //
	} {
		b.Run(fmt.Sprintf("shards=%d/page=%d/latency=%v", c.shards, c.page, c.latency), func(b *testing.B) {
			var naive, loader, naiveLow, loaderLow float64
			var naiveThrottled, loaderThrottled int64
			for b.Loop() {
				fake := limitFake(b, c.shards, c.perShard)
				ts, _ := naiveLoop(b, latency{Client: fake, d: c.latency}, "s", c.page, c.shards*c.perShard)
				naive, naiveLow = steady(ts)
				naiveThrottled = throttled(b, fake, "s")

				fake = limitFake(b, c.shards, c.perShard)
				sk := newSink(sinkDelay, int64(c.shards*c.perShard))
				l := newLoader(b, latency{Client: fake, d: c.latency}, "s", sk, fileStore(b), func(cfg *kinesisload.Config) { cfg.RecordsPerCall = c.page }, quiet())
				runUntil(b, l, sk.done, 5*time.Minute)
				checkOrder(b, sk.tallies(), c.shards, c.perShard)
				loader, loaderLow = steady(sk.tallies())
				loaderThrottled = throttled(b, fake, "s")
			}
			b.ReportMetric(loader/(1<<20), "loader-MiB/s/shard")
			b.ReportMetric(loader/readBudget, "loader-of-budget")
			b.ReportMetric(loaderLow/readBudget, "loader-lowest-shard-of-budget")
			b.ReportMetric(naive/(1<<20), "naive-MiB/s/shard")
			b.ReportMetric(naive/readBudget, "naive-of-budget")
			b.ReportMetric(naiveLow/readBudget, "naive-lowest-shard-of-budget")
			b.ReportMetric(loader/naive, "loader/naive")
			b.ReportMetric(float64(loaderThrottled), "loader-throttled")
			b.ReportMetric(float64(naiveThrottled), "naive-throttled")
		})
	}
}

// throttled sums the GetRecords calls the fake refused, over every shard.
func throttled(b *testing.B, fake *kinesistest.Fake, stream string) int64 {
	ids, _ := shardKeys(b, fake, stream)
	var n int64
	for _, id := range ids {
		st, err := fake.Stats(stream, id)
		if err != nil {
			b.Fatal(err)
		}
		n += st.GetRecordsThrottled
	}
	return n
}

// checkOrder fails b unless every shard delivered perShard records, in
// order, each once.
func checkOrder(b *testing.B, ts map[string]tally, shards, perShard int) {
	b.Helper()
	if len(ts) != shards {
		b.Fatalf("%d shards delivered, want %d", len(ts), shards)
	}
	for id, t := range ts {
		if t.records != int64(perShard) || t.outOfOrderOrRepeats != 0 {
			b.Fatalf("shard %s: %d records (%d out of order or repeated), want %d", id, t.records, t.outOfOrderOrRepeats, perShard)
		}
	}
}

// naiveLoop is the baseline: one goroutine per shard that gets a page,
// delivers it (the same 100 ms), commits its checkpoint to a JournalStore
// on a file journal, waits 200 ms (five calls a second) and goes on; when
// throttled it waits a second and tries again. It returns what it
// delivered per shard, and how long it took.
func naiveLoop(b *testing.B, client scan.Client, stream string, page int32, want int) (map[string]tally, time.Duration) {
	ids, _ := shardKeys(b, client, stream)
	store := fileStore(b)
	sk := newSink(0, int64(want))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	start := time.Now()
	for _, id := range ids {
		wg.Go(func() {
			it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(id), ShardIteratorType: "TRIM_HORIZON"})
			if err != nil {
				errs <- err
				return
			}
			iter := it.ShardIterator
			for iter != nil {
				out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(page)})
				if kerr.IsThrottled(err) {
					time.Sleep(time.Second)
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("shard %s: %w", id, err)
					return
				}
				if n := len(out.Records); n > 0 {
					time.Sleep(sinkDelay) // deliver
					recs := make([]kinesisload.Record, n)
					var bytes int64
					for i, r := range out.Records {
						recs[i] = kinesisload.Record{Data: r.Data, PartitionKey: aws.ToString(r.PartitionKey), SequenceNumber: aws.ToString(r.SequenceNumber)}
						bytes += int64(len(r.Data) + len(aws.ToString(r.PartitionKey)))
					}
					sk.add(id, recs, bytes)
					// commit
					pos := scan.AfterSequence(recs[n-1].SequenceNumber)
					if err := store.Save(ctx, stream, []kinesisload.ShardProgress{{ShardID: id, Position: pos}}); err != nil {
						errs <- err
						return
					}
				}
				if aws.ToInt64(out.MillisBehindLatest) == 0 && len(out.Records) < int(page) {
					return // caught up
				}
				iter = out.NextShardIterator
				time.Sleep(200 * time.Millisecond) // wait
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	ts := sk.tallies()
	checkOrder(b, ts, len(ids), want/len(ids))
	return ts, elapsed
}
