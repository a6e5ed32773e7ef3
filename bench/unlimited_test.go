package bench_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

var (
	consumeRecords = flag.Int("consume.records", 500_000, "records of BenchmarkConsumeKinesalite, over 4 shards")
	consumeSize    = flag.Int("consume.size", 100, "data bytes per record of BenchmarkConsumeKinesalite")
)

// phase is one way of reading a whole stream.
type phase struct {
	name string
	run  func(b *testing.B) time.Duration
}

// measure runs a phase and reports its records/s, its peak Go heap in use
// (runtime.MemStats.HeapInuse sampled every 20 ms) and the process's peak
// RSS (VmHWM, reset before the phase). It returns the records/s.
func measure(b *testing.B, p phase, records int, rates map[string]float64) {
	mp := startMemPeak() // collects garbage first
	took := p.run(b)
	heap, hwm := mp.end()
	rate := float64(records) / took.Seconds()
	rates[p.name] = rate
	b.ReportMetric(rate, p.name+"-records/s")
	b.ReportMetric(heap, p.name+"-peak-heap-MiB")
	if hwm >= 0 {
		b.ReportMetric(hwm, p.name+"-peak-RSS-MiB")
	}
}

// BenchmarkConsumeKinesalite reads a stream of 4 shards holding
// -consume.records records (default 500,000) of -consume.size bytes
// (default 100) on kinesalite,
// which enforces no limits, into a no-op Sink: with a raw GetRecords loop
// (one goroutine per shard, Limit 10000, no pacing, nothing committed),
// with the Loader on a JournalStore over a file journal, and with the
// Loader on a store that keeps nothing durable (memStore); then the raw
// loop again, to see the emulator's drift. Reported per phase: records/s,
// peak Go heap and peak RSS; and the ratios.
func BenchmarkConsumeKinesalite(b *testing.B) {
	em := emulator.Start(b, emulator.Kinesalite)
	kinesistest.NewStream(b, em.Client, "s", 4)
	_, took := load(b, em.Client, "s", *consumeRecords/4, *consumeSize, 2)
	total := (*consumeRecords / 4) * 4
	b.Logf("loaded %d records in %v (%.0f records/s)", total, took, float64(total)/took.Seconds())
	b.ReportMetric(float64(total)/took.Seconds(), "load-records/s")

	loader := func(store func() kinesisload.PositionStore) func(b *testing.B) time.Duration {
		return func(b *testing.B) time.Duration {
			sk := newSink(0, int64(total))
			l := newLoader(b, em.Client, "s", sk, store(), nil, quiet())
			d := runUntil(b, l, sk.done, 10*time.Minute)
			checkOrder(b, sk.tallies(), 4, total/4)
			return d
		}
	}
	raw := func(b *testing.B) time.Duration { return rawLoop(b, em.Client, "s", total/4) }
	phases := []phase{
		{"raw", raw},
		{"loader-journal", loader(func() kinesisload.PositionStore { return fileStore(b) })},
		{"loader-nodurable", loader(func() kinesisload.PositionStore { return newMemStore() })},
		{"raw-again", raw},
	}
	rates := map[string]float64{}
	for b.Loop() {
		for _, p := range phases {
			measure(b, p, total, rates)
		}
	}
	rawRate := (rates["raw"] + rates["raw-again"]) / 2
	b.ReportMetric(rates["loader-journal"]/rawRate, "loader-journal/raw")
	b.ReportMetric(rates["loader-nodurable"]/rawRate, "loader-nodurable/raw")
	b.ReportMetric(1-rates["loader-journal"]/rates["loader-nodurable"], "checkpoint-overhead")
}

// rawLoop reads perShard records from every shard of stream, one goroutine
// per shard, from TRIM_HORIZON with GetRecords Limit 10000 as fast as the
// server answers, and returns how long it took.
func rawLoop(b *testing.B, client scan.Client, stream string, perShard int) time.Duration {
	ids, _ := shardKeys(b, client, stream)
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for _, id := range ids {
		wg.Go(func() {
			it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(id), ShardIteratorType: "TRIM_HORIZON"})
			if err != nil {
				failed.Store(err)
				return
			}
			iter := it.ShardIterator
			for got := 0; got < perShard; {
				out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
				if err != nil {
					failed.Store(fmt.Errorf("shard %s: %w", id, err))
					return
				}
				got += len(out.Records)
				iter = out.NextShardIterator
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkCheckpointOverhead reads 100,000 records of 100 bytes per shard
// from 16 and from 64 shards of the fake without limits into a no-op Sink, with the
// Loader on a JournalStore over a file journal and on a store that keeps
// nothing durable, one after the other, each on a fresh copy of the same
// stream. With 16 shards the Loader's own pacing (5 calls and 2 MiB a
// second per shard, about 20,800 records/s per shard here) is the bound;
// with 64 shards this machine's 2 cores are. Reported: records/s and
// batches (commits) per second of each, and the overhead 1 -
// journal/nodurable.
func BenchmarkCheckpointOverhead(b *testing.B) {
	const perShard = 100_000
	for _, shards := range []int{16, 64} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			total := perShard * shards
			run := func(b *testing.B, store kinesisload.PositionStore) (rate, batches float64) {
				fake := kinesistest.New(kinesistest.WithoutLimits())
				kinesistest.NewStream(b, fake, "s", shards)
				load(b, fake, "s", perShard, 100, 1)
				runtime.GC()
				sk := newSink(0, int64(total))
				l := newLoader(b, fake, "s", sk, store, nil, quiet())
				d := runUntil(b, l, sk.done, 5*time.Minute)
				ts := sk.tallies()
				checkOrder(b, ts, shards, perShard)
				var n int64
				for _, t := range ts {
					n += t.batches
				}
				return float64(total) / d.Seconds(), float64(n) / d.Seconds()
			}
			var j, m, jb, mb float64
			for b.Loop() {
				j, jb = run(b, fileStore(b))
				m, mb = run(b, newMemStore())
			}
			b.ReportMetric(j, "journal-records/s")
			b.ReportMetric(m, "nodurable-records/s")
			b.ReportMetric(jb, "journal-commits/s")
			b.ReportMetric(mb, "nodurable-commits/s")
			b.ReportMetric(1-j/m, "checkpoint-overhead")
		})
	}
}
