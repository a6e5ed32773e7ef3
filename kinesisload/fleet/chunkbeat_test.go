package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	var wrap func(fleet.Table) fleet.Table
	if len(wrapA) > 0 {
		wrap = wrapA[0]
	}
	return fleetOfThree(t, fleet.Config{}, wrap)
}

// fleetOfThree is hosts a, b and c under cfg holding 30 shards between
// them, balanced; a reads and writes through wrapA's table if not nil.
func fleetOfThree(t *testing.T, cfg fleet.Config, wrapA func(fleet.Table) fleet.Table) *holders {
	t.Helper()
	w := newWorld(t, cfg)
	hs := &holders{w: w, leases: map[*host]map[string]kinesisload.Lease{}}
	for _, id := range []string{"a", "b", "c"} {
		var table fleet.Table = w.table
		if id == "a" && wrapA != nil {
			table = wrapA(table)
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

func TestABusyHostThatCannotReadTheRosterBeatsInTheRosterInstead(t *testing.T) {
	var blind atomic.Bool
	hs := busyFleet(t, func(tb fleet.Table) fleet.Table { return rosterCut{Table: tb, cut: &blind} })
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
	// The old host stops: once its entry is collected (three lease
	// durations), the busy hosts carry their beats on their positions
	// again.
	for range 20 {
		hs.round(true)
	}
	before = counters(t, w)
	for range 5 {
		hs.round(true)
	}
	after = counters(t, w)
	for _, id := range []string{"a", "b", "c"} {
		if before[id] != after[id] {
			t.Errorf("host %s: four lease durations after the earlier version's host stopped, its roster counter moved from %s to %s: want its beats on its positions again", id, before[id], after[id])
		}
	}
}

// An earlier version's host reads only the roster: it takes a host for
// dead once that host's roster counter stood still for LeaseDuration in
// its reads. Its writes may fail (throttled) for a while as its reads go
// on: it fences itself, then takes, once a write lands again, the shards
// of every host whose counter stood still meanwhile. So while such a host
// may come back, a new host must keep its counter moving in the roster.
func TestAHostOfAnEarlierVersionWhoseWritesFailedNeverSeesALiveHostsCounterStandStill(t *testing.T) {
	hs := busyFleet(t)
	w := hs.w
	ctx := context.Background()
	for range 5 {
		hs.round(true)
	}
	old, counter := "", 0
	beatOld := func() {
		counter++
		v := fmt.Sprintf("c=%d v=0", counter)
		if _, err := w.table.SetEntry(ctx, "s", "roster", "beats", "old", old, v); err != nil {
			t.Fatal(err)
		}
		old = v
	}
	// The old host's view of a, by its rule: a's counter and when it
	// last moved in its reads.
	var aCounter string
	var aMovedAt time.Time
	readOld := func() {
		if c := counters(t, w)["a"]; c != aCounter {
			aCounter, aMovedAt = c, w.clock()
		}
	}
	for range 3 {
		beatOld()
		readOld()
		hs.round(true)
	}
	var aLeases []kinesisload.Lease
	for _, l := range hs.leases[hs.hosts[0]] {
		aLeases = append(aLeases, l)
	}
	// The old host's writes fail for two and a half lease durations; its
	// reads go on, every round.
	for range 12 {
		readOld()
		hs.round(true)
	}
	readOld()
	// Its write lands again: a is dead in its view if its counter stood
	// still for a lease duration.
	beatOld()
	if still := w.clock().Sub(aMovedAt); still >= w.cfg.LeaseDuration {
		for _, l := range aLeases {
			if l.Err() == nil {
				t.Fatalf("a's roster counter stood still for %v in the reads of a host of an earlier version (which now takes a's shards), yet a still holds its lease on %s", still, l.Shard())
			}
		}
	}
}

// throughputFleet is busyFleet, balancing by throughput.
func throughputFleet(t *testing.T) *holders {
	t.Helper()
	return fleetOfThree(t, fleet.Config{BalanceBy: kinesisload.BalanceByThroughput}, nil)
}

// A host balancing by throughput publishes its load in its roster entry
// at least once a lease duration, and otherwise carries its beat on its
// positions as a host balancing by count does: a load that stays the
// same must not keep it beating in the roster every round.
func TestABusyHostBalancingByThroughputWithASteadyLoadBeatsInItsPositions(t *testing.T) {
	hs := throughputFleet(t)
	for range 10 {
		hs.round(true)
	}
	const rounds = 50 // ten lease durations
	writes := map[string]int{}
	last := counters(t, hs.w)
	for range rounds {
		hs.round(true)
		now := counters(t, hs.w)
		for id, c := range now {
			if c != last[id] {
				writes[id]++
			}
		}
		last = now
	}
	for _, id := range []string{"a", "b", "c"} {
		if writes[id] > rounds/4 {
			t.Errorf("host %s: its roster entry's counter moved in %d of %d busy rounds with a steady load, want about once a lease duration (%d)", id, writes[id], rounds, rounds/5)
		}
	}
}

// watchLog records when each host last read a's first positions chunk.
type watchLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

type watchRecorder struct {
	fleet.Table
	id  string
	log *watchLog
	w   *world
	// refuse: the roster refuses this host's writes (throttled).
	refuse *atomic.Bool
}

func (r watchRecorder) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	if key == "roster" && r.refuse != nil && r.refuse.Load() {
		return fleet.Item{}, fmt.Errorf("throttled: %w", fleet.ErrUnknown)
	}
	return r.Table.SetEntry(ctx, partition, key, field, entry, old, value)
}

func (r watchRecorder) GetField(ctx context.Context, partition, key, field string) (fleet.Item, error) {
	if partition == "s#pos#a" && key == "pos#0" {
		r.log.mu.Lock()
		r.log.last[r.id] = r.w.clock()
		r.log.mu.Unlock()
	}
	return r.Table.GetField(ctx, partition, key, field)
}

// An operator rewrites a busy host's roster entry without "p=1" (as an
// earlier version wrote it, say). Until the host writes its entry again
// it beats in its positions as before, and its beats there land: no
// other host may take it for dead on its roster counter alone, which
// stood still while it beat in its positions (here its roster writes
// are refused after the edit: it holds its leases until its fence).
func TestAHostWhoseEntryLostP1ByHandIsNotTakenForDeadWhileItsPositionsBeat(t *testing.T) {
	// Enough hosts that each reads another's positions once a lease
	// duration (see watchEvery).
	w := newWorld(t, fleet.Config{})
	log := &watchLog{last: map[string]time.Time{}}
	var refuseA atomic.Bool
	hs := &holders{w: w, leases: map[*host]map[string]kinesisload.Lease{}}
	for i := range 21 {
		id := "a"
		if i > 0 {
			id = fmt.Sprintf("h%02d", i)
		}
		rec := watchRecorder{Table: w.table, id: id, log: log, w: w}
		if id == "a" {
			rec.refuse = &refuseA
		}
		h := w.hostThrough(id, rec)
		if id == "a" {
			t.Cleanup(func() { refuseA.Store(false) }) // before a's Leave
		}
		hs.hosts = append(hs.hosts, h)
		hs.leases[h] = map[string]kinesisload.Lease{}
	}
	hs.ids = w.seed(hs.hosts[0], 42)
	for range 30 {
		hs.round(false)
	}
	// Busy rounds until a host read a's chunk (and saw it move) 6 s
	// ago, a's roster counter standing since: timed from that read, a
	// would be taken for dead two rounds after the edit.
	ctx := context.Background()
	aMoved, aCounter := time.Time{}, ""
	edited := false
	for range 30 {
		hs.round(true)
		now := w.clock()
		if c := counters(t, w)["a"]; c != aCounter {
			aCounter, aMoved = c, now
		}
		log.mu.Lock()
		ready := false
		for _, at := range log.last {
			ready = ready || now.Sub(at) == 6*time.Second && !aMoved.After(at)
		}
		log.mu.Unlock()
		if !ready {
			continue
		}
		it, err := w.table.Get(ctx, "s", "roster")
		if err != nil {
			t.Fatal(err)
		}
		was := it.Maps["beats"]["a"]
		if !strings.Contains(was, " p=1") {
			t.Fatalf("a's entry %q: not beating in its positions", was)
		}
		if _, err := w.table.SetEntry(ctx, "s", "roster", "beats", "a", was, strings.Replace(was, " p=1", "", 1)); err != nil {
			t.Fatal(err)
		}
		// From now on a's roster writes are refused: its fence is due
		// 2/3 of a lease duration after its last beat (in its chunk).
		refuseA.Store(true)
		edited = true
		break
	}
	if !edited {
		t.Fatal("no host read a's positions at the phase wanted")
	}
	aLeases := hs.leases[hs.hosts[0]]
	if len(aLeases) == 0 {
		t.Fatal("a holds nothing")
	}
	held := map[string]kinesisload.Lease{}
	for id, l := range aLeases {
		held[id] = l
	}
	// a's fence is due 2/3 of a lease duration after its last beat: no
	// host may take its shards before (three rounds).
	for r := range 3 {
		hs.round(true)
		for id, l := range held {
			var lost *kinesisload.LeaseLostError
			if err := l.Err(); errors.As(err, &lost) && lost.Why == kinesisload.LostExpired {
				t.Fatalf("round %d after a's entry lost p=1 by hand: a's lease on %s taken by another host before a's fence (%v)", r+1, id, err)
			}
		}
	}
}

// rosterCut fails this host's reads of the roster while cut is set, and
// its writes of the roster too when writes is set (the roster item
// throttled, say); its positions are read and written as ever.
type rosterCut struct {
	fleet.Table
	cut    *atomic.Bool
	writes bool
}

func (r rosterCut) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if key == "roster" && r.cut.Load() {
		return fleet.Item{}, fmt.Errorf("roster unreadable: %w", fleet.ErrUnknown)
	}
	return r.Table.Get(ctx, partition, key)
}

func (r rosterCut) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	if key == "roster" && r.writes && r.cut.Load() {
		return fleet.Item{}, fmt.Errorf("throttled: %w", fleet.ErrUnknown)
	}
	return r.Table.SetEntry(ctx, partition, key, field, entry, old, value)
}

// A host none of whose beats lands fences itself; the others take its
// shards about a lease duration after its last beat. Writes of its
// positions that still land (balancing by throughput, they are written
// once a lease duration however idle) carry no beat.
func TestAHostWhoseBeatsNoLongerLandIsTakenOverThoughItsPositionsAreWritten(t *testing.T) {
	var cut atomic.Bool
	hs := fleetOfThree(t, fleet.Config{BalanceBy: kinesisload.BalanceByThroughput},
		func(tb fleet.Table) fleet.Table { return rosterCut{Table: tb, cut: &cut, writes: true} })
	t.Cleanup(func() { cut.Store(false) }) // before a's Leave (cleanups run last first)
	for range 10 {
		hs.round(true)
	}
	if len(hs.leases[hs.hosts[0]]) == 0 {
		t.Fatal("a holds nothing")
	}
	cut.Store(true)
	for rounds := 1; rounds <= 25; rounds++ { // five lease durations
		hs.round(true)
		if got := hs.held(); got["b"]+got["c"] == 30 {
			return
		}
	}
	t.Fatalf("a's beats landed nowhere for five lease durations (it fenced itself), yet its shards are not taken over: held %v", hs.held())
}
