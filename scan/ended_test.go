package scan_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// splitShard0 splits shard0 of stream in the middle of its hash range,
// closing it.
func (w *world) splitShard0(t testing.TB, stream string) {
	t.Helper()
	lo, _ := new(big.Int).SetString(hashKeyOf(t, w.fake, stream, shard0), 10)
	mid := new(big.Int).Add(lo, new(big.Int).Lsh(big.NewInt(1), 127))
	if _, err := w.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{
		StreamName: aws.String(stream), ShardToSplit: aws.String(shard0), NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
}

// TestResolveReportsEndedOnlyWhenNothingIsAtOrAfterT0 resolves shards that
// are closed before, at or after T0, or still open, with records before
// and after T0, and checks ShardResult.Ended against the definition: it is
// never set while a record of the shard arrived at or after T0 (the Loader
// completes an Ended shard without reading it), and both strategies prove
// it for every closed shard whose records all arrived before T0 (so that a
// Loader need not read such a shard, nor start its children from
// TRIM_HORIZON).
func TestResolveReportsEndedOnlyWhenNothingIsAtOrAfterT0(t *testing.T) {
	const cases = 120
	for seed := range uint64(cases) {
		rng := rand.New(rand.NewPCG(seed, 0xe4d))
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		w.clock.Advance(time.Duration(rng.IntN(100)) * time.Hour)
		recs := w.putAt(t, "s", rng.IntN(300), []time.Duration{0, time.Millisecond, time.Second, time.Minute}[rng.IntN(4)])
		w.clock.Advance(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
		t0 := w.clock.Now()
		if rng.IntN(3) == 0 && len(recs) > 0 {
			t0 = recs[rng.IntN(len(recs))].at // records of that millisecond are after it
		}
		// Records after T0 (or none), then the shard closes (or not).
		after := 0
		if rng.IntN(2) == 0 {
			w.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			after = 1 + rng.IntN(50)
			recs = append(recs, w.putAt(t, "s", after, time.Millisecond)...)
		}
		closed := rng.IntN(4) != 0
		if closed {
			w.clock.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
			w.splitShard0(t, "s")
		}
		w.clock.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		atOrAfter := 0
		for _, r := range recs {
			if !r.at.Truncate(time.Millisecond).Before(t0.Truncate(time.Millisecond)) {
				atOrAfter++
			}
		}
		for _, st := range strategies {
			cfg := w.testConfig(st, 0)
			cfg.PageLimit = []int32{1, 3, 50, 10000}[rng.IntN(4)]
			cfg.HeadLimit = []int32{1, 4, 100}[rng.IntN(3)]
			desc := fmt.Sprintf("seed %d %s (%d records, %d at or after T0, closed %v, limit %d, head %d)",
				seed, st, len(recs), atOrAfter, closed, cfg.PageLimit, cfg.HeadLimit)
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}, At: t0})
			if err != nil {
				t.Fatalf("%s: %v", desc, err)
			}
			got := res[0]
			if want := wantAt(recs, t0); got.Position.String() != want {
				t.Errorf("%s: resolved %s, want %s", desc, got.Position, want)
			}
			switch {
			case got.Ended && (atOrAfter > 0 || !closed):
				t.Errorf("%s: Ended, but the shard is open or has records at or after T0", desc)
			case !got.Ended && closed && atOrAfter == 0:
				t.Errorf("%s: not Ended, but the shard is closed and every record arrived before T0", desc)
			}
		}
	}
}
