package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// A busy host carries its heartbeat on its first positions chunk: these
// tests check that it keeps its leases so, that the others still see it
// die, that it still fences itself when its beat cannot be settled, and
// that a host of an earlier version (which reads only the roster) makes
// every host beat in the roster again.

// busyFleet is three hosts holding 30 shards between them, balanced;
// host a reads and writes through wrapA's table when one is given.
func busyFleet(t *testing.T, wrapA ...func(fleet.Table) fleet.Table) *holders {
	t.Helper()
	w := newWorld(t, fleet.Config{})
	hs := &holders{w: w, leases: map[*host]map[string]kinesisload.Lease{}}
	for _, id := range []string{"a", "b", "c"} {
		var table fleet.Table = w.table
		if id == "a" && len(wrapA) > 0 {
			table = wrapA[0](table)
		}
		h := w.hostThrough(id, table)
		hs.hosts = append(hs.hosts, h)
		hs.leases[h] = map[string]kinesisload.Lease{}
	}
	hs.ids = w.seed(hs.hosts[0], 30)
	for range 30 {
		hs.round(false)
	}
	return hs
}

// counters returns every host's roster counter ("c=N") as stored.
func counters(t *testing.T, w *world) map[string]string {
	t.Helper()
	it, err := w.table.Get(context.Background(), "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for id, v := range it.Maps["beats"] {
		if f := strings.Fields(v); len(f) > 0 {
			out[id] = f[0]
		}
	}
	return out
}

// held returns the shards each host holds a live lease on.
func (hs *holders) held() map[string]int {
	out := map[string]int{}
	for id, h := range hs.w.hosts {
		for _, l := range hs.leases[h] {
			if l.Err() == nil {
				out[id]++
			}
		}
	}
	return out
}

func TestABusyHostBeatingInItsPositionsKeepsItsLeases(t *testing.T) {
	hs := busyFleet(t)
	hs.round(true) // the first commits: written at the next round
	before, owned := counters(t, hs.w), hs.held()
	if owned["a"]+owned["b"]+owned["c"] != 30 {
		t.Fatalf("balanced: %v, want 30 shards held", owned)
	}
	// Twenty lease durations of commits in every round.
	for range 100 {
		hs.round(true)
	}
	after := counters(t, hs.w)
	for _, id := range []string{"a", "b", "c"} {
		if before[id] != after[id] {
			t.Errorf("host %s: roster counter %s, then %s: its beats were written in the roster, not carried by its positions", id, before[id], after[id])
		}
	}
	if got := hs.held(); fmt.Sprint(got) != fmt.Sprint(owned) {
		t.Errorf("after 20 lease durations beating in their positions, the hosts hold %v, want %v as before (a live host taken for dead?)", got, owned)
	}
}

func TestABusyHostThatDiesIsTakenOverAboutALeaseDurationLater(t *testing.T) {
	hs := busyFleet(t)
	for range 10 {
		hs.round(true)
	}
	c := hs.hosts[2]
	lost := len(hs.leases[c])
	if lost == 0 {
		t.Fatal("host c holds nothing")
	}
	c.table.Pause() // c stops: no round, no write
	hs.hosts = hs.hosts[:2]
	delete(hs.leases, c)
	cfg := hs.w.cfg
	for rounds := 1; ; rounds++ {
		hs.round(true)
		got := hs.held()
		if got["a"]+got["b"] == 30 {
			took := time.Duration(rounds) * cfg.RenewInterval
			// The others read c's counter every watchEvery (a round
			// here), and again as soon as it may be gone: a lease
			// duration after the read that last saw it move.
			if most := cfg.LeaseDuration + 2*cfg.RenewInterval; took > most {
				t.Errorf("c's %d shards taken over %v after it stopped, want within %v", lost, took, most)
			}
			return
		}
		if rounds > 30 {
			t.Fatalf("c's shards not taken over in %d rounds: held %v", rounds, got)
		}
	}
}

// rosterBlind fails every read of the roster while blind is set.
type rosterBlind struct {
	fleet.Table
	blind *atomic.Bool
}

