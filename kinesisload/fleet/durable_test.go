package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
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
			releaseInAnOutage(t, a, la)
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

// releaseInAnOutage releases l while h's table is out: the Release fails.
func releaseInAnOutage(t *testing.T, h *host, l kinesisload.Lease) {
	t.Helper()
	h.table.Outage(true)
	defer h.table.Outage(false)
	if err := l.Release(context.Background()); err == nil {
		t.Fatal("Release during an outage returned nil")
	}
}

// A Release that fails, followed at once by Leave (the Loader closing: it
// releases its leases, then leaves, with no round between), leaves the
// position durable for the next owner: Leave writes the positions the
// failed releases kept. They stayed in memory, and the taker resumed at
// the position of the last round's write (a planned move delivered the
// records since twice). Found by a review of b690bed, whose test had a
// round between.
func TestALeaveRightAfterAReleaseThatFailedWritesThePosition(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 1)
	la := w.acquire(a, ids[0])
	if err := la.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: scan.AfterSequence("10")}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval) // written: 10
	at := scan.AfterSequence(seq42)
	if err := la.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: at}); err != nil {
		t.Fatal(err)
	}
	releaseInAnOutage(t, a, la)
	if err := a.m.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	b := w.host("b")
	if got := w.acquire(b, ids[0]).Progress().Position; !got.Equal(at) {
		t.Errorf("b resumes %s at %v, want %v, committed before a's release failed and it left", ids[0], got, at)
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
	releaseInAnOutage(t, a, asked)
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

// failsChunk makes the next Put of a host's chunk key fail without
// landing, once armed (a throttled write).
type failsChunk struct {
	fleet.Table
	key   string
	armed atomic.Bool
}

func (t *failsChunk) Put(ctx context.Context, it fleet.Item) (fleet.Item, error) {
	if it.Key == t.key && t.armed.CompareAndSwap(true, false) {
		return fleet.Item{}, fmt.Errorf("%w: throttled", fleet.ErrUnknown)
	}
	return t.Table.Put(ctx, it)
}

// chunkedHost makes host a, through fails, hold shards shard-00000 to
// shard-<n-1> (the first skip of them offered at first, the rest once
// they are held), commit a position on every one and write it. It
// returns the holders and the position committed.
func chunkedHost(t *testing.T, w *world, fails *failsChunk, n, skip int) (*holders, scan.Position) {
	t.Helper()
	a := w.hostThrough("a", fails)
	hs := &holders{w: w, hosts: []*host{a}, leases: map[*host]map[string]kinesisload.Lease{a: {}}}
	var all []string
	var ups []kinesisload.ShardProgress
	for i := range n {
		id := fmt.Sprintf("shard-%05d", i)
		all = append(all, id)
		ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	}
	if err := a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", ups)
	}); err != nil {
		t.Fatal(err)
	}
	hs.ids = all[skip:]
	for len(hs.leases[a]) < n-skip {
		hs.round(false)
	}
	hs.round(true)
	committed := scan.AfterSequence(fmt.Sprint(1000 + hs.seq))
	hs.round(false) // written
	hs.ids = all
	return hs, committed
}

// failThenTakeOver fails host a's next write of fails' chunk in its next
// round, kills a, and checks that host b resumes shard at committed.
func failThenTakeOver(t *testing.T, w *world, fails *failsChunk, shard string, committed scan.Position) {
	t.Helper()
	fails.armed.Store(true)
	w.advance(w.cfg.RenewInterval)
	w.hosts["a"].table.Kill()
	b := w.host("b")
	if got := w.acquire(b, shard).Progress().Position; !got.Equal(committed) {
		t.Fatalf("b resumes %s at %v, want %v, durable in a's positions before the round whose write of %s failed", shard, got, committed, fails.key)
	}
}

// A round whose positions fit in fewer chunks than before deletes the
// chunks past them only once the ones before landed: with 1,001 shards in
// two chunks, one released, chunk 0 (re-cut to hold the last shard)
// failed and chunk 1 was deleted all the same, so the last shard's
// position was in no chunk, and a host that died then left it to be read
// again from its take.
func TestAChunkWriteThatFailsDeletesNoLaterChunk(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	fails := &failsChunk{Table: w.table, key: "pos#0"}
	hs, committed := chunkedHost(t, w, fails, 1001, 0)
	a := hs.hosts[0]
	if n := len(mustQuery(t, w.table, "s#pos#a")); n != 2 {
		t.Fatalf("%d chunks, want 2", n)
	}
	last := hs.ids[1000]
	if err := hs.leases[a][hs.ids[0]].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	failThenTakeOver(t, w, fails, last, committed)
}

// A shard taken by a host whose positions fill a chunk moves no other
// shard to another chunk: a new shard whose ID sorted first pushed the
// last of chunk 0 into chunk 1, and when chunk 0 landed and chunk 1
// failed, that shard's position was in neither.
func TestAShardTakenMovesNoOtherShardsPosition(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	fails := &failsChunk{Table: w.table, key: "pos#1"}
	hs, committed := chunkedHost(t, w, fails, 1001, 1)
	a := hs.hosts[0]
	if n := len(mustQuery(t, w.table, "s#pos#a")); n != 1 {
		t.Fatalf("%d chunks, want 1", n)
	}
	for range 5 { // a takes shard-00000, which sorts first
		if _, ok := hs.leases[a][hs.ids[0]]; ok {
			break
		}
		hs.round(false)
	}
	if _, ok := hs.leases[a][hs.ids[0]]; !ok {
		t.Fatalf("a did not take %s", hs.ids[0])
	}
	failThenTakeOver(t, w, fails, hs.ids[1000], committed)
}
