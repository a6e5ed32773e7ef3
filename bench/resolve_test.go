package bench_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

var (
	resolveRecords = flag.Int("resolve.records", 200_000, "records in the shard of BenchmarkResolveEmulator")
	resolveTimeout = flag.Duration("resolve.calltimeout", time.Second, "scan.Config.CallTimeout of BenchmarkResolveEmulator on kinesalite")
)

// BenchmarkResolveEmulator resolves LATEST of one shard holding
// -resolve.records records of 100 bytes (default 200,000) on each emulator,
// over real HTTP, with the full scan and with the default (probe) strategy,
// the default retries, and CallTimeout -resolve.calltimeout (default 1 s)
// on kinesalite, whose GetShardIterator AT_TIMESTAMP never answers when no
// record arrived at or after the timestamp, and the default 30 s on
// kinesis-local, whose GetRecords of 10,000 records takes more than a
// second.
// Reported per strategy: Kinesis calls, bytes read, wall time, whether it
// found the tip (1) or failed (0), and the calls that timed out with the
// time they cost (the timeouts and the backoffs after them). Both must find
// the same position when both succeed. The emulators enforce no limits:
// the times are the emulator's speed, not the Kinesis budget.
func BenchmarkResolveEmulator(b *testing.B) {
	for _, kind := range []emulator.Kind{emulator.Kinesalite, emulator.KinesisLocal} {
		b.Run(kind.String(), func(b *testing.B) {
			em := emulator.Start(b, kind)
			kinesistest.NewStream(b, em.Client, "s", 1)
			last, took := load(b, em.Client, "s", *resolveRecords, 100, 2)
			b.Logf("%s: loaded %d records in %v (%.0f records/s)", kind, *resolveRecords, took, float64(*resolveRecords)/took.Seconds())
			b.ReportMetric(float64(*resolveRecords)/took.Seconds(), "load-records/s")
			ids, _ := shardKeys(b, em.Client, "s")
			want := scan.AfterSequence(last[ids[0]]).String()
			// Let a few seconds pass: the tip is not arriving.
			time.Sleep(3 * time.Second)

			results := map[scan.Strategy]resolveRun{}
			for b.Loop() {
				for _, st := range []scan.Strategy{scan.StrategyFullScan, scan.StrategyProbe} {
					timeout := scan.DefaultCallTimeout
					if kind == emulator.Kinesalite {
						timeout = *resolveTimeout
					}
					r := resolveOnce(b, em, ids[0], st, timeout)
					if r.err == nil && r.pos != want {
						b.Fatalf("%s: position %s, want %s", st, r.pos, want)
					}
					results[st] = r
				}
			}
			for _, st := range []scan.Strategy{scan.StrategyFullScan, scan.StrategyProbe} {
				r := results[st]
				name := map[scan.Strategy]string{scan.StrategyFullScan: "full", scan.StrategyProbe: "probe"}[st]
				ok := 1.0
				if r.err != nil {
					ok = 0
					b.Logf("%s: failed after %v: %v", st, r.wall, r.err)
				}
				b.ReportMetric(ok, name+"-ok")
				b.ReportMetric(float64(r.stats.Calls), name+"-calls")
				b.ReportMetric(float64(r.stats.Bytes), name+"-bytes")
				b.ReportMetric(r.wall.Seconds(), name+"-wall-s")
				b.ReportMetric(float64(r.timeouts), name+"-timeouts")
				b.ReportMetric(r.lost.Seconds(), name+"-lost-s")
			}
			if f, p := results[scan.StrategyFullScan], results[scan.StrategyProbe]; f.err == nil && p.err == nil {
				b.ReportMetric(float64(f.stats.Bytes)/float64(p.stats.Bytes), "bytes-ratio")
				b.ReportMetric(f.wall.Seconds()/p.wall.Seconds(), "time-ratio")
			}
		})
	}
}

type resolveRun struct {
	pos      string
	stats    scan.Stats
	wall     time.Duration
	timeouts int
	lost     time.Duration // timed-out attempts and the backoffs after them
	err      error
}

func resolveOnce(b *testing.B, em *emulator.Emulator, shard string, st scan.Strategy, timeout time.Duration) resolveRun {
	var run resolveRun
	var mu sync.Mutex
	var stats scan.Stats
	cfg := scan.Config{
		Strategy:    st,
		CallTimeout: timeout,
		Hooks: scan.Hooks{
			Retry: func(e scan.RetryEvent) {
				mu.Lock()
				defer mu.Unlock()
				b.Logf("%s: retry %s attempt %d after %v: %v", st, e.Op, e.Attempt, e.Backoff, e.Err)
				if errors.Is(e.Err, context.DeadlineExceeded) {
					run.timeouts++
					run.lost += timeout + e.Backoff
				}
			},
			ShardResolved: func(_ string, r scan.ShardResult) {
				mu.Lock()
				stats = r.Stats
				mu.Unlock()
			},
		},
	}
	r, err := scan.NewResolver(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cc := &countingClient{Client: em.Client}
	start := time.Now()
	res, err := r.Resolve(context.Background(), scan.Request{Client: cc, Stream: "s", Shards: []string{shard}})
	run.wall = time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		// A failed batch reports no stats: count what the client saw.
		stats = scan.Stats{Calls: int(cc.calls.Load()), Bytes: cc.bytes.Load()}
		// The last attempt's timeout is not followed by a retry.
		if errors.Is(err, context.DeadlineExceeded) {
			run.timeouts++
			run.lost += timeout
		}
		run.err = fmt.Errorf("%s: %w", st, err)
		run.stats = stats
		return run
	}
	run.pos, run.stats = res[0].Position.String(), res[0].Stats
	return run
}
