package kinesisload

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// benchPage builds one GetRecords page of about 1 MiB of user records of
// size bytes of data: as KPL aggregates of at most 50 KiB (the KPL's
// default AggregationMaxSize), and as plain Kinesis records, one per user
// record. keys is the number of distinct partition keys (0: one per user
// record, the KPL's usual case).
func benchPage(b *testing.B, size, keys int) (agg, plain []types.Record, users int) {
	rng := rand.New(rand.NewPCG(1, 2))
	at := time.UnixMilli(1700000000000)
	var batch []kinesistest.UserRecord
	batchBytes := 0
	flush := func() {
		if len(batch) == 0 {
			return
		}
		e, err := kinesistest.Aggregate(batch)
		if err != nil {
			b.Fatal(err)
		}
		agg = append(agg, types.Record{Data: e.Data, PartitionKey: e.PartitionKey, SequenceNumber: aws.String(fmt.Sprint(len(agg))), ApproximateArrivalTimestamp: &at})
		batch, batchBytes = nil, 0
	}
	for total := 0; total < 1<<20; total += size {
		pk := fmt.Sprintf("%016x", rng.Uint64())
		if keys > 0 {
			pk = fmt.Sprintf("key-%d", users%keys)
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		if batchBytes+size+len(pk)+8 > 50<<10 {
			flush()
		}
		batch = append(batch, kinesistest.UserRecord{PartitionKey: pk, Data: data})
		batchBytes += size + len(pk) + 8
		plain = append(plain, types.Record{Data: data, PartitionKey: aws.String(pk), SequenceNumber: aws.String(fmt.Sprint(users)), ApproximateArrivalTimestamp: &at})
		users++
	}
	flush()
	return agg, plain, users
}

// BenchmarkDecodePage: turning one page into a Batch's records, for the
// same user records read aggregated (KPL, with and without the hash range
// check) and unaggregated. MB/s is of the page's Kinesis record data
// (aggregated payload for kpl); allocs/user-record counts every
// allocation, the Record slice included.
func BenchmarkDecodePage(b *testing.B) {
	for _, c := range []struct {
		size, keys int
	}{{100, 0}, {100, 5}, {1000, 0}} {
		agg, plain, users := benchPage(b, c.size, c.keys)
		name := fmt.Sprintf("user=%dB/keys=", c.size)
		if c.keys == 0 {
			name += "unique"
		} else {
			name += fmt.Sprint(c.keys)
		}
		full := allHashKeys
		for _, m := range []struct {
			name string
			recs []types.Record
			dec  Decoder
		}{
			{"plain", plain, &kplDecoder{keys: full}},
			{"kpl", agg, &kplDecoder{keys: full, outside: func(Record, int, Record, hashKey, bool) {}}},
			{"kpl-no-range-check", agg, &kplDecoder{}},
		} {
			b.Run(name+"/"+m.name, func(b *testing.B) {
				d := pageDecoder{dec: m.dec}
				var bytes int64
				for _, r := range m.recs {
					bytes += int64(len(r.Data))
				}
				b.SetBytes(bytes)
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					out, _ := d.decode(m.recs)
					if len(out) != users {
						b.Fatalf("%d records, want %d", len(out), users)
					}
				}
				b.StopTimer()
				cpu := cpuTime() - cpu0
				runtime.ReadMemStats(&ms1)
				// Throughput per CPU-second of this process (GC included):
				// per core, whatever else the machine runs.
				b.ReportMetric(float64(bytes)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N)/float64(users), "allocs/user-record")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(users), "ns/user-record")
			})
		}
	}
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
