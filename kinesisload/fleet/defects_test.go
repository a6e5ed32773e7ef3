package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// world is hosts sharing one memory table on a manual clock, each through
// a faulty table of its own, with rounds run by hand.
type world struct {
	t     *testing.T
	table *fleet.MemoryTable
	now   atomic.Int64
	cfg   fleet.Config
	hosts map[string]*host
	logs  *syncBuffer
}

type host struct {
	c     *fleet.Coordinator
	table *fleet.FaultyTable
	m     kinesisload.Membership
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newWorld(t *testing.T, cfg fleet.Config) *world {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 10 * time.Second
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = 2 * time.Second
	}
	return &world{t: t, table: fleet.NewMemoryTable(), cfg: cfg, hosts: map[string]*host{}, logs: &syncBuffer{}}
}

func (w *world) clock() time.Time { return start.Add(time.Duration(w.now.Load())) }

// host makes host id and joins it to stream s.
func (w *world) host(id string, mod ...func(*fleet.Config)) *host {
	w.t.Helper()
	return w.hostThrough(id, w.table, mod...)
}

// hostThrough is host, through table (a wrapper of w's) rather than w's
// table itself.
func (w *world) hostThrough(id string, table fleet.Table, mod ...func(*fleet.Config)) *host {
	w.t.Helper()
	cfg := w.cfg
	cfg.HostID, cfg.ManualRounds, cfg.Clock = id, true, w.clock
	cfg.Logger = slog.New(slog.NewTextHandler(w.logs, nil))
	for _, f := range mod {
		f(&cfg)
	}
	ft := fleet.NewFaultyTable(table)
	c, err := fleet.New(ft, cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	h := &host{c: c, table: ft}
	w.hosts[id] = h
	m, err := c.Join(context.Background(), "s")
	if err != nil {
		w.t.Fatalf("host %s: Join: %v", id, err)
	}
	h.m = m
	w.t.Cleanup(func() {
		ft.Resume()
		_ = m.Leave(context.Background())
	})
	return h
}

// advance moves the clock by d in rounds of RenewInterval, running every
// host's round after each step (paused hosts excepted).
func (w *world) advance(d time.Duration) {
	for d > 0 {
		step := min(d, w.cfg.RenewInterval)
		d -= step
		w.now.Add(int64(step))
		for _, h := range w.hosts {
			if !h.table.Paused() {
				h.c.Round()
			}
		}
	}
}

// acquire offers shard to h until its rounds grant it.
func (w *world) acquire(h *host, shard string) kinesisload.Lease {
	w.t.Helper()
	for range 20 {
		ls, err := h.m.Acquire(context.Background(), []string{shard})
		if err != nil {
			w.t.Fatal(err)
		}
		if len(ls) == 1 {
			return ls[0]
		}
		w.advance(w.cfg.RenewInterval)
	}
	w.t.Fatalf("%s never granted", shard)
	return nil
}

// seed initialises stream s with n ACTIVE shards at TRIM_HORIZON through h.
func (w *world) seed(h *host, n int) []string {
	w.t.Helper()
	var ids []string
	var ups []kinesisload.ShardProgress
	for i := range n {
		id := "shard-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		ids = append(ids, id)
		ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	}
	if err := h.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", ups)
	}); err != nil {
		w.t.Fatal(err)
	}
	return ids
}

// startedOver makes a fleet whose host a initialised generation 0 with an
// identity (then each of before runs), started over to a re-created stream
// (renewed), and whose host b joined generation 1.
func startedOver(t *testing.T, before ...func(*world)) (w *world, b *host, renewed kinesisload.StreamIdentity) {
	t.Helper()
	w = newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	old := kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start}
	if err := a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.SetIdentity(ctx, "s", old)
	}); err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(w)
	}
	renewed = kinesisload.StreamIdentity{ARN: old.ARN, Created: start.Add(time.Hour)}
	if err := a.m.Store().StartOver(ctx, "s", renewed); !errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Fatalf("StartOver = %v, want the mismatch that ends the session", err)
	}
	b = w.host("b") // joins generation 1
	if err := b.m.Initialise(ctx, func(context.Context, kinesisload.PositionStore) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return w, b, renewed
}

// The identity item deleted by hand while generation 1 is in force: a
// host joining does not take its absence for generation 0 (it would read
// the archive of a stream gone, beside hosts of generation 1). Join fails
// with ErrIdentityMissing, saying what to restore.
func TestJoinRefusesAMissingIdentityWhenALaterGenerationExists(t *testing.T) {
	w, _, _ := startedOver(t)
	deleteIdentityByHand(t, w)
	err := joinFresh(t, w)
	if err == nil {
		t.Fatal("Join succeeded without the identity item while generation 1 exists: it joined generation 0")
	}
	if !errors.Is(err, fleet.ErrIdentityMissing) || !strings.Contains(err.Error(), "gen") || !strings.Contains(err.Error(), "identity") {
		t.Errorf("Join = %v, want ErrIdentityMissing naming the generation and the item to restore", err)
	}
}

// The identity item deleted by hand while a host of generation 1 runs: the
// host's next read of it says the item is missing and what to restore, not
// that the fleet went back to generation 0. (Found by the simulation, seed
// 3002140: Run stopped with "the identity item names generation 0, the
// session is of 1".)
func TestMissingIdentityOfALaterGenerationIsReportedMissing(t *testing.T) {
	w, b, renewed := startedOver(t)
	ctx := context.Background()
	deleteIdentityByHand(t, w)
	_, err := b.m.Store().Identity(ctx, "s")
	if !errors.Is(err, fleet.ErrIdentityMissing) || !strings.Contains(err.Error(), "generation 1") {
		t.Errorf("Identity = %v, want ErrIdentityMissing naming generation 1", err)
	}
	err = b.m.Store().SetIdentity(ctx, "s", renewed)
	if !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("SetIdentity = %v, want ErrIdentityMissing (generation 1's identity is written by a start-over only)", err)
	}
}

// The identity item deleted by hand while a host of generation 0 runs, in
// a fleet initialised with it: the host's next session does not take the
// absence for a stream not identified yet, which would write the stream
// seen now (re-created meanwhile, perhaps) as the fleet's and read it from
// the old stream's positions. Identity and SetIdentity say the item is
// missing, and nothing is written. (Found by the simulation, seeds 8033261
// and 4076942, with the simulated operator's restore of an older backup.)
func TestMissingIdentityOfAnInitialisedFirstGenerationIsReportedMissing(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentified(t, a)
	deleteIdentityByHand(t, w)
	if _, err := a.m.Store().Identity(ctx, "s"); !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("Identity = %v, want ErrIdentityMissing", err)
	}
	other := kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start.Add(time.Hour)}
	if err := a.m.Store().SetIdentity(ctx, "s", other); !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("SetIdentity = %v, want ErrIdentityMissing", err)
	}
	if it, err := w.table.Get(ctx, "s", "identity"); err != nil || it.Exists() {
		t.Errorf("the identity item after the refusals: %+v, %v; want it still absent", it, err)
	}
}

