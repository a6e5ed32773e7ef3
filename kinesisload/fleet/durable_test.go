package fleet_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// A commit once durable in the host's positions stays where the shard's
// next owner resumes, whatever write of the host fails after it. (Found
// by a review; each case below skipped back to the take-time position.)

const seq42 = "49000000000000000000000000000000000000000000000000000042"

// A Release that fails (the table out for a moment) keeps the shard's
// position, durable in the host's positions, for the host that takes the
// shard after a crash or a Leave. It was dropped from the positions as
// for a release that landed, so the taker resumed at the item's position
// of the take: here TRIM_HORIZON.
func TestAReleaseThatFailsKeepsTheDurablePositionForTheNextOwner(t *testing.T) {
	for _, how := range []string{"crash", "leave"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, fleet.Config{})
			a := w.host("a")
			ids := w.seed(a, 1)
			la := w.acquire(a, ids[0])
			at := scan.AfterSequence(seq42)
			if err := la.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: at}); err != nil {
				t.Fatal(err)
			}
			w.advance(w.cfg.RenewInterval) // durable: in a's positions
			if items := mustQuery(t, w.table, "s#pos#a"); len(items) != 1 || !strings.Contains(items[0].Maps["pos"][ids[0]], seq42) {
				t.Fatalf("a's positions after the round: %+v, want %s at %v", items, ids[0], at)
			}
			a.table.Outage(true)
			if err := la.Release(ctx); err == nil {
				t.Fatal("Release during an outage returned nil")
			}
			a.table.Outage(false)
			w.advance(w.cfg.RenewInterval) // a's next round writes its positions again
			switch how {
			case "crash":
				a.table.Kill()
			case "leave":
				_ = a.m.Leave(ctx)
			}
			b := w.host("b")
			if got := w.acquire(b, ids[0]).Progress().Position; !got.Equal(at) {
				t.Errorf("b resumes %s at %v, want %v, durable in a's positions before the release failed", ids[0], got, at)
			}
		})
	}
}

// A handoff the Loader answers with a Release that fails gives the shard
// up, at the host's next round, at the position durable in its positions:
// it was given up at the item's position of the take, and a planned move,
// which repeats nothing, repeated everything since.
func TestAHandoffWhoseReleaseFailedGivesTheShardUpAtItsPosition(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 2)
	at := scan.AfterSequence(seq42)
	leases := map[string]kinesisload.Lease{}
	for _, id := range ids {
		leases[id] = w.acquire(a, id)
		if err := leases[id].Commit(ctx, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: at}); err != nil {
			t.Fatal(err)
		}
	}
	w.advance(w.cfg.RenewInterval) // durable: in a's positions
	b := w.host("b")
	var asked kinesisload.Lease
	for range 10 {
		if _, err := b.m.Acquire(ctx, ids); err != nil {
			t.Fatal(err)
		}
		w.advance(w.cfg.RenewInterval)
		for _, l := range leases {
			select {
			case <-l.Handoff():
				asked = l
			default:
			}
		}
		if asked != nil {
			break
		}
	}
	if asked == nil {
		t.Fatal("b never asked a for a shard")
	}
	a.table.Outage(true)
	if err := asked.Release(ctx); err == nil {
		t.Fatal("Release during an outage returned nil")
	}
	a.table.Outage(false)
	for range 10 {
		ls, err := b.m.Acquire(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Shard() != asked.Shard() {
				continue
			}
			if got := l.Progress().Position; !got.Equal(at) {
				t.Fatalf("b was granted %s (%v) at %v, want %v", l.Shard(), l.Acquired(), got, at)
			}
			return
		}
		w.advance(w.cfg.RenewInterval)
	}
	t.Fatalf("b never took %s", asked.Shard())
}

