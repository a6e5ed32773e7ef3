package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// Items of the table edited by hand, as an operator in a console may (see
// docs/fleet.md, "Items edited by hand"). Deletions by hand are in
// defects_test.go.

// editEntryByHand sets host id's roster entry to what f makes of it ("":
// removes it), as an operator in a console would.
func editEntryByHand(t *testing.T, w *world, id string, f func(string) string) {
	t.Helper()
	roster, err := w.table.Get(context.Background(), "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	was := roster.Maps["beats"][id]
	if _, err := w.table.SetEntry(context.Background(), "s", "roster", "beats", id, was, f(was)); err != nil {
		t.Fatal(err)
	}
}

// A live host's roster entry marked left, or removed, by hand does not let
// another host take the shards it reads at once: they are taken only once
// it must have fenced itself, a lease duration on, as after a crash (it
// never fences itself here: it learns of the edit at its next beat and
// writes its entry again). Before, the other host took the shard at its
// next round, and both read it.
func TestARosterEntryEditedAwayByHandDoesNotFreeALiveHostsShards(t *testing.T) {
	for name, edit := range map[string]func(string) string{
		"marked left": func(v string) string { return v + " left" },
		"removed":     func(string) string { return "" },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, fleet.Config{})
			a, b := w.host("a"), w.host("b")
			ids := w.seed(a, 1)
			la := w.acquire(a, ids[0])
			w.advance(w.cfg.RenewInterval)
			editEntryByHand(t, w, "a", edit)
			// b's rounds come first, a's a moment later.
			w.now.Add(int64(w.cfg.RenewInterval))
			b.c.Round()
			if ls, err := b.m.Acquire(ctx, ids); err != nil {
				t.Fatal(err)
			} else if len(ls) > 0 && la.Err() == nil {
				t.Fatalf("b was granted %s at epoch %d while a, alive, holds it at epoch %d", ids[0], ls[0].Epoch(), la.Epoch())
			}
			w.advance(2 * w.cfg.LeaseDuration)
			if err := la.Err(); err != nil {
				t.Fatalf("a lost its lease after its entry was %s: %v", name, err)
			}
		})
	}
}

// A host whose own roster entry an operator edited by hand, into a form
// its encoding would not write (here a trailing space, as a console may
// leave), keeps beating and keeps its leases: its heartbeat's condition is
// the entry as stored, not as the host would write it. (Every heartbeat
// was refused, and the host fenced itself a lease duration later.)
func TestAHostWhoseRosterEntryWasEditedByHandKeepsBeating(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 1)
	l := w.acquire(a, ids[0])
	roster, err := w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	was := roster.Maps["beats"]["a"]
	if _, err := w.table.SetEntry(ctx, "s", "roster", "beats", "a", was, was+" "); err != nil {
		t.Fatal(err)
	}
	w.advance(2 * w.cfg.LeaseDuration)
	if err := l.Err(); err != nil {
		t.Fatalf("the lease was lost after the entry was edited by hand: %v", err)
	}
	roster, err = w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if now := roster.Maps["beats"]["a"]; now == was+" " {
		t.Fatalf("the entry is still the hand-edited %q: no heartbeat landed since", now)
	}
}

// A shard item whose epoch went back (restored from a backup taken before
// its last takes, or lowered by hand) grants its next lease above every
// lease granted before, once the item is older than its creation's lead:
// it was granted at the restored epoch plus one, which a
// TransactionalSink that stored a later epoch refuses as fenced, one take
// a round, for as long as the epoch took to climb back.
func TestATakeOfAnItemWhoseEpochWentBackIsAboveEveryEarlierLease(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a, b := w.host("a"), w.host("b")
	ids := w.seed(a, 1)
	backup, err := w.table.Get(ctx, "s", "shard#"+ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// The item outlives its creation's lead: its takes' epochs are the
	// clock's floor (within it, a backup restored waits out the lead).
	w.advance(11 * time.Minute)
	la := w.acquire(a, ids[0])
	if err := la.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: scan.AfterSequence("42")}); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The backup restored over the item, its epoch lowered by hand too,
	// at a version above every one the item had.
	stored, err := w.table.Get(ctx, "s", "shard#"+ids[0])
	if err != nil {
		t.Fatal(err)
	}
	restored := backup.Clone()
	restored.Fields["epoch"] = "5"
	restored.Version = stored.Version
	if _, err := w.table.Put(ctx, restored); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval)
	lb := w.acquire(b, ids[0])
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("b's lease is at epoch %d, not above a's %d, granted before the restore", lb.Epoch(), la.Epoch())
	}
}

// A host whose clock runs ahead (by less than the creation lead) takes a
// shard at the floor of its clock; the item deleted by hand and saved
// again by a host whose clock is right starts its epochs above that
// lease, so a TransactionalSink refuses the old owner's late batches and
// not the new owner's. (Found by a review of the take's clock floor: a
// take 5 minutes ahead granted an epoch above the item saved again.)
func TestAnItemSavedAgainStartsAboveTheLeaseOfATakerWhoseClockIsAhead(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	b := w.host("b")
	a := w.host("a", func(c *fleet.Config) { c.Clock = func() time.Time { return w.clock().Add(5 * time.Minute) } })
	ids := w.seed(b, 1)
	la := w.acquire(a, ids[0])
	deleteShardByHand(t, w, ids[0])
	w.advance(time.Minute)
	if err := b.m.Store().Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: ids[0], State: kinesisload.StateActive, Position: scan.TrimHorizon()}}); err != nil {
		t.Fatal(err)
	}
	saved, err := w.table.Get(ctx, "s", "shard#"+ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if e, err := strconv.ParseUint(saved.Field("epoch"), 10, 64); err != nil || e <= la.Epoch() {
		t.Fatalf("the item saved again starts at epoch %q, not above a's lease %d", saved.Field("epoch"), la.Epoch())
	}
}

