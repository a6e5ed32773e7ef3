package fleet_test

import (
	"context"
	"fmt"
	"github.com/tidemark/tidemark/scan"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// afterBeat calls hook (once armed) at the first call of the table that
// follows a write of the roster: between a round's beat and the rest of
// the round (its watch, its positions, its balance).
type afterBeat struct {
	fleet.Table
	mu    sync.Mutex
	armed bool
	beat  bool
	hook  func()
}

func (a *afterBeat) fire() {
	a.mu.Lock()
	h := a.hook
	fire := a.armed && a.beat
	if fire {
		a.armed = false
	}
	a.mu.Unlock()
	if fire && h != nil {
		h()
	}
}

func (a *afterBeat) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	it, err := a.Table.SetEntry(ctx, partition, key, field, entry, old, value)
	a.mu.Lock()
	if key == "roster" && err == nil {
		a.beat = true
	}
	a.mu.Unlock()
	return it, err
}

func (a *afterBeat) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	a.fire()
	return a.Table.Get(ctx, partition, key)
}

func (a *afterBeat) GetField(ctx context.Context, partition, key, field string) (fleet.Item, error) {
	a.fire()
	return a.Table.GetField(ctx, partition, key, field)
}

func (a *afterBeat) Query(ctx context.Context, partition string) ([]fleet.Item, error) {
	a.fire()
	return a.Table.Query(ctx, partition)
}

func (a *afterBeat) Put(ctx context.Context, it fleet.Item) (fleet.Item, error) {
	a.fire()
	return a.Table.Put(ctx, it)
}

// A host whose next round comes only after its fence passed (its rounds
// delayed: a slow round before, a process paused) and after the others
// took its shards must not find its leases valid again when that round's
// beat lands: the beat counts from its own start, after the fence, and
// the leases it held across the gap were another host's meanwhile.
func TestAHostWhoseRoundCameAfterItsFenceDoesNotHoldTheLeasesOthersTook(t *testing.T) {
	var ab *afterBeat
	hs := busyFleet(t, func(tb fleet.Table) fleet.Table { ab = &afterBeat{Table: tb}; return ab })
	for range 5 {
		hs.round(true)
	}
	a := hs.hosts[0]
	var aLeases []kinesisload.Lease
	for _, l := range hs.leases[a] {
		aLeases = append(aLeases, l)
	}
	if len(aLeases) == 0 {
		t.Fatal("a holds nothing")
	}
	// a's rounds stop (nothing of a runs: no round, no Check).
	a.table.Pause()
	hs.hosts = hs.hosts[1:]
	delete(hs.leases, a)
	for rounds := 0; ; rounds++ {
		hs.round(true)
		if got := hs.held(); got["b"]+got["c"] == 30 {
			break
		}
		if rounds > 30 {
			t.Fatalf("a's shards not taken over: %v", hs.held())
		}
	}
	// a's next round: its beat lands; between it and the balance that
	// reads the shard items, a's Loader checks its leases.
	valid := armLeaseCheck(hs, ab, aLeases)
	a.table.Resume()
	a.c.Round()
	if len(*valid) > 0 {
		t.Errorf("after its fence passed and the others took its shards, a's late round made its leases valid again on %d shards another host holds (%v)", len(*valid), *valid)
	}
}

// scripted is a host's view of the table in a synctest bubble: once on,
// every call fails at once (throttled, unreachable) except those script
// answers for: a delay, then the call made or failed.
type scripted struct {
	fleet.Table
	mu     sync.Mutex
	on     bool
	script func(op, partition, key string, now time.Time) (delay time.Duration, call bool)
}

func (s *scripted) enter(ctx context.Context, op, partition, key string) error {
	s.mu.Lock()
	on, script := s.on, s.script
	s.mu.Unlock()
	if !on {
		return nil
	}
	delay, call := script(op, partition, key, time.Now())
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", fleet.ErrUnknown, ctx.Err())
		}
	}
	if !call {
		return fmt.Errorf("%w: throttled", fleet.ErrUnknown)
	}
	return nil
}

