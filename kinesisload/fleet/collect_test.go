package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// failsPositionDeletes fails every Delete in a host's positions partition
// while on is set, nothing deleted (a throttled DeleteItem).
type failsPositionDeletes struct {
	fleet.Table
	on     atomic.Bool
	failed atomic.Int32
	only   []string // the hosts whose positions fail (none: every host's)
	err    error    // what a failed delete returns (nil: an unknown outcome)
}

func (t *failsPositionDeletes) Delete(ctx context.Context, partition, key string, version uint64) error {
	_, host, isPos := strings.Cut(partition, "#pos#")
	if isPos && t.on.Load() && (len(t.only) == 0 || slices.Contains(t.only, host)) {
		t.failed.Add(1)
		if t.err != nil {
			return t.err
		}
		return fmt.Errorf("%w: throttled", fleet.ErrUnknown)
	}
	return t.Table.Delete(ctx, partition, key, version)
}

// startCollecting makes host a, through deletes, and host b, which takes
// a shard, writes its positions and dies; deletes fail from then on.
func startCollecting(t *testing.T, w *world, deletes *failsPositionDeletes) *host {
	t.Helper()
	ctx := context.Background()
	a := w.hostThrough("a", deletes)
	b := w.host("b")
	ids := w.seed(a, 1)
	l := w.acquire(b, ids[0])
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: scan.AfterSequence("42")}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval) // b writes its positions
	if len(mustQuery(t, w.table, "s#pos#b")) == 0 {
		t.Fatal("b wrote no positions")
	}
	b.table.Kill()
	deletes.on.Store(true)
	w.advance(w.cfg.LeaseDuration)
	w.acquire(a, ids[0])               // b's lease expired: a takes the shard over
	w.advance(4 * w.cfg.LeaseDuration) // b, owning nothing, is due for collection
	if deletes.failed.Load() == 0 {
		t.Fatal("a never tried to delete b's positions: the collection did not come")
	}
	return a
}

// A collection refused for good (the role may not DeleteItem) stops the
// host's membership with the error, as every other refused call does: it
// was ignored, and the dead host's entry was tried again every round.
func TestACollectionTheTableRefusesStopsTheMembership(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	deletes := &failsPositionDeletes{Table: w.table, err: errors.New("AccessDeniedException: not authorized to perform dynamodb:DeleteItem")}
	a := startCollecting(t, w, deletes)
	_, err := a.m.Acquire(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "AccessDeniedException") {
		t.Fatalf("Acquire = %v, want the refusal of the collection", err)
	}
}

// A dead host's roster entry is removed only once its positions are: the
// entry is the only thing that names its positions' partition, so a
// collection whose delete of a chunk failed, then removed the entry, left
// the chunk in the table for ever (a host that restarts under a new
// HostID leaves one each time).
func TestADeadHostsEntryIsCollectedOnlyAfterItsPositions(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	deletes := &failsPositionDeletes{Table: w.table}
	startCollecting(t, w, deletes)
	roster, err := w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := roster.Maps["beats"]["b"]; !ok && len(mustQuery(t, w.table, "s#pos#b")) > 0 {
		t.Fatal("b's roster entry was collected while its positions' delete failed: nothing names them any more")
	}
	deletes.on.Store(false)
	w.advance(2 * w.cfg.RenewInterval)
	if left := mustQuery(t, w.table, "s#pos#b"); len(left) > 0 {
		t.Fatalf("b's positions are still in the table after its collection: %d items", len(left))
	}
	roster, err = w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := roster.Maps["beats"]["b"]; ok {
		t.Fatal("b's roster entry is still there after its positions were deleted")
	}
}

// Dead hosts whose positions cannot be deleted (chunks edited by hand, so
// their conditional deletes never hold) do not hold up the collection of
// the others: the four first in order were tried every round, and the
// fifth dead host's entry and positions stayed for ever.
func TestDeadHostsWhosePositionsStayDoNotHoldUpTheCollectionOfOthers(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	stuck := []string{"d1", "d2", "d3", "d4"}
	deletes := &failsPositionDeletes{Table: w.table, only: stuck}
	a := w.hostThrough("a", deletes)
	ids := w.seed(a, 5)
	dead := append(slices.Clone(stuck), "d5")
	for i, id := range dead {
		h := w.host(id)
		l := w.acquire(h, ids[i])
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[i], State: kinesisload.StateActive, Position: scan.AfterSequence("42")}); err != nil {
			t.Fatal(err)
		}
	}
	w.advance(w.cfg.RenewInterval) // every dead-to-be host writes its positions
	for _, id := range dead {
		w.hosts[id].table.Kill()
	}
	deletes.on.Store(true)
	w.advance(w.cfg.LeaseDuration)
	for _, id := range ids {
		w.acquire(a, id)
	}
	w.advance(8 * w.cfg.LeaseDuration)
	if left := mustQuery(t, w.table, "s#pos#d5"); len(left) > 0 {
		t.Fatalf("d5's positions are still in the table: the hosts whose deletes fail hold up its collection")
	}
	roster, err := w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := roster.Maps["beats"]["d5"]; ok {
		t.Fatal("d5's roster entry is still there")
	}
	for _, id := range stuck {
		if _, ok := roster.Maps["beats"][id]; !ok {
			t.Errorf("%s's roster entry was collected while its positions stay", id)
		}
	}
}

// A dead host whose roster entry was made undecodable by hand is collected
// as any host gone long ago: its entry and its positions are removed.
// (The others set such an entry aside and forgot its host, so nothing
// ever collected it: the entry and the chunk stayed for ever, and Inspect
// refused the roster until an operator mended the entry.)
func TestADeadHostWhoseEntryHasATypoIsCollected(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a, b := w.host("a"), w.host("b")
	ids := w.seed(a, 1)
	l := w.acquire(b, ids[0])
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: scan.AfterSequence("42")}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval) // b writes its positions
	b.table.Kill()
	editEntryByHand(t, w, "b", func(string) string { return "c=12x v=3" })
	w.advance(w.cfg.LeaseDuration)
	if lease := w.acquire(a, ids[0]); !lease.Progress().Position.Equal(scan.AfterSequence("42")) {
		t.Errorf("a took %s at %v, want b's committed position 42", ids[0], lease.Progress().Position)
	}
	w.advance(4 * w.cfg.LeaseDuration)
	roster, err := w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := roster.Maps["beats"]["b"]; ok {
		t.Errorf("b's entry %q is still in the roster four lease durations after b died", v)
	}
	if left := mustQuery(t, w.table, "s#pos#b"); len(left) > 0 {
		t.Errorf("b's positions are still in the table: %d items", len(left))
	}
	if _, err := fleet.Inspect(ctx, w.table, "s"); err != nil {
		t.Errorf("Inspect after the collection = %v", err)
	}
}