// The identity item and the init item both deleted by hand in a fleet
// that read the stream: a host joining does not take the stream for one
// never initialised, which would write the stream it sees now (re-created
// meanwhile, perhaps) as the fleet's beside the old stream's items. A
// shard item a host owned says the fleet read it: Join fails with
// ErrIdentityMissing, naming the item to restore (found by the
// simulation, seed 10017083: every host then stopped for a lineage
// broken, for ever).
func TestJoinRefusesAMissingIdentityAndInitItemOfAFleetThatRead(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentifiedWithX(t, a)
	if _, err := a.m.Acquire(ctx, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	w.advance(2 * time.Second)
	if ls, err := a.m.Acquire(ctx, []string{"x"}); err != nil || len(ls) != 1 {
		t.Fatalf("a was granted %d leases (%v), want x's", len(ls), err)
	}
	if err := a.m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	deleteIdentityByHand(t, w)
	it, err := w.table.Get(ctx, "s", "init")
	if err != nil || !it.Exists() {
		t.Fatalf("no init item: %v", err)
	}
	if err := w.table.Delete(ctx, "s", "init", it.Version); err != nil {
		t.Fatal(err)
	}
	err = joinFresh(t, w)
	if err == nil {
		t.Fatal("Join took a fleet that read the stream for one never initialised")
	}
	if !errors.Is(err, fleet.ErrIdentityMissing) || !strings.Contains(err.Error(), `"identity"`) {
		t.Errorf("Join = %v, want ErrIdentityMissing naming the identity item", err)
	}
}

// A fleet imported (fleet.Import) without an identity, as an export of a
// source that stored none is: its shard items hold progress but were never
// owned, so a host joins it as a first run and writes the identity it
// sees, as before (the review of 4d429da found Join refused it).
func TestJoinAcceptsAnImportWithoutIdentity(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	if err := fleet.Import(ctx, w.table, "s", kinesisload.StreamIdentity{}, []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.AfterSequence("42")}}); err != nil {
		t.Fatal(err)
	}
	if err := joinFresh(t, w); err != nil {
		t.Fatalf("Join of an imported fleet without identity = %v, want nil", err)
	}
}

// The Loader's own reads of the whole partition (Load when the view is
// stale, Started) are acted on as a round's: a lease the table gave
// another epoch is lost at once. (Before the fix they refreshed the view
// and the time of the last read without acting on it, so the rounds, which
// read again only ResyncInterval after the last read, never did while the
// Loader kept reading: a host read on under a lease an operator's rewind
// had taken, and the rewound records were never read again; found by the
// simulation, seed 10039694, 2 runs in 6.)
func TestAReadForTheLoaderLosesALeaseTheTableMovedOn(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	ids := w.seed(a, 1)
	ls := w.acquire(a, ids[0])
	// The item moves on to the next epoch, unannounced (as a rewind whose
	// roster entry was collected before the host saw it).
	it, err := w.table.Get(ctx, "s", "shard#"+ids[0])
	if err != nil {
		t.Fatal(err)
	}
	next := it.Clone()
	next.Fields["epoch"] = fmt.Sprint(ls.Epoch() + 1)
	delete(next.Fields, "owner")
	if _, err := w.table.Put(ctx, next); err != nil {
		t.Fatal(err)
	}
	started := a.m.Store().(kinesisload.StartedStore)
	resync := a.c.Config().ResyncInterval
	for elapsed := time.Duration(0); elapsed < 2*resync && !leaseLost(ls); elapsed += w.cfg.RenewInterval {
		if _, err := started.Started(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		w.advance(w.cfg.RenewInterval)
	}
	if !leaseLost(ls) {
		t.Fatalf("the lease of %s at epoch %d is held after two ResyncIntervals of the Loader's reads, though the table is at epoch %d", ids[0], ls.Epoch(), ls.Epoch()+1)
	}
}

// failsOnce fails the first Get of a partition with an unknown outcome,
// as a throttled or timed-out read does.
type failsOnce struct {
	fleet.Table
	partition string
	failed    atomic.Bool
}

func (t *failsOnce) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if partition == t.partition && t.failed.CompareAndSwap(false, true) {
		return fleet.Item{}, fmt.Errorf("%w: the read failed", fleet.ErrUnknown)
	}
	return t.Table.Get(ctx, partition, key)
}

// A host joining a stream with no identity item, whose look for a later
// generation meets a read of unknown outcome, reads again: Join does not
// fail for it (the Loader stopped: "looking for generation 1: outcome
// unknown"; found by the simulation, seed 30019088).
func TestJoinReadsAgainWhenItsLookForALaterGenerationFails(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	c, err := fleet.New(&failsOnce{Table: w.table, partition: "s#gen1"}, fleet.Config{HostID: "c", ManualRounds: true, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(context.Background(), "s")
	if err != nil {
		t.Fatalf("Join = %v, want it to read again", err)
	}
	_ = m.Leave(context.Background())
}

// A holder of the initialisation lock stuck in its init (a call that never
// returns), heartbeating all the while, loses the lock once its progress
// stood still for InitStallTimeout: another host initialises, and the
// stuck holder's commit is refused. (Before the fix no host of the fleet
// ever initialised.)
func TestStalledInitialisationLosesTheLock(t *testing.T) {
	w := newWorld(t, fleet.Config{InitStallTimeout: 30 * time.Second})
	ctx := context.Background()
	a, b := w.host("a"), w.host("b")
	stuck, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
			close(stuck)
			<-release // a Sink's Checkpoints that never returns
			return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
		})
	}()
	<-stuck
	bDone := make(chan error, 1)
	go func() {
		bDone <- b.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
			return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "y", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
		})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-bDone:
			if err != nil {
				t.Fatalf("b: Initialise = %v", err)
			}
		default:
			if time.Now().After(deadline) {
				t.Fatal("b never initialised while a was stuck under the lock")
			}
			w.advance(w.cfg.RenewInterval)
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	if elapsed := time.Duration(w.now.Load()); elapsed < 30*time.Second {
		t.Errorf("b took the lock after %v of a's stall, before InitStallTimeout (30s)", elapsed)
	}
	close(release)
	if err := <-aDone; !errors.Is(err, kinesisload.ErrLeaseLost) {
		t.Errorf("a's commit after it lost the lock = %v, want an error wrapping ErrLeaseLost", err)
	}
	info, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Shards["y"]; !ok || !info.Initialised || info.InitLockOwner != "b" {
		t.Errorf("after the takeover: initialised %v by %q with shards %v; want b's batch", info.Initialised, info.InitLockOwner, info.Shards)
	}
	if _, ok := info.Shards["x"]; ok {
		t.Error("the stalled holder's batch became visible")
	}
}