// A host an item named as owner before it ever had a roster entry (an
// item restored from a backup naming a host long gone) is forgotten once
// no item names it: when a host of that name (a pod's stable name) joins
// much later, takes a shard and has its entry removed by hand, the others
// wait a lease duration from then, not from the time they first noticed
// the name, before they take its shard.
func TestAnOwnerNoticedWithoutAnEntryIsTimedAfreshWhenItJoinsLater(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a, b := w.host("a"), w.host("b")
	ids := w.seed(a, 2)
	it, err := w.table.Get(ctx, "s", "shard#"+ids[1])
	if err != nil {
		t.Fatal(err)
	}
	ghost := it.Clone()
	ghost.Fields["owner"] = "x" // restored from a backup: x is long gone
	if _, err := w.table.Put(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	lb := w.acquire(b, ids[1]) // once x, unknown, counted out
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.advance(10 * w.cfg.LeaseDuration)
	x := w.host("x") // a host of that name, much later
	// x takes the shard in rounds of its own, and its entry is removed by
	// hand, all before b's next round: b never saw x's entry.
	if _, err := x.m.Acquire(ctx, []string{ids[1]}); err != nil {
		t.Fatal(err)
	}
	x.c.Round()
	ls, err := x.m.Acquire(ctx, []string{ids[1]})
	if err != nil || len(ls) != 1 {
		t.Fatalf("x was granted %v (%v), want %s", ls, err, ids[1])
	}
	lx := ls[0]
	editEntryByHand(t, w, "x", func(string) string { return "" })
	if _, err := b.m.Acquire(ctx, []string{ids[1]}); err != nil {
		t.Fatal(err)
	}
	b.c.Round() // b finds x's take (its view was the release's)
	b.c.Round() // still before x's next round
	if ls, err := b.m.Acquire(ctx, []string{ids[1]}); err != nil {
		t.Fatal(err)
	} else if len(ls) > 0 && lx.Err() == nil {
		t.Fatalf("b was granted %s at epoch %d at once while x, alive, holds it at epoch %d", ids[1], ls[0].Epoch(), lx.Epoch())
	}
}

// A roster entry made undecodable by hand (a typo in a console) stops no
// host: the other hosts count its host as absent and warn, the host
// writes over its entry at its next beat, and keeps its lease. (Every
// host that read the roster stopped with ErrBadItem, and started again
// only to stop, until an operator mended the entry.) Tools still refuse
// it: Inspect names the item.
func TestARosterEntryWithATypoStopsNoHost(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a, b := w.host("a"), w.host("b")
	ids := w.seed(a, 1)
	lb := w.acquire(b, ids[0])
	editEntryByHand(t, w, "b", func(string) string { return "c=12x v=3" })
	if _, err := fleet.Inspect(ctx, w.table, "s"); !errors.Is(err, fleet.ErrBadItem) {
		t.Errorf("Inspect of the roster with a typo = %v, want ErrBadItem", err)
	}
	w.advance(2 * w.cfg.LeaseDuration)
	for id, h := range map[string]*host{"a": a, "b": b} {
		if _, err := h.m.Acquire(ctx, nil); err != nil {
			t.Errorf("host %s: Acquire = %v, want the membership to go on", id, err)
		}
	}
	if err := lb.Err(); err != nil {
		t.Errorf("b lost its lease: %v", err)
	}
	roster, err := w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if v := roster.Maps["beats"]["b"]; strings.Contains(v, "12x") {
		t.Errorf("b's entry is still %q: b never wrote over it", v)
	}
	if !strings.Contains(w.logs.String(), "does not decode") {
		t.Error("no host warned about the entry that does not decode")
	}
}

// A dead host's positions with an entry made undecodable by hand stop no
// host that takes its shards: the shard of that entry resumes from its
// item's position (records delivered again, none lost), the others from
// the positions, and the taker warns. (The taker stopped with ErrBadItem,
// and so did every host that tried after it.)
func TestADeadHostsPositionWithATypoStopsNoTaker(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	b := w.host("b")
	ids := w.seed(b, 2)
	for i, id := range ids {
		l := w.acquire(b, id)
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.AfterSequence(fmt.Sprint(100 + i))}); err != nil {
			t.Fatal(err)
		}
	}
	w.advance(w.cfg.RenewInterval) // b writes its positions
	b.table.Kill()
	a := w.host("a")
	chunk, err := w.table.Get(ctx, "s#pos#b", "pos#0")
	if err != nil || !chunk.Exists() {
		t.Fatalf("b's positions: %v", err)
	}
	typo := chunk.Clone()
	typo.Maps["pos"][ids[0]] = "12x 100"
	if _, err := w.table.Put(ctx, typo); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.LeaseDuration)
	got := map[string]kinesisload.Lease{}
	for _, id := range ids {
		got[id] = w.acquire(a, id)
	}
	if _, err := a.m.Acquire(ctx, nil); err != nil {
		t.Fatalf("a stopped: %v", err)
	}
	if p := got[ids[1]].Progress().Position; !p.Equal(scan.AfterSequence("101")) {
		t.Errorf("%s resumes at %v, want b's committed position 101", ids[1], p)
	}
	if p := got[ids[0]].Progress().Position; !p.Equal(scan.TrimHorizon()) {
		t.Errorf("%s resumes at %v, want its item's position (TRIM_HORIZON): its entry does not decode", ids[0], p)
	}
	if n := strings.Count(w.logs.String(), "do not decode"); n != 1 {
		t.Errorf("a warned %d times about the entry that does not decode, want once (it read the positions for each take)", n)
	}
}