func (r rosterBlind) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if key == "roster" && r.blind.Load() {
		return fleet.Item{}, fmt.Errorf("roster unreadable: %w", fleet.ErrUnknown)
	}
	return r.Table.Get(ctx, partition, key)
}

func TestABusyHostThatCannotReadTheRosterBeatsInTheRosterInstead(t *testing.T) {
	var blind atomic.Bool
	hs := busyFleet(t, func(tb fleet.Table) fleet.Table { return rosterBlind{tb, &blind} })
	for range 5 {
		hs.round(true)
	}
	var held []kinesisload.Lease
	for _, l := range hs.leases[hs.hosts[0]] {
		held = append(held, l)
	}
	before := counters(t, hs.w)
	blind.Store(true) // a's positions land; its reads of the roster fail
	for range 15 {    // three lease durations
		hs.round(true)
	}
	for _, l := range held {
		if err := l.Err(); err != nil {
			t.Errorf("a's roster reads failing for three lease durations, its lease on %s was lost: %v", l.Shard(), err)
		}
	}
	var b, a int
	fmt.Sscanf(before["a"], "c=%d", &b)
	fmt.Sscanf(counters(t, hs.w)["a"], "c=%d", &a)
	if a-b < 15 {
		t.Errorf("a's roster counter moved %d in 15 rounds whose roster reads failed, want a beat in the roster every round (its answer is the roster)", a-b)
	}
}

func TestABusyHostWritesAgainItsEntryMarkedLeftByHand(t *testing.T) {
	hs := busyFleet(t)
	for range 5 {
		hs.round(true)
	}
	owned := hs.held()
	ctx := context.Background()
	it, err := hs.w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	was := it.Maps["beats"]["a"]
	if _, err := hs.w.table.SetEntry(ctx, "s", "roster", "beats", "a", was, was+" left"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		hs.round(true)
	}
	it, err = hs.w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if now := it.Maps["beats"]["a"]; strings.Contains(now, "left") || now == was {
		t.Errorf("a busy host's entry marked left by hand (%q) is %q three rounds later, want it written again, not left", was+" left", now)
	}
	for range 15 {
		hs.round(true)
	}
	if got := hs.held(); fmt.Sprint(got) != fmt.Sprint(owned) {
		t.Errorf("after a's entry was marked left by hand, the hosts hold %v, want %v as before", got, owned)
	}
}

func TestAHostOfAnEarlierVersionMakesBusyHostsBeatInTheRoster(t *testing.T) {
	hs := busyFleet(t)
	w := hs.w
	ctx := context.Background()
	// A host of an earlier version joins: its entry has no "p=1".
	old, counter := "", 0
	beatOld := func() {
		counter++
		v := fmt.Sprintf("c=%d v=0", counter)
		if _, err := w.table.SetEntry(ctx, "s", "roster", "beats", "old", old, v); err != nil {
			t.Fatal(err)
		}
		old = v
	}
	beatOld()
	hs.round(true) // every host reads the roster
	before := counters(t, w)
	for range 10 {
		beatOld()
		hs.round(true)
	}
	after := counters(t, w)
	for _, id := range []string{"a", "b", "c"} {
		var b, a int
		fmt.Sscanf(before[id], "c=%d", &b)
		fmt.Sscanf(after[id], "c=%d", &a)
		if a-b < 10 {
			t.Errorf("host %s: roster counter from %s to %s in 10 rounds beside a host of an earlier version, want a beat in the roster every round", id, before[id], after[id])
		}
	}
	// The old host stops: once it counts as gone, the busy hosts carry
	// their beats on their positions again.
	for range 10 {
		hs.round(true)
	}
	before = counters(t, w)
	for range 5 {
		hs.round(true)
	}
	after = counters(t, w)
	for _, id := range []string{"a", "b", "c"} {
		if before[id] != after[id] {
			t.Errorf("host %s: two lease durations after the earlier version's host stopped, its roster counter moved from %s to %s: want its beats on its positions again", id, before[id], after[id])
		}
	}
}