// A holder that makes progress keeps the lock, however long its
// initialisation takes.
func TestInitialisationThatProgressesKeepsTheLock(t *testing.T) {
	// In a bubble: a's progress every millisecond and the test's rounds
	// every two keep their order on a busy machine.
	synctest.Test(t, testInitialisationThatProgressesKeepsTheLock)
}

func testInitialisationThatProgressesKeepsTheLock(t *testing.T) {
	w := newWorld(t, fleet.Config{InitStallTimeout: 30 * time.Second})
	ctx := context.Background()
	a, b := w.host("a"), w.host("b")
	working, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
			close(working)
			for {
				select {
				case <-release:
					return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
				case <-time.After(time.Millisecond):
					st.(kinesisload.InitProgresser).InitProgress() // a shard resolved
				}
			}
		})
	}()
	<-working
	bDone := make(chan error, 1)
	go func() {
		bDone <- b.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error { return nil })
	}()
	for range 60 { // 2 minutes of the fleet's time
		w.advance(w.cfg.RenewInterval)
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case err := <-bDone:
		t.Fatalf("b's Initialise returned (%v) while a, working, held the lock", err)
	default:
	}
	close(release)
	if err := <-aDone; err != nil {
		t.Fatalf("a: Initialise = %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		w.advance(w.cfg.RenewInterval)
		select {
		case err := <-bDone:
			if err != nil {
				t.Fatalf("b: Initialise = %v", err)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("b never saw a's commit")
		}
		time.Sleep(time.Millisecond)
	}
}

// A heartbeat whose write landed but whose answer was lost, and whose
// read back failed too, is not counted as landed when the next beat
// finds it: the fence runs from when that earlier beat began, not from
// the later one. (Before the fix the later beat's start was taken, and
// the host fenced itself a round late: its lease could expire elsewhere
// while it still read.)
func TestHeartbeatLandedEarlierCountsFromItsOwnStart(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	w.seed(a, 1)
	l := w.acquire(a, "shard-aa")
	// The next beat lands; its answer and the read back are lost.
	a.table.LoseAnswers(1)
	a.table.FailReads(1)
	w.advance(w.cfg.RenewInterval) // T: the beat that landed began here
	landedAt := w.now.Load()
	// Every later write is refused: no beat lands after T.
	a.table.Refuse(1 << 30)
	fence := w.cfg.LeaseDuration - w.cfg.LeaseDuration/3 // FenceMargin's default
	// Just before T + fence: held. At T + fence: lost, whatever a later
	// beat read back.
	for time.Duration(w.now.Load()-landedAt)+w.cfg.RenewInterval < fence {
		w.advance(w.cfg.RenewInterval)
		if err := l.(kinesisload.LeaseChecker).Check(); err != nil {
			t.Fatalf("lost %v after the beat that landed, before the fence: %v", time.Duration(w.now.Load()-landedAt), err)
		}
	}
	a.table.Refuse(0)
	a.table.FalseConflicts(1) // the next beat's condition fails: it finds the earlier one
	w.now.Add(int64(fence) - (w.now.Load() - landedAt))
	if err := l.(kinesisload.LeaseChecker).Check(); err == nil {
		t.Fatalf("held %v after the last beat that landed began, past the fence (%v)", time.Duration(w.now.Load()-landedAt), fence)
	}
}

// Hosts that balance by different rules are warned about.
func TestHostsThatBalanceOtherwiseAreWarnedAbout(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	w.host("a")
	w.host("b", func(c *fleet.Config) { c.BalanceBy = kinesisload.BalanceByThroughput })
	w.advance(2 * w.cfg.RenewInterval)
	if !strings.Contains(w.logs.String(), "balances by another rule") {
		t.Errorf("no warning about a host balancing otherwise; log:\n%s", w.logs.String())
	}
}

// A host restarted under the HostID of its earlier life (a pod's stable
// name) while another host had asked that life for a shard: the new life
// does not hold the shard, and the asker waited for a handoff that no one
// would make, for ever (found by the simulation). The new life gives up
// what its earlier life owned (with the positions that life wrote), so
// every shard is read again.
func TestRestartUnderTheSameHostIDGivesUpTheEarlierLifesLeases(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 2)
	w.acquire(a, ids[0])
	w.acquire(a, ids[1])
	b := w.host("b")
	for range 3 {
		b.c.Round() // b asks a for a shard; a dies before it answers
		if _, err := b.m.Acquire(context.Background(), ids); err != nil {
			t.Fatal(err)
		}
	}
	a.table.Kill()
	a2 := w.host("a") // the same name, a new life
	held := map[string]string{}
	for range 30 {
		for name, h := range map[string]*host{"a": a2, "b": b} {
			ls, err := h.m.Acquire(context.Background(), ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				held[l.Shard()] = name
			}
		}
		if len(held) == 2 {
			return
		}
		w.advance(w.cfg.RenewInterval)
	}
	t.Fatalf("after 30 rounds the shards held are %v, want both held: a shard owned by a's earlier life is read by no one", held)
}

// A host paused past its fence (its leases lost) while another host had
// asked it for a shard: once it runs again it beats, so no host takes its
// shards for a dead host's, but it no longer holds the lease, so it never
// answered the handoff, and the shard was read by no one (found by the
// simulation). A host gives up a shard its item says it owns when it does
// not hold its lease and another live host asked for it, with the
// position it reached.
func TestFencedHostGivesUpAShardAskedOfIt(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 2)
	la := w.acquire(a, ids[0])
	w.acquire(a, ids[1])
	at := scan.AfterSequence("49000000000000000000000000000000000000000000000000000042")
	if err := la.Commit(context.Background(), kinesisload.ShardProgress{ShardID: ids[0], State: kinesisload.StateActive, Position: at}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval) // the position is written with a's
	b := w.host("b")
	for range 3 {
		b.c.Round() // b asks a for a shard
		if _, err := b.m.Acquire(context.Background(), ids); err != nil {
			t.Fatal(err)
		}
	}
	a.table.Outage(true)
	for range 4 {
		a.c.Round() // a's beats do not land: it fences itself
		w.now.Add(int64(w.cfg.LeaseDuration / 3))
	}
	a.table.Outage(false)
	held := map[string]kinesisload.Lease{}
	for range 40 {
		for _, h := range []*host{a, b} {
			ls, err := h.m.Acquire(context.Background(), ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				held[l.Shard()] = l
			}
		}
		if len(held) == 2 {
			if p := held[ids[0]].Progress().Position; !p.Equal(at) && ids[0] == held[ids[0]].Shard() {
				t.Errorf("%s granted at %v, want the position a reached, %v", ids[0], p, at)
			}
			return
		}
		w.advance(w.cfg.RenewInterval)
	}
	t.Fatalf("after 40 rounds the shards held are %v, want both held: a shard asked of a fenced host is read by no one", slices.Collect(maps.Keys(held)))
}