func (s *scripted) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if err := s.enter(ctx, "Get", partition, key); err != nil {
		return fleet.Item{}, err
	}
	return s.Table.Get(ctx, partition, key)
}

func (s *scripted) GetField(ctx context.Context, partition, key, field string) (fleet.Item, error) {
	if err := s.enter(ctx, "GetField", partition, key); err != nil {
		return fleet.Item{}, err
	}
	return s.Table.GetField(ctx, partition, key, field)
}

func (s *scripted) Query(ctx context.Context, partition string) ([]fleet.Item, error) {
	if err := s.enter(ctx, "Query", partition, ""); err != nil {
		return nil, err
	}
	return s.Table.Query(ctx, partition)
}

func (s *scripted) Put(ctx context.Context, it fleet.Item) (fleet.Item, error) {
	if err := s.enter(ctx, "Put", it.Partition, it.Key); err != nil {
		return fleet.Item{}, err
	}
	return s.Table.Put(ctx, it)
}

func (s *scripted) Delete(ctx context.Context, partition, key string, version uint64) error {
	if err := s.enter(ctx, "Delete", partition, key); err != nil {
		return err
	}
	return s.Table.Delete(ctx, partition, key, version)
}

func (s *scripted) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (fleet.Item, error) {
	if err := s.enter(ctx, "SetEntry", partition, key); err != nil {
		return fleet.Item{}, err
	}
	return s.Table.SetEntry(ctx, partition, key, field, entry, old, value)
}

// loader is a Loader's use of a membership in a bubble: every half
// second it takes the leases granted and commits a position on each.
type loader struct {
	mu     sync.Mutex
	leases map[string]kinesisload.Lease
	// busy holds the loader in a Deliver while open: no Acquire, no
	// Commit.
	busy atomic.Pointer[chan struct{}]
}

func runLoader(ctx context.Context, m kinesisload.Membership, ids []string) *loader {
	l := &loader{leases: map[string]kinesisload.Lease{}}
	go func() {
		for seq := 0; ctx.Err() == nil; seq++ {
			if c := l.busy.Load(); c != nil {
				<-*c
			}
			ls, err := m.Acquire(ctx, ids)
			if err != nil {
				return
			}
			l.mu.Lock()
			for _, x := range ls {
				l.leases[x.Shard()] = x
			}
			for id, x := range l.leases {
				if x.Err() != nil {
					delete(l.leases, id)
					continue
				}
				_ = x.Commit(ctx, kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence(fmt.Sprint(1000 + seq))})
			}
			l.mu.Unlock()
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}()
	return l
}

// live returns the leases l holds that Check finds valid.
func (l *loader) live() map[string]kinesisload.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]kinesisload.Lease{}
	for id, x := range l.leases {
		if x.(kinesisload.LeaseChecker).Check() == nil {
			out[id] = x
		}
	}
	return out
}

