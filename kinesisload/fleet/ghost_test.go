package fleet_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// A host that fenced itself (its beats did not land for a while) and runs
// again finds the table naming it owner of shards it no longer holds. It
// took back only its fair share of them; the others stayed its own, and
// no live host takes a live host's shard. Balancing by count, another
// host asked for one and the owner gave it up. Balancing by throughput,
// the hosts weigh a host by the load it publishes, which counts only the
// leases it holds: they asked the host that held the most (here a, with
// as much as c), and a steal from it would not balance anything. So the
// shard c owned without holding was read by no one for as long as c lived
// (found by the simulation, seed 245011133). A host now takes back every
// shard of its own that its Loader offers, whatever its share.
func TestAFencedHostTakesBackEveryShardStillItsOwn(t *testing.T) {
	for _, by := range []kinesisload.BalanceBy{kinesisload.BalanceByCount, kinesisload.BalanceByThroughput} {
		t.Run(by.String(), func(t *testing.T) {
			w := newWorld(t, fleet.Config{BalanceBy: by, RenewInterval: time.Second})
			ctx := context.Background()
			c := w.host("c")
			ids := w.seed(c, 3)
			a := w.host("a")
			held := map[string]kinesisload.Lease{ids[0]: w.acquire(a, ids[0])}
			w.acquire(c, ids[1])
			w.acquire(c, ids[2])

			// c's beats do not land for long enough that it fences
			// itself, but not so long that the others take it for dead.
			c.table.Outage(true)
			b := w.host("b")
			w.advance(w.cfg.LeaseDuration - 3*w.cfg.RenewInterval)
			c.table.Outage(false)
			for range 40 {
				for _, h := range []*host{a, b, c} {
					ls, err := h.m.Acquire(ctx, ids)
					if err != nil {
						t.Fatal(err)
					}
					for _, l := range ls {
						held[l.Shard()] = l
					}
				}
				for id, l := range held {
					if l.(kinesisload.LeaseChecker).Check() != nil {
						delete(held, id)
					}
				}
				if len(held) == len(ids) {
					return
				}
				w.advance(w.cfg.RenewInterval)
			}
			info, _ := fleet.Inspect(ctx, w.table, "s")
			t.Fatalf("after 40 rounds the shards held are %v of %v (table: %+v): a shard its fenced owner did not take back is read by no one", slices.Sorted(maps.Keys(held)), ids, info.Shards)
		})
	}
}