// After the initialisation commits, the shards' items carry the committed
// progress themselves: deleting the init item by hand loses no shard's
// state (a COMPLETED parent's lived only in the batch's pending entries,
// invisible without the init item's commit, and its children, read
// already, then stopped every host with ParentAfterChildError; found by
// the simulation).
func TestCommittedProgressOutlivesTheInitItem(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 2)
	ctx := context.Background()
	deadline := 0
	for {
		info, err := fleet.Inspect(ctx, w.table, "s")
		if err != nil {
			t.Fatal(err)
		}
		folded := true
		for _, it := range mustQuery(t, w.table, "s") {
			if strings.HasPrefix(it.Key, "shard#") && len(it.Maps["pend"]) > 0 {
				folded = false
			}
		}
		if folded && info.Initialised {
			break
		}
		if deadline++; deadline > 50 {
			t.Fatal("the shards' items still hold only pending progress 50 rounds after the commit")
		}
		w.advance(w.cfg.RenewInterval)
	}
	deleteInitAndCheckActive(t, w, ids)
}

// deleteInitAndCheckActive deletes stream s's init item by hand and checks
// that every shard of ids is still ACTIVE at TRIM_HORIZON without it.
func deleteInitAndCheckActive(t *testing.T, w *world, ids []string) {
	t.Helper()
	ctx := context.Background()
	it, err := w.table.Get(ctx, "s", "init")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.table.Delete(ctx, "s", "init", it.Version); err != nil {
		t.Fatal(err)
	}
	info, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got := info.Shards[id].Progress; got.State != kinesisload.StateActive || got.Position.Kind != scan.KindTrimHorizon {
			t.Errorf("%s without the init item: %v, want ACTIVE at TRIM_HORIZON", id, got)
		}
	}
}

func mustQuery(t *testing.T, table fleet.Table, partition string) []fleet.Item {
	t.Helper()
	its, err := table.Query(context.Background(), partition)
	if err != nil {
		t.Fatal(err)
	}
	return its
}

// The identity item deleted by hand from an initialised fleet of one
// generation: a host joining does not take the stream it sees for the one
// the progress was stored for (it may be a stream re-created meanwhile:
// found by the simulation, where a host read a re-created stream from the
// old stream's positions). Join fails with ErrIdentityMissing.
func TestJoinRefusesAMissingIdentityOfAnInitialisedStream(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	initialiseIdentified(t, a)
	deleteIdentityByHand(t, w)
	err := joinFresh(t, w)
	if err == nil {
		t.Fatal("Join succeeded without the identity item of an initialised stream")
	}
	if !errors.Is(err, fleet.ErrIdentityMissing) || !strings.Contains(err.Error(), "identity") {
		t.Errorf("Join = %v, want ErrIdentityMissing naming the item to restore", err)
	}
}

// A host joins while another starts the fleet over: it reads the identity
// item of the old generation, then that generation's roster marked over.
// Join reads the identity again and joins the generation in force (it
// stopped the Loader with "retry"; found by the simulation).
func TestJoinDuringAStartOverJoinsTheNewGeneration(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentified(t, a)
	// The start-over as a joining host sees it half done: the roster of
	// generation 0 marked over, the identity item (read before) at 0.
	if _, err := w.table.SetEntry(ctx, "s", "roster", "beats", "#gen", "", "1"); err != nil {
		t.Fatal(err)
	}
	c, err := fleet.New(fleet.NewFaultyTable(w.table), fleet.Config{HostID: "c", ManualRounds: true, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan error, 1)
	jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		m, err := c.Join(jctx, "s")
		if err == nil {
			t.Cleanup(func() { _ = m.Leave(context.Background()) })
		}
		joined <- err
	}()
	time.Sleep(50 * time.Millisecond) // Join reads the identity, then the marked roster
	it, err := w.table.Get(ctx, "s", "identity")
	if err != nil {
		t.Fatal(err)
	}
	next := it.Clone()
	next.Fields["gen"] = "1"
	next.Fields["created"] = start.Add(time.Hour).Format(time.RFC3339Nano)
	if _, err := w.table.Put(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("Join during a start-over = %v, want it to join generation 1", err)
	}
	info, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Hosts["c"]; !ok || info.Generation != 1 {
		t.Errorf("host c is not in generation 1's roster: generation %d, hosts %v", info.Generation, info.Hosts)
	}
}

// identityLate hides the identity item from the first read of it: the
// item was written between a joining host's two reads (its read of the
// identity, then of the init item), as an initialising host writes it
// just before it commits.
type identityLate struct {
	fleet.Table
	hidden atomic.Bool
}

func (t *identityLate) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if key == "identity" && t.hidden.CompareAndSwap(false, true) {
		return fleet.Item{Partition: partition, Key: key}, nil
	}
	return t.Table.Get(ctx, partition, key)
}

// A host joins while another initialises: it reads no identity item, then
// the init item committed with one. The item is there by then; Join reads
// it again and joins, rather than refusing as if it had been deleted by
// hand (found by a fleet test on a loaded machine: 1 run in 40).
func TestJoinDuringAnInitialisationReadsTheIdentityAgain(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentified(t, a)
	late := &identityLate{Table: w.table}
	c, err := fleet.New(late, fleet.Config{HostID: "c", ManualRounds: true, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(ctx, "s")
	if err != nil {
		t.Fatalf("Join = %v, want it to read the identity item again and join", err)
	}
	if !late.hidden.Load() {
		t.Fatal("the identity item was never hidden: the test proves nothing")
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
}

// initialiseIdentified initialises stream "s" on host h with a stream
// identity: the identity item is written and the init item says so.
func initialiseIdentified(t *testing.T, h *host) {
	t.Helper()
	if err := h.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.SetIdentity(ctx, "s", kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start})
	}); err != nil {
		t.Fatal(err)
	}
}

// initialiseIdentifiedWithX initialises stream "s" through h with an
// identity and one shard, x, at TRIM_HORIZON.
func initialiseIdentifiedWithX(t *testing.T, h *host) {
	t.Helper()
	if err := h.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		if err := st.SetIdentity(ctx, "s", kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start}); err != nil {
			return err
		}
		return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
	}); err != nil {
		t.Fatal(err)
	}
}

