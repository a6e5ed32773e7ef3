package journal

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures durable appends (one 100-byte record per call)
// from 1, 8 and 64 concurrent appenders, and how many fsyncs they cost.
// Results are in BENCHMARKS.md.
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			j, err := Open(b.TempDir(), DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			rec := make([]byte, 100)
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			b.ResetTimer()
			for range appenders {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := j.Append(context.Background(), rec); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			b.ReportMetric(float64(j.fsyncs.Load())/float64(b.N), "fsyncs/append")
		})
	}
}
