package scan_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// TestProbeMatchesFullScan builds random shards (sizes, gaps, shared
// timestamps, idle tails, expiry, closed shards) and random settings (page
// limits, resolution, first window, clock skew, empty pages, a
// MillisBehindLatest of 0 reported too early) and checks that the default
// strategy persists exactly the positions of the full scan, and that both
// are the shard's true tip.
func TestProbeMatchesFullScan(t *testing.T) {
	const cases = 150
	gaps := []time.Duration{0, time.Millisecond, 7 * time.Millisecond, 250 * time.Millisecond, 3 * time.Second, 5 * time.Minute, 9 * time.Hour}
	for seed := range uint64(cases) {
		rng := rand.New(rand.NewPCG(seed, 0x7469_6465))
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		w.clock.Advance(time.Duration(rng.IntN(1000)) * time.Hour)

		// A few runs of records, each with its own spacing.
		var last string
		var lastAt time.Time
		for range rng.IntN(5) {
			gap := gaps[rng.IntN(len(gaps))]
			w.clock.Advance(gaps[rng.IntN(len(gaps))])
			if s := putN(t, w.fake, "s", shard0, rng.IntN(300), 1+rng.IntN(40), w.every(gap)); s != "" {
				last, lastAt = s, w.clock.Now()
			}
		}
		closed := rng.IntN(5) == 0
		if closed {
			split(t, w.fake, "s", shard0)
		}
		w.clock.Advance(gaps[rng.IntN(len(gaps))])
		if rng.IntN(8) == 0 && !closed {
			// May expire every record. (A closed shard would then be
			// gone from the stream.)
			w.clock.Advance(time.Duration(rng.IntN(10*24)) * time.Hour)
		}
		want := trimHorizon
		if last != "" && w.clock.Now().Sub(lastAt) < 7*24*time.Hour {
			want = after(last)
		}

		skews := []time.Duration{0, 0, -time.Second, 40 * time.Millisecond, time.Hour, -3 * time.Hour}
		cfg := w.testConfig(scan.StrategyProbe, skews[rng.IntN(len(skews))])
		cfg.PageLimit = []int32{1, 2, 3, 7, 50, 10000}[rng.IntN(6)]
		cfg.Resolution = []time.Duration{time.Millisecond, 5 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Hour}[rng.IntN(5)]
		cfg.HeadLimit = []int32{1, 4, 100}[rng.IntN(3)]
		cfg.InitialWindow = []time.Duration{time.Millisecond, time.Second, time.Minute}[rng.IntN(3)]
		c := &recorder{Client: w.fake, zeroBehind: rng.IntN(4) == 0}
		if rng.IntN(3) == 0 {
			c.emptyEvery = 2 + rng.IntN(3)
		}
		desc := fmt.Sprintf("seed %d (closed %v, limit %d, head %d, resolution %v, window %v, empty every %d, zero behind %v)",
			seed, closed, cfg.PageLimit, cfg.HeadLimit, cfg.Resolution, cfg.InitialWindow, c.emptyEvery, c.zeroBehind)

		got := map[scan.Strategy]string{}
		for _, st := range strategies {
			cfg.Strategy = st
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: c, Stream: "s", Shards: []string{shard0}})
			if err != nil {
				t.Fatalf("%s: %s: %v", desc, st, err)
			}
			got[st] = res[0].Position.String()
		}
		if got[scan.StrategyProbe] != got[scan.StrategyFullScan] {
			t.Errorf("%s: probe %s, full scan %s", desc, got[scan.StrategyProbe], got[scan.StrategyFullScan])
		}
		if got[scan.StrategyFullScan] != want {
			t.Errorf("%s: full scan %s, want %s", desc, got[scan.StrategyFullScan], want)
		}
	}
}