// joinFresh joins stream "s" as a new host, c, and returns Join's error
// (a Join that succeeds is left at once).
func joinFresh(t *testing.T, w *world) error {
	t.Helper()
	c, err := fleet.New(fleet.NewFaultyTable(w.table), fleet.Config{HostID: "c", ManualRounds: true, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(context.Background(), "s")
	if err == nil {
		_ = m.Leave(context.Background())
	}
	return err
}

// deleteShardByHand deletes shard id's item of stream "s", as an operator
// editing the table would.
func deleteShardByHand(t *testing.T, w *world, id string) {
	t.Helper()
	ctx := context.Background()
	it, err := w.table.Get(ctx, "s", "shard#"+id)
	if err != nil || !it.Exists() {
		t.Fatalf("no item of %s: %v", id, err)
	}
	if err := w.table.Delete(ctx, "s", it.Key, it.Version); err != nil {
		t.Fatal(err)
	}
}

// wantNoShardItem fails t unless shard id of stream "s" has no item.
func wantNoShardItem(t *testing.T, w *world, id, after string) {
	t.Helper()
	if it, err := w.table.Get(context.Background(), "s", "shard#"+id); err != nil || it.Exists() {
		t.Errorf("after %s, %s's item is %+v (%v), want it still absent", after, id, it, err)
	}
}

// deleteIdentityByHand deletes stream "s"'s identity item, as an operator
// editing the table would.
func deleteIdentityByHand(t *testing.T, w *world) {
	t.Helper()
	ctx := context.Background()
	it, err := w.table.Get(ctx, "s", "identity")
	if err != nil || !it.Exists() {
		t.Fatalf("no identity item: %v", err)
	}
	if err := w.table.Delete(ctx, "s", "identity", it.Version); err != nil {
		t.Fatal(err)
	}
}

// A table outage longer than an update's attempts, met by a Save (a new
// shard saved after a reshard): the Save waits the outage out, as the
// heartbeats do, and lands after it; the Loader does not stop for it.
// (Found by the simulation, seed 3001581: a 6.6 s outage stopped Run with
// "gave up after 8 attempts".)
func TestSaveWaitsOutATableOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, fleet.Config{})
		ctx := context.Background()
		a := w.host("a")
		if err := a.m.Initialise(ctx, func(context.Context, kinesisload.PositionStore) error { return nil }); err != nil {
			t.Fatal(err)
		}
		a.table.Outage(true)
		saved := make(chan error, 1)
		go func() {
			saved <- a.m.Store().Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
		}()
		time.Sleep(time.Minute) // far more than eight attempts take
		select {
		case err := <-saved:
			t.Fatalf("Save returned during the outage: %v", err)
		default:
		}
		a.table.Outage(false)
		if err := <-saved; err != nil {
			t.Fatalf("Save after the outage = %v, want nil", err)
		}
		got, err := a.m.Store().Load(ctx, "s")
		if err != nil || got["x"].State != kinesisload.StateActive {
			t.Fatalf("Load = %v, %v; want shard x ACTIVE", got, err)
		}
		if !strings.Contains(w.logs.String(), "still trying to save") {
			t.Error("the outage was not logged")
		}
	})
}

// A shard item deleted by hand while its owner reads, and saved again by
// another host (a Loader cannot tell it from a shard born since): the new
// item's leases have epochs above the old owner's, so a TransactionalSink
// that stored the old epoch fences the old owner's late batch, and takes
// the new owner's. (Found by the simulation, seed 5003268: epochs started
// again at 1, the old owner and the new one delivered at epoch 1, and the
// Sink's refusal of an overlap at the same epoch stopped Run.)
func TestAShardItemSavedAgainAfterADeletionHasEpochsAboveTheOldOwners(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a, b := w.host("a"), w.host("b")
	if err := a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Initialise(ctx, func(context.Context, kinesisload.PositionStore) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Acquire(ctx, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	w.advance(2 * time.Second)
	old, err := a.m.Acquire(ctx, []string{"x"})
	if err != nil || len(old) != 1 {
		t.Fatalf("a was granted %d leases (%v), want x's", len(old), err)
	}
	it, err := w.table.Get(ctx, "s", "shard#x")
	if err != nil || !it.Exists() {
		t.Fatalf("no item for x: %v", err)
	}
	if err := w.table.Delete(ctx, "s", it.Key, it.Version); err != nil {
		t.Fatal(err)
	}
	w.advance(time.Minute) // the hosts read the whole partition again
	if err := b.m.Store().Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Acquire(ctx, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.now.Add(int64(time.Second))
		b.c.Round()
	}
	ls, err := b.m.Acquire(ctx, []string{"x"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("b was granted %d leases (%v), want x's", len(ls), err)
	}
	if ls[0].Epoch() <= old[0].Epoch() {
		t.Errorf("the new lease of x has epoch %d, the old owner's %d: want above", ls[0].Epoch(), old[0].Epoch())
	}
}

// The init item and a shard item deleted by hand while the shard's owner
// reads: the next host to join initialises the fleet again (a second
// initialisation, which saves the shard as new), and the new item's leases
// have epochs above the old owner's, as after a Save. (Found by the
// simulation, seed 8047263: the second initialisation's items started
// their epochs at 1 again, and the old owner took the new item at the
// epoch it had held, delivering records again at that epoch.)
func TestAShardItemSavedAgainByASecondInitialisationHasEpochsAboveTheOldOwners(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	saveX := func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
	}
	a := w.host("a")
	if err := a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		// Identified, as a Loader's fleet is: a host whose identity item
		// is missing while the roster shows changes refuses to join.
		if err := st.SetIdentity(ctx, "s", kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start}); err != nil {
			return err
		}
		return saveX(ctx, st)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Acquire(ctx, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	w.advance(2 * time.Second)
	old, err := a.m.Acquire(ctx, []string{"x"})
	if err != nil || len(old) != 1 {
		t.Fatalf("a was granted %d leases (%v), want x's", len(old), err)
	}
	for _, key := range []string{"shard#x", "init"} {
		it, err := w.table.Get(ctx, "s", key)
		if err != nil || !it.Exists() {
			t.Fatalf("no item %s: %v", key, err)
		}
		if err := w.table.Delete(ctx, "s", it.Key, it.Version); err != nil {
			t.Fatal(err)
		}
	}
	c := w.host("c")
	if err := c.m.Initialise(ctx, saveX); err != nil {
		t.Fatal(err)
	}
	var ls []kinesisload.Lease
	for range 10 {
		if ls, err = c.m.Acquire(ctx, []string{"x"}); err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			break
		}
		w.now.Add(int64(time.Second))
		c.c.Round()
	}
	if len(ls) != 1 {
		t.Fatal("c was never granted x")
	}
	if ls[0].Epoch() <= old[0].Epoch() {
		t.Errorf("the new lease of x has epoch %d, the old owner's %d: want above", ls[0].Epoch(), old[0].Epoch())
	}
}

// The identity item deleted by hand while a host of a generation started
// over initialises it: the host's LoadStart says the item is missing
// instead of "no T0 yet", which made the Loader resolve LATEST at a fresh
// T0 and skip what the new stream received since it was created (found by
// the simulation, seed 8014370: a LOSS of the records put between the
// re-creation and the fresh T0).
func TestStartOverT0WithTheIdentityItemMissingIsAnError(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentified(t, a)
	renewed := kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start.Add(time.Hour)}
	if err := a.m.Store().StartOver(ctx, "s", renewed); !errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Fatalf("StartOver = %v, want the mismatch that ends the session", err)
	}
	b := w.host("b") // joins generation 1
	deleteIdentityByHand(t, w)
	var got error
	var ok bool
	err := b.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		_, ok, got = st.(kinesisload.StartStore).LoadStart(ctx, "s")
		return got
	})
	if !errors.Is(got, fleet.ErrIdentityMissing) || ok {
		t.Errorf("LoadStart of generation 1 without the identity item = %v, %v; want ErrIdentityMissing", ok, got)
	}
	if err == nil {
		t.Error("the initialisation committed")
	}
}