// A busy host's chunk beat whose chunk write fails writes its roster
// entry instead: that write too must end by the host's fence (Config
// says a heartbeat's call is). Bounded from the beat's start but begun
// when the chunk's write gave up, it could land a CallTimeout after the
// fence, after another host took the host for dead, and count from the
// beat's start: the host kept its leases while the other held them.
func TestAChunkBeatWhoseChunkFailedDoesNotLandItsEntryAfterTheFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fleet.Config{LeaseDuration: 10 * time.Second, RenewInterval: time.Second,
			FenceMargin: 1500 * time.Millisecond, CallTimeout: 2500 * time.Millisecond}
		mem := fleet.NewMemoryTable()
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		join := func(id string, tb fleet.Table) kinesisload.Membership {
			c := cfg
			c.HostID = id
			co, err := fleet.New(tb, c)
			if err != nil {
				t.Fatal(err)
			}
			m, err := co.Join(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Leave(context.Background()) })
			return m
		}
		aTable := &scripted{Table: mem}
		a0 := time.Now()
		a := join("a", aTable) // a's rounds: a0 + k seconds
		var ids []string
		var ups []kinesisload.ShardProgress
		for i := range 10 {
			id := fmt.Sprintf("shard-%02d", i)
			ids = append(ids, id)
			ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
		}
		if err := a.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error { return st.Save(ctx, "s", ups) }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		b := join("b", mem) // b's rounds: a0 + 0.3 s + k seconds
		la, lb := runLoader(ctx, a, ids), runLoader(ctx, b, ids)
		time.Sleep(time.Minute) // balanced; a beats in its positions
		if n := len(la.live()); n != 5 {
			t.Fatalf("a holds %d shards, want 5", n)
		}
		aHeld := la.live()
		// Just after a's round at L, whose chunk beat landed, a's view
		// of the table goes: writes throttled (reads too from L+3 s),
		// except the chunk beat at L+6 s (its fence, L+8.5 s, less a
		// CallTimeout), whose chunk write fails at L+8.4 s, and whose
		// roster write then lands at L+10.7 s.
		L := a0.Add(time.Since(a0).Truncate(time.Second))
		var chunkFailed, entryLanded atomic.Bool
		aTable.mu.Lock()
		aTable.on = true
		aTable.script = func(op, partition, key string, now time.Time) (time.Duration, bool) {
			switch {
			case op == "Put" && partition == "s#pos#a" && !chunkFailed.Load() && !now.Before(L.Add(6*time.Second)):
				chunkFailed.Store(true)
				t.Logf("chunk Put at L+%v", now.Sub(L))
				return 2400 * time.Millisecond, false
			case op == "SetEntry" && key == "roster" && chunkFailed.Load() && !entryLanded.Load():
				entryLanded.Store(true)
				t.Logf("roster SetEntry at L+%v", now.Sub(L))
				return 2300 * time.Millisecond, true
			case op == "Get" || op == "Query" || op == "GetField":
				return 0, now.Before(L.Add(3 * time.Second)) // then a's reads fail too
			}
			return 0, false
		}
		aTable.mu.Unlock()
		// a's Loader is in a Deliver from L+8 s to L+11 s (begun before
		// the fence, as it may): it checks its leases after it.
		time.Sleep(time.Until(L.Add(7800 * time.Millisecond)))
		deliver := make(chan struct{})
		la.busy.Store(&deliver)
		time.Sleep(time.Until(L.Add(11 * time.Second)))
		la.busy.Store(nil)
		close(deliver)
		time.Sleep(time.Millisecond)
		if !entryLanded.Load() {
			t.Fatal("a's roster write after its failed chunk was not made")
		}
		bHeld := lb.live()
		t.Logf("at L+%v: a %d live (of %d), b %d live", time.Since(L), len(la.live()), len(aHeld), len(bHeld))
		for id := range aHeld {
			if _, ok := bHeld[id]; !ok {
				t.Fatalf("at L+11 s b holds %d shards, not a's %s: the sequence did not happen", len(bHeld), id)
			}
		}
		if still := la.live(); len(still) > 0 {
			t.Errorf("b took a's shards for a dead host's, yet a's leases on %d of them are valid (a's roster write landed after its fence, counted from the beat's start)", len(still))
		}
		stop()
	})
}

// fieldReads counts the reads of one host's heartbeat counter (GetField
// of the first chunk of partition) made through it.
type fieldReads struct {
	fleet.Table
	partition string
	n         atomic.Int64
}

func (f *fieldReads) GetField(ctx context.Context, partition, key, field string) (fleet.Item, error) {
	if partition == f.partition {
		f.n.Add(1)
	}
	return f.Table.GetField(ctx, partition, key, field)
}

