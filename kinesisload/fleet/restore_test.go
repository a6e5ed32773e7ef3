package fleet_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

var identS = kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start}

// restoreWorld is a fleet of one host, a, on stream s (identified), with
// shards x and y: a holds x's lease, committed at 42, and both items are
// in the table; the export says x at 40 and y at 7.
func restoreWorld(t *testing.T) (w *world, a *host, lx kinesisload.Lease, export []kinesisload.ShardProgress) {
	t.Helper()
	w = newWorld(t, fleet.Config{})
	a = w.host("a")
	if err := a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		if err := st.SetIdentity(ctx, "s", identS); err != nil {
			return err
		}
		return st.Save(ctx, "s", []kinesisload.ShardProgress{
			{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()},
			{ShardID: "y", State: kinesisload.StateActive, Position: scan.TrimHorizon()},
		})
	}); err != nil {
		t.Fatal(err)
	}
	lx = w.acquire(a, "x")
	if err := lx.Commit(context.Background(), kinesisload.ShardProgress{ShardID: "x", Position: scan.AfterSequence("42")}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval)
	export = []kinesisload.ShardProgress{
		{ShardID: "x", State: kinesisload.StateActive, Position: scan.AfterSequence("40")},
		{ShardID: "y", State: kinesisload.StateActive, Position: scan.AfterSequence("7")},
	}
	return w, a, lx, export
}

// The way back from a shard item deleted by hand (docs/fleet.md): the
// items the table lacks are written again from an export, those present
// are left, and each shard is granted again at the export's position,
// with an epoch above every lease a host committed it under (the test's
// clock is years ahead of the machine's: the hosts' positions, not the
// restoring machine's clock, keep the epochs above).
func TestRestoreMissingWritesAgainOnlyTheItemsDeletedByHand(t *testing.T) {
	w, a, lx, export := restoreWorld(t)
	ctx := context.Background()
	deleteShardByHand(t, w, "x")
	wrote, err := fleet.RestoreMissing(ctx, w.table, "s", identS, export)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(wrote, []string{"x"}) {
		t.Errorf("RestoreMissing wrote %v, want [x]", wrote)
	}
	after, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	if y := after.Shards["y"]; !y.Progress.Position.Equal(scan.TrimHorizon()) {
		t.Errorf("y after the restore: %+v, want it as it was (TRIM_HORIZON)", y)
	}
	x := after.Shards["x"]
	if x.Owner != "" || !x.Progress.Position.Equal(scan.AfterSequence("40")) || x.Epoch <= lx.Epoch() {
		t.Errorf("x after the restore: %+v, want unowned at AFTER_SEQUENCE_NUMBER:40, epoch above %d", x, lx.Epoch())
	}
	w.advance(3*w.cfg.LeaseDuration + w.cfg.RenewInterval) // a reads the table again (ResyncInterval): its lease is gone
	if lx.(kinesisload.LeaseChecker).Check() == nil {
		t.Fatal("a still holds x's lease after its item was written again")
	}
	lx2 := w.acquire(a, "x")
	if p := lx2.Progress().Position; !p.Equal(scan.AfterSequence("40")) || lx2.Epoch() <= lx.Epoch() {
		t.Errorf("x granted at %v, epoch %d; want the export's position, above %d", p, lx2.Epoch(), lx.Epoch())
	}
	again, err := fleet.RestoreMissing(ctx, w.table, "s", identS, export)
	if err != nil || len(again) != 0 {
		t.Errorf("RestoreMissing again = %v, %v; want nothing written", again, err)
	}
}

// An export of another stream incarnation, or one naming none, restores
// nothing into a fleet that has an identity; nor into a fleet that never
// started (Import is for that).
func TestRestoreMissingRefusesAnotherStreamsExport(t *testing.T) {
	w, _, _, export := restoreWorld(t)
	ctx := context.Background()
	deleteShardByHand(t, w, "y")
	other := identS
	other.Created = start.Add(1)
	for _, id := range []kinesisload.StreamIdentity{other, {}} {
		if wrote, err := fleet.RestoreMissing(ctx, w.table, "s", id, export); !errors.Is(err, fleet.ErrNotEmpty) || len(wrote) != 0 {
			t.Errorf("RestoreMissing of an export naming %v = %v, %v; want ErrNotEmpty, nothing written", id, wrote, err)
		}
	}
	wantNoShardItem(t, w, "y", "a refused restore")

	empty := fleet.NewMemoryTable()
	if _, err := fleet.RestoreMissing(ctx, empty, "s", identS, export); err == nil {
		t.Error("RestoreMissing into a table whose fleet never started = nil, want an error")
	}
}