// The identity item restored from a backup taken before the fleet started
// over: a host of the generation in force stops with ErrIdentityBehind,
// naming the generation to restore, instead of reading on beside a fleet
// whose identity no longer knows its generation. (Found by the
// simulation, seed 4021197: the hosts of generation 1 read nothing after
// the stream was re-created again, in silence.)
func TestAnIdentityRestoredFromBeforeAStartOverStopsTheHostsOfTheLaterGeneration(t *testing.T) {
	var backup fleet.Item
	w, b, _ := startedOver(t, func(w *world) {
		var err error
		if backup, err = w.table.Get(context.Background(), "s", "identity"); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	cur, err := w.table.Get(ctx, "s", "identity")
	if err != nil {
		t.Fatal(err)
	}
	backup.Version = cur.Version
	if _, err := w.table.Put(ctx, backup); err != nil { // the stale backup, restored
		t.Fatal(err)
	}
	w.advance(4 * w.cfg.LeaseDuration) // past a resync
	_, err = b.m.Acquire(ctx, nil)
	if !errors.Is(err, fleet.ErrIdentityBehind) || !strings.Contains(err.Error(), `"gen" = 1`) {
		t.Fatalf("Acquire = %v, want ErrIdentityBehind naming generation 1", err)
	}
}

// A host whose leaving write is refused many times over (a throttled or
// loaded table) keeps trying while its beat is live and is marked left,
// so the other hosts count it out at once. (It gave up at the first
// refusal: the roster it read back showed its entry not left, which it
// took for a fatal error; a loaded dynalite's fleet test found a host
// that had closed not marked left.)
func TestLeaveKeepsTryingToMarkTheHostLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, fleet.Config{})
		ctx := context.Background()
		a := w.host("a")
		w.seed(a, 1)
		w.advance(w.cfg.RenewInterval)
		a.table.Refuse(10)
		if err := a.m.Leave(ctx); err != nil {
			t.Fatalf("Leave = %v, want nil once the table takes the write", err)
		}
		info, err := fleet.Inspect(ctx, w.table, "s")
		if err != nil {
			t.Fatal(err)
		}
		if hi, ok := info.Hosts["a"]; !ok || !hi.Left {
			t.Errorf("host a after Leave: %+v (listed %v), want marked left", hi, ok)
		}
	})
}

// A merge child that a host with a stale view of a parent saved ACTIVE
// (the parent's item was deleted by hand and saved again, open, by
// another host) was never leased, so never read: Load says it waits for
// its parents, and the Loader reads the open parent first instead of
// stopping for a parent after its child. Once both parents are COMPLETED
// it loads ACTIVE again. (Found by the simulation, seed 30015576: every
// start stopped with a ParentAfterChildError.)
func TestAnUnreadChildActivatedBesideAnOpenParentLoadsAsPending(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	open := kinesisload.ShardProgress{State: kinesisload.StateActive, Position: scan.TrimHorizon()}
	p, q := open, open
	p.ShardID, q.ShardID = "p", "q"
	child := kinesisload.ShardProgress{ShardID: "c", Parents: []string{"p", "q"}, State: kinesisload.StatePendingParent, Position: scan.TrimHorizon()}
	if err := a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", []kinesisload.ShardProgress{p, q, child})
	}); err != nil {
		t.Fatal(err)
	}
	completed := kinesisload.ShardProgress{ShardID: "q", State: kinesisload.StateCompleted, Position: scan.ShardEnd()}
	activated := child
	activated.State = kinesisload.StateActive
	if err := a.m.Store().Save(ctx, "s", []kinesisload.ShardProgress{completed, activated}); err != nil {
		t.Fatal(err)
	}
	got, err := a.m.Store().Load(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if got["c"].State != kinesisload.StatePendingParent {
		t.Errorf("child c with parent p open loads %v, want PENDING_PARENT", got["c"].State)
	}
	completed.ShardID = "p"
	if err := a.m.Store().Save(ctx, "s", []kinesisload.ShardProgress{completed}); err != nil {
		t.Fatal(err)
	}
	if got, err = a.m.Store().Load(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if got["c"].State != kinesisload.StateActive {
		t.Errorf("child c with both parents COMPLETED loads %v, want ACTIVE", got["c"].State)
	}
}

// A host that committed the initialisation and left before its first
// round never folded the batch's progress into the shards' items: another
// host does it a LeaseDuration after it sees them unfolded, so deleting
// the init item by hand still loses no shard's state. (Found by the
// simulation, seeds 60080300, 60057535 and 60059801: a COMPLETED parent's
// state lived only in the batch, went with the init item, and the parent
// was read again after its child: every start stopped with a
// ParentAfterChildError.)
func TestAnotherHostFoldsTheProgressOfACommitterThatLeft(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	ids := w.seed(a, 2)
	if err := a.m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	delete(w.hosts, "a")
	w.host("b")
	w.advance(2 * w.cfg.LeaseDuration)
	for _, it := range mustQuery(t, w.table, "s") {
		if strings.HasPrefix(it.Key, "shard#") && len(it.Maps["pend"]) > 0 {
			t.Errorf("%s still holds only pending progress two lease durations after the commit", it.Key)
		}
	}
	deleteInitAndCheckActive(t, w, ids)
}

// A take whose answer was lost and whose read-back failed leaves the host
// unsure whether it won the shard; when it had (the item names it owner),
// the host holds no lease for it. A live host that then asked for the
// shard reserved it: the owner never answered (it answers for leases it
// holds, and gave up only shards it was sure of), no other host takes a
// live host's shard, and the shard was read by no one for as long as both
// lived (found by the simulation, seed 90004365). The owner gives it up
// to the asker.
func TestAHostGivesUpAShardItsTakeWonUnbeknownWhenAskedForIt(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 2)
	w.acquire(a, ids[1])
	w.advance(w.cfg.RenewInterval) // a's view settles: its next round reads nothing
	if ls, err := a.m.Acquire(ctx, ids); err != nil || len(ls) != 0 {
		t.Fatalf("Acquire = %v, %v; want nothing granted yet", ls, err)
	}
	a.table.LoseAnswers(2) // its beat's answer, and its take's
	a.table.FailReads(2)   // the read-back of each
	w.now.Add(int64(w.cfg.RenewInterval))
	a.c.Round()
	info, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Shards[ids[0]].Owner; got != "a" {
		t.Fatalf("after the take whose answer was lost, %s's owner is %q, want a: the test no longer makes the take it means to", ids[0], got)
	}
	if ls, err := a.m.Acquire(ctx, ids); err != nil || len(ls) != 0 {
		t.Fatalf("Acquire = %v, %v; want nothing granted: a does not know its take landed", ls, err)
	}
	b := w.host("b")
	for range 20 {
		ls, err := b.m.Acquire(ctx, ids[:1])
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			return
		}
		if _, err := a.m.Acquire(ctx, ids[1:]); err != nil {
			t.Fatal(err)
		}
		w.advance(w.cfg.RenewInterval)
	}
	info, _ = fleet.Inspect(ctx, w.table, "s")
	t.Fatalf("after 20 rounds b holds no lease on %s (item: %+v): a shard a live host won without knowing it is read by no one", ids[0], info.Shards[ids[0]])
}