// A watcher reads a busy host once per watchEvery, at a phase of its own:
// when the fleet grows, watchEvery grows with it, and the watcher must go
// on reading in slots of the new length (slots numbered from the epoch
// with the old length are far ahead of those with the new: no read was
// ever due again, and the host was read only when it may be gone).
func TestAWatcherWhoseFleetGrewReadsABusyHostEveryWatchEvery(t *testing.T) {
	var reads *fieldReads
	hs := busyFleet(t, func(tb fleet.Table) fleet.Table { reads = &fieldReads{Table: tb, partition: "s#pos#b"}; return reads })
	for range 5 {
		hs.round(true)
	}
	// Five more hosts: eight, so that watchEvery is 10 s x 7/20 = 3.5 s.
	for _, id := range []string{"d", "e", "f", "g", "h"} {
		h := hs.w.host(id)
		hs.hosts = append(hs.hosts, h)
		hs.leases[h] = map[string]kinesisload.Lease{}
	}
	for range 30 { // balanced again, every host busy
		hs.round(true)
	}
	before := reads.n.Load()
	const rounds = 70 // 140 s
	for range rounds {
		hs.round(true)
	}
	got := reads.n.Load() - before
	period := hs.w.cfg.LeaseDuration * 7 / 20
	want := int64(time.Duration(rounds) * hs.w.cfg.RenewInterval / period)
	t.Logf("%d reads, want about %d", got, want)
	if got < want*3/4 {
		t.Errorf("in %v a read b's counter %d times, want about %d (every %v)", time.Duration(rounds)*hs.w.cfg.RenewInterval, got, want, period)
	}
}

// With ManualRounds the calls are not bounded by the fence: a host
// paused during its beat's write (coordtest's Pause: the round waits in
// the call while the others' rounds go on) has that write land when it
// resumes, after the others took its shards for a dead host's. The beat
// began before its fence but its answer came after: counted from its
// start, it must not make valid again the leases held across the fence.
func TestAHostPausedInItsBeatDoesNotHoldTheLeasesOthersTookMeanwhile(t *testing.T) {
	var ab *afterBeat
	hs := busyFleet(t, func(tb fleet.Table) fleet.Table { ab = &afterBeat{Table: tb}; return ab })
	for range 5 {
		hs.round(true)
	}
	a := hs.hosts[0]
	var aLeases []kinesisload.Lease
	for _, l := range hs.leases[a] {
		aLeases = append(aLeases, l)
	}
	// a's writes are throttled for two rounds (its last beat that landed
	// was at L, its fence is at L+6.67 s)...
	a.table.Refuse(100)
	hs.round(false)
	hs.round(false)
	a.table.Refuse(0)
	hs.hosts = hs.hosts[1:]
	delete(hs.leases, a)
	// ...then, at L+6 s, it is paused inside its round's beat.
	hs.w.now.Add(int64(hs.w.cfg.RenewInterval))
	a.table.Pause()
	done := make(chan struct{})
	go func() { defer close(done); a.c.Round() }()
	for rounds := 0; ; rounds++ {
		for _, h := range hs.hosts {
			h.c.Round()
		}
		if got := hs.held(); got["b"]+got["c"] == 30 {
			break
		}
		if rounds > 30 {
			t.Fatalf("a's shards not taken over: %v", hs.held())
		}
		hs.round(true)
	}
	// a resumes: its write lands; between its beat and the balance that
	// reads the shard items, its Loader checks its leases.
	valid := armLeaseCheck(hs, ab, aLeases)
	a.table.Resume()
	<-done
	if len(*valid) > 0 {
		t.Errorf("a, paused in its beat past its fence while b and c took its shards, holds valid leases on %d of them after it resumed: %v", len(*valid), *valid)
	}
}

// armLeaseCheck makes a's next beat, once it lands, check each of a's
// leases on the shards the other hosts of hs hold now, and returns the
// shards whose lease the check found still valid (filled by that beat).
func armLeaseCheck(hs *holders, ab *afterBeat, aLeases []kinesisload.Lease) *[]string {
	others := map[string]bool{}
	for _, h := range hs.hosts {
		for id, l := range hs.leases[h] {
			if l.Err() == nil {
				others[id] = true
			}
		}
	}
	valid := new([]string)
	ab.mu.Lock()
	defer ab.mu.Unlock()
	ab.armed, ab.beat = true, false
	ab.hook = func() {
		for _, l := range aLeases {
			if err := l.(kinesisload.LeaseChecker).Check(); err == nil && others[l.Shard()] {
				*valid = append(*valid, l.Shard())
			}
		}
	}
	return valid
}
