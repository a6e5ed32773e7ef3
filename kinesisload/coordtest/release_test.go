package coordtest_test

import (
	"context"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// TestReleasedLeaseNotTakenBackUntilOfferedAgain: a lease the Loader
// releases (a planned move: Close, a handoff, a shard it will not read) is
// not taken back by the same host's next rounds on the strength of the
// Loader's earlier offer: the shard stays free for another host until the
// Loader offers it again. Taking it back bumped the epoch on every Close
// and kept the shard from the host it was handed to until Leave.
func TestReleasedLeaseNotTakenBackUntilOfferedAgain(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	a := join(t, f, "a")
	if err := a.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "shard-0", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
	}); err != nil {
		t.Fatal(err)
	}
	_, renew := f.Timing()
	var l kinesisload.Lease
	for range 20 {
		f.Advance(renew)
		ls, err := a.Acquire(ctx, []string{"shard-0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			l = ls[0]
			break
		}
	}
	if l == nil {
		t.Fatal("shard-0 never granted")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	f.Advance(5 * renew)
	if got := f.Shards("s")["shard-0"]; got.Owner != "" {
		t.Fatalf("after Release and rounds with no new offer, shard-0 is owned by %q at epoch %d (was %d); want free", got.Owner, got.Epoch, l.Epoch())
	}
	// Offered again, it is taken again.
	var again []kinesisload.Lease
	for range 20 {
		ls, err := a.Acquire(ctx, []string{"shard-0"})
		if err != nil {
			t.Fatal(err)
		}
		if again = ls; len(again) == 1 {
			break
		}
		f.Advance(renew)
	}
	if len(again) != 1 || again[0].Epoch() <= l.Epoch() {
		t.Fatalf("offered again: granted %d leases; want shard-0 at an epoch above %d", len(again), l.Epoch())
	}
}