// A shard's item deleted by hand while a host holds its lease: the release
// writes it again, unowned at the lease's epoch, with the position the
// host reached, which no other item holds. Dropped with the item, the
// position was lost; and when the identity and init items were deleted
// too, the fleet looked new to the next host, which resolved LATEST at a
// fresh T0 and skipped what the stream received since the first
// (simulation, seed 110105956). Now that host's Join refuses with
// ErrIdentityMissing, naming what to restore.
func TestAReleaseWritesAgainTheItemOfItsShardDeletedByHand(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentifiedWithX(t, a)
	ls := w.acquire(a, "x")
	reached := scan.AfterSequence("4200")
	if err := ls.Commit(ctx, kinesisload.ShardProgress{ShardID: "x", Position: reached}); err != nil {
		t.Fatal(err)
	}
	deleteShardByHand(t, w, "x")
	it, err := w.table.Get(ctx, "s", "init")
	if err != nil || !it.Exists() {
		t.Fatalf("no init item: %v", err)
	}
	if err := w.table.Delete(ctx, "s", "init", it.Version); err != nil {
		t.Fatal(err)
	}
	deleteIdentityByHand(t, w)
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	info, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := info.Shards["x"]
	if !ok {
		t.Fatal("x's item is still missing after the release")
	}
	if !got.Progress.Position.Equal(reached) || got.Progress.State != kinesisload.StateActive || got.Owner != "" || got.Epoch < ls.Epoch() {
		t.Errorf("x's item after the release: %+v, want ACTIVE at %v, no owner, epoch %d or above", got, reached, ls.Epoch())
	}
	if err := joinFresh(t, w); !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("Join of a fleet whose identity, init and shard items were deleted = %v, want ErrIdentityMissing", err)
	}
}

// A take in doubt (its answer and read-back lost) of a shard whose item
// is then deleted by hand: Leave releases the take, and knows no position
// of the shard, so it writes no item for it (an item without a position
// would be read from nowhere).
func TestLeaveWritesNoItemForATakeInDoubtOfAShardDeletedByHand(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	ids := w.seed(a, 2)
	w.acquire(a, ids[1])
	w.advance(w.cfg.RenewInterval)
	if ls, err := a.m.Acquire(ctx, ids); err != nil || len(ls) != 0 {
		t.Fatalf("Acquire = %v, %v; want nothing granted yet", ls, err)
	}
	a.table.LoseAnswers(2) // its beat's answer, and its take's
	a.table.FailReads(2)   // the read-back of each
	w.now.Add(int64(w.cfg.RenewInterval))
	a.c.Round()
	it, err := w.table.Get(ctx, "s", "shard#"+ids[0])
	if err != nil || it.Field("owner") != "a" {
		t.Fatalf("after the take whose answer was lost, %s's item is %+v (%v), want it owned by a: the test no longer makes the take it means to", ids[0], it, err)
	}
	deleteShardByHand(t, w, ids[0])
	_ = a.m.Leave(ctx)
	wantNoShardItem(t, w, ids[0], "Leave")
}

// The release of a lease whose host's fence has passed (its heartbeats did
// not land for the lease's duration: another host may have taken the
// shard and gone further) writes no item for a shard deleted by hand: its
// position may be behind, and its epoch one the other host holds.
func TestAReleasePastTheFenceWritesNoItemForAShardDeletedByHand(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	ids := w.seed(a, 1)
	ls := w.acquire(a, ids[0])
	if err := ls.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], Position: scan.AfterSequence("100")}); err != nil {
		t.Fatal(err)
	}
	a.table.Pause() // no heartbeat lands
	w.now.Add(int64(w.cfg.LeaseDuration))
	a.table.Resume()
	deleteShardByHand(t, w, ids[0])
	_ = ls.Release(ctx)
	wantNoShardItem(t, w, ids[0], "the release past the fence")
}

// An item written again by a release keeps the shard's rewind as the
// lease acknowledged it, not as the take found it: a rewind acknowledged
// for the Sink does not wait for it again (the next owner's Sink would be
// set back to the rewind's position a second time, or Run would stop).
func TestAReleaseWritesAgainTheRewindItAcknowledged(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	ids := w.seed(a, 1)
	if _, err := fleet.Rewind(ctx, w.table, "s", opsRewind("rw1"), map[string]scan.Position{ids[0]: scan.AfterSequence("100")}); err != nil {
		t.Fatal(err)
	}
	ls := w.acquire(a, ids[0])
	if err := ls.(rewindLease).AckRewind(ctx, "rw1"); err != nil {
		t.Fatal(err)
	}
	if err := ls.Commit(ctx, kinesisload.ShardProgress{ShardID: ids[0], Position: scan.AfterSequence("900")}); err != nil {
		t.Fatal(err)
	}
	deleteShardByHand(t, w, ids[0])
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rws, err := fleet.Rewinds(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := rws[ids[0]]
	if !ok || rw.ID != "rw1" || rw.SinkPending {
		t.Errorf("the rewind of the item written again: %+v (found %v), want rw1, acknowledged", rw, ok)
	}
}

// The first initialisation's T0 outlives its init item: the identity item
// keeps it. With the init and shard items deleted by hand, the fleet's
// next initialisation found no T0, took the stream for a new one and
// resolved LATEST at a fresh T0, skipping what arrived since the first
// (simulation, seed 3065314). It now resolves at the first T0 again.
func TestTheFirstT0OutlivesTheInitItemInTheIdentityItem(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	first := start.Add(-time.Minute)
	if err := a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		if _, err := st.(kinesisload.StartStore).SaveStart(ctx, "s", first); err != nil {
			return err
		}
		if err := st.SetIdentity(ctx, "s", kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start.Add(-time.Hour)}); err != nil {
			return err
		}
		return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.AfterSequence("7")}})
	}); err != nil {
		t.Fatal(err)
	}
	deleteShardByHand(t, w, "x")
	it, err := w.table.Get(ctx, "s", "init")
	if err != nil || !it.Exists() {
		t.Fatalf("no init item: %v", err)
	}
	if err := w.table.Delete(ctx, "s", "init", it.Version); err != nil {
		t.Fatal(err)
	}
	b := w.host("b")
	var got time.Time
	var pending bool
	if err := b.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		got, pending, err = st.(kinesisload.StartStore).LoadStart(ctx, "s")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !pending || !got.Equal(first) {
		t.Errorf("the second initialisation's pending T0 = %v (pending %v), want the first's, %v", got, pending, first)
	}
}

