package scan_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// A shard whose records all arrived more than maxWindow (400 days) before
// T0 (a retention longer than Kinesis's, as an emulator may keep) is
// resolved after its last record: the backward gallop's window stopped
// growing at 400 days, and it probed T0 less 400 days again and again,
// for ever without a deadline. Found by a review.
func TestAShardWhoseRecordsAreAllOlderThanTheLargestWindowIsResolved(t *testing.T) {
	w := newWorld(t, kinesistest.WithRetention(1000*24*time.Hour))
	kinesistest.NewStream(t, w.fake, "s", 1)
	recs := w.putAt(t, "s", 150, time.Millisecond)
	w.clock.Advance(401 * 24 * time.Hour)
	t0 := w.clock.Now()
	cfg := w.testConfig(scan.StrategyProbe, 0)
	calls := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		if calls++; calls > 5000 {
			cancel()
		}
		w.clock.Advance(d)
		return ctx.Err()
	}
	res, err := newResolver(t, cfg).Resolve(ctx, scan.Request{Client: w.fake, Stream: "s", Shards: []string{shard0}, At: t0})
	if err != nil {
		t.Fatalf("Resolve did not finish after %d paced calls: %v", calls, err)
	}
	if got, want := res[0].Position.String(), after(recs[len(recs)-1].seq); got != want {
		t.Fatalf("resolved %s, want %s", got, want)
	}
}