// failsIdentityGet fails, once armed, the next Get of the identity item
// with an unknown outcome (a throttled or timed-out read).
type failsIdentityGet struct {
	fleet.Table
	armed atomic.Bool
}

func (t *failsIdentityGet) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if key == "identity" && t.armed.CompareAndSwap(true, false) {
		return fleet.Item{}, fmt.Errorf("%w: the read timed out", fleet.ErrUnknown)
	}
	return t.Table.Get(ctx, partition, key)
}

// An initialisation's commit whose read of the identity item fails once
// still records that the stream was identified: it committed without,
// and once the identity item was deleted by hand a host joining took the
// stream for one never identified (it would store the stream it sees now,
// perhaps one re-created meanwhile, as the fleet's). Found by a review.
func TestACommitWhoseIdentityReadFailedStillSaysIdentified(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ft := &failsIdentityGet{Table: w.table}
	a := w.hostThrough("a", ft)
	if err := a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		if err := st.SetIdentity(ctx, "s", kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:1:stream/s", Created: start}); err != nil {
			return err
		}
		if err := st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.AfterSequence("7")}}); err != nil {
			return err
		}
		ft.armed.Store(true) // the commit's read of the identity item fails
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deleteIdentityByHand(t, w)
	if err := joinFresh(t, w); !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("Join without the identity item of an initialised, identified stream = %v, want ErrIdentityMissing", err)
	}
}

// The identity item, the init item and every shard item deleted by hand
// while a host reads: the host's positions say the fleet read the stream,
// and a host joining does not take it for one never initialised. It
// initialised it afresh at a T0 of its own, the live host lost its lease
// to it, and what arrived between the first T0 and the second was never
// read (found by the simulation, seed 239000561).
func TestJoinRefusesAMissingIdentityWhenOnlyAHostsPositionsShowTheRead(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentifiedWithX(t, a)
	l := w.acquire(a, "x")
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "x", Position: scan.AfterSequence("42")}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval) // a's positions hold x at 42
	deleteIdentityShardAndInit(t, w, "x")
	if err := joinFresh(t, w); !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("Join = %v, want ErrIdentityMissing: host a's positions show the fleet read the stream", err)
	}
}

// A host that joins an initialised fleet runs its start-up on the
// committed batch; if the init item is deleted by hand meanwhile (and the
// only shard's item before it), the store must still say the stream was
// started. It said not: the Loader took the start-up for the stream's
// first, resolved LATEST at a T0 of its own, and what arrived since the
// last position a host committed was never read (found by the
// simulation, seed 248600504).
func TestTheStoreOfACommittedStartUpSaysStartedAfterTheInitItemIsDeleted(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	w.seed(a, 1)
	b := w.host("b")
	var started bool
	err := b.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		it, err := w.table.Get(ctx, "s", "init")
		if err != nil || !it.Exists() {
			t.Fatalf("no init item to delete: %v", err)
		}
		if err := w.table.Delete(ctx, "s", "init", it.Version); err != nil {
			t.Fatal(err)
		}
		ss, ok := st.(kinesisload.StartedStore)
		if !ok {
			t.Fatal("the store of a committed start-up is no StartedStore")
		}
		started, err = ss.Started(ctx, "s")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !started {
		t.Error("Started = false for a fleet whose initialisation this host read committed")
	}
}

// A shard item that only an initialisation not committed wrote (its
// progress pending under that initialisation's token: the init item had
// been deleted by hand, and a second initialisation was killed after
// writing it) holds nothing a host of the committed batch can resume
// from. A host took it nonetheless, and its release wrote the state it
// committed without a position: every Loader that loaded the shard then
// stopped on it ("start position: invalid position"), for ever (found by
// the simulation, seed 8047263). Such an item is invisible, as Load
// skips it: no host takes it.
func TestAnItemOnlyAnUncommittedInitialisationWroteIsNotTaken(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	w.seed(a, 1)
	ctx := context.Background()
	pending := fleet.Item{Partition: "s", Key: "shard#x",
		Fields: map[string]string{"prog": `{"id":"x"}`, "base": "946771900", "epoch": "946771900"},
		Maps:   map[string]map[string]string{"pend": {"0123456789abcdef": `{"id":"x","state":"ACTIVE","pos":"TRIM_HORIZON"}`}}}
	if _, err := w.table.Put(ctx, pending); err != nil {
		t.Fatal(err)
	}
	w.advance(3 * w.cfg.LeaseDuration) // a reads the partition again
	for range 10 {
		ls, err := a.m.Acquire(ctx, []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) > 0 {
			t.Fatalf("a took x at %v: an item pending under an initialisation not committed has no progress to resume from", ls[0].Progress())
		}
		w.advance(w.cfg.RenewInterval)
	}
}

// The same with the reading host's positions deleted by hand too: the
// roster still shows a host that made changes (took a lease), which only
// an initialised fleet grants. Join took the fleet for a new one, and its
// Loader journaled the stream it saw (re-created meanwhile) at a T0 of
// its own: the new stream's records before that T0 were never read
// (found by the simulation, seed 249704821).
func TestJoinRefusesAMissingIdentityWhenOnlyTheRosterShowsTheRead(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	ctx := context.Background()
	a := w.host("a")
	initialiseIdentifiedWithX(t, a)
	l := w.acquire(a, "x")
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "x", Position: scan.AfterSequence("42")}); err != nil {
		t.Fatal(err)
	}
	w.advance(w.cfg.RenewInterval)
	deleteIdentityShardAndInit(t, w, "x")
	for _, it := range mustQuery(t, w.table, "s#pos#a") {
		if err := w.table.Delete(ctx, it.Partition, it.Key, it.Version); err != nil {
			t.Fatal(err)
		}
	}
	if err := joinFresh(t, w); !errors.Is(err, fleet.ErrIdentityMissing) {
		t.Errorf("Join = %v, want ErrIdentityMissing: the roster shows host a made changes", err)
	}
}

// deleteIdentityShardAndInit deletes stream "s"'s identity item, shard's
// item and the init item, as an operator editing the table would.
func deleteIdentityShardAndInit(t *testing.T, w *world, shard string) {
	t.Helper()
	deleteIdentityByHand(t, w)
	deleteShardByHand(t, w, shard)
	ctx := context.Background()
	it, err := w.table.Get(ctx, "s", "init")
	if err != nil || !it.Exists() {
		t.Fatalf("no init item: %v", err)
	}
	if err := w.table.Delete(ctx, "s", "init", it.Version); err != nil {
		t.Fatal(err)
	}
}
