package coordtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Harness is what the conformance suite needs of an implementation: hosts
// that share one table, and time. [*Fleet] is one; [Single] adapts a
// one-process coordinator such as [kinesisload.NewStoreCoordinator].
type Harness interface {
	// Host returns the Coordinator of host id, the same one for every
	// call with id; nil when the implementation has one host only and
	// id is not the first asked for.
	Host(id string) kinesisload.Coordinator
	// Advance makes d pass on every host's clock and returns once every
	// running host has done what that time asks (renewals, expiry,
	// balance).
	Advance(d time.Duration)
	// Timing returns the lease duration and the renew interval.
	Timing() (lease, renew time.Duration)
}

// Faults is what a [Harness] implements when it can make hosts fail; the
// cases that need it are skipped otherwise. See [Fleet.Kill] and the
// others for what each does.
type Faults interface {
	Kill(id string)
	Pause(id string)
	Resume(id string)
	Refuse(id string, n int)
	LoseAnswers(id string, n int)
	Skew(id string, d time.Duration)
}

// Balancing is what a [Harness] implements when its hosts can balance by
// throughput; the case that needs it is skipped otherwise.
type Balancing interface {
	// SetBalanceBy makes the hosts balance by b. [Run] calls it on a
	// fresh Harness, before the first Host.
	SetBalanceBy(b kinesisload.BalanceBy)
}

// Timing implements [Harness].
func (f *Fleet) Timing() (lease, renew time.Duration) {
	return f.cfg.LeaseDuration, f.cfg.RenewInterval
}

type fleetHarness struct{ *Fleet }

func (h fleetHarness) Host(id string) kinesisload.Coordinator { return h.Fleet.Host(id) }

// SetBalanceBy implements [Balancing]: call it before the first Host.
func (h fleetHarness) SetBalanceBy(b kinesisload.BalanceBy) {
	h.Fleet.mu.Lock()
	defer h.Fleet.mu.Unlock()
	h.Fleet.cfg.BalanceBy = b
}

// Harness returns f as a [Harness] (with [Faults] and [Balancing]) for
// [Run].
func (f *Fleet) Harness() Harness { return fleetHarness{f} }

// Single adapts a one-process Coordinator to a [Harness]: one host, time
// that asks nothing of it, no faults.
func Single(c kinesisload.Coordinator) Harness { return &single{c: c} }

type single struct {
	c     kinesisload.Coordinator
	mu    sync.Mutex
	first string
}

func (s *single) Host(id string) kinesisload.Coordinator {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == "" {
		s.first = id
	}
	if id != s.first {
		return nil
	}
	return s.c
}
func (s *single) Advance(time.Duration)                {}
func (s *single) Timing() (lease, renew time.Duration) { return time.Second, time.Second }

const stream = "conformance"

// Run runs the conformance suite: every case on a fresh Harness from
// newHarness. Cases that need several hosts or [Faults] are skipped when
// the Harness has neither.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name  string
		hosts int
		fault bool
		run   func(t *testing.T, h Harness)
		// by is set on the Harness ([Balancing]) before its first host.
		by kinesisload.BalanceBy
	}{
		{"InitialiseOnceAndCommit", 1, false, testInitialiseOnce, kinesisload.BalanceByCount},
		{"CommitMonotone", 1, false, testCommitMonotone, kinesisload.BalanceByCount},
		{"TwoHostsInitialiseAtOnce", 2, false, testTwoInitialise, kinesisload.BalanceByCount},
		{"InitialiseWaitsForALiveHolder", 2, false, testInitWaits, kinesisload.BalanceByCount},
		{"HostDiesMidInitialisation", 2, true, testDiesMidInit, kinesisload.BalanceByCount},
		{"TakeOverKeepsTheFirstStartTime", 2, true, testTakeOverT0, kinesisload.BalanceByCount},
		{"ZombieCommitRefused", 2, true, testZombie, kinesisload.BalanceByCount},
		{"CommitDurableWithinARound", 2, true, testCommitDurableWithinARound, kinesisload.BalanceByCount},
		{"LostAnswerNoDoubleEffect", 1, true, testLostAnswer, kinesisload.BalanceByCount},
		{"SelfFenceBeforeExpiry", 2, true, testSelfFence, kinesisload.BalanceByCount},
		{"ClockSkewChangesNothing", 3, true, testSkew, kinesisload.BalanceByCount},
		{"BalanceJoinLeave", 3, false, testBalance, kinesisload.BalanceByCount},
		{"ChildrenAfterParents", 2, false, testChildren, kinesisload.BalanceByCount},
		{"GracefulHandoffCommitsFirst", 2, false, testHandoff, kinesisload.BalanceByCount},
		{"BalanceByCountIgnoresThroughput", 2, false, testHotByCount, kinesisload.BalanceByCount},
		{"BalanceByThroughputHotShard", 2, false, testHotByThroughput, kinesisload.BalanceByThroughput},
		{"StartOverMovesTheWholeFleet", 3, false, testStartOver, kinesisload.BalanceByCount},
		{"StartOverTwoHostsAtOnce", 2, false, testStartOverTwice, kinesisload.BalanceByCount},
		{"StartOverHostDiesInitialisingTheNewStream", 2, true, testStartOverDies, kinesisload.BalanceByCount},
		{"StartOverNeverBackToAnOlderStream", 2, false, testStartOverOlder, kinesisload.BalanceByCount},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			if c.by != kinesisload.BalanceByCount {
				bh, ok := h.(Balancing)
				if !ok {
					t.Skipf("the harness cannot balance by %v", c.by)
				}
				bh.SetBalanceBy(c.by)
			}
			if c.hosts > 1 && h.Host("a") != nil && h.Host("b") == nil {
				t.Skip("one host only")
			}
			if _, ok := h.(Faults); c.fault && !ok {
				t.Skip("no fault hooks")
			}
			c.run(t, h)
		})
	}
}

// driver plays the Loader on one host: it offers the shards ready in its
// view of the shared progress, keeps the leases it is given, and answers
// a handoff by committing its "batch in flight" and releasing.
type driver struct {
	t    *testing.T
	id   string
	m    kinesisload.Membership
	held map[string]kinesisload.Lease
	// inflight is what the driver commits on a handoff, per shard.
	inflight map[string]kinesisload.ShardProgress
	// bytes is what the driver delivers per step, per shard, and tells
	// the leases that are a [kinesisload.LoadObserver].
	bytes map[string]int64
}

func join(t *testing.T, h Harness, id string) *driver {
	t.Helper()
	m, err := h.Host(id).Join(context.Background(), stream)
	if err != nil {
		t.Fatalf("host %s: Join: %v", id, err)
	}
	d := &driver{t: t, id: id, m: m, held: map[string]kinesisload.Lease{}, inflight: map[string]kinesisload.ShardProgress{}}
	t.Cleanup(func() { _ = d.leave() })
	return d
}

func (d *driver) leave() error {
	if d.m == nil {
		return nil
	}
	m := d.m
	d.m = nil
	clear(d.held)
	return m.Leave(context.Background())
}

// ready is the Loader's rule over the shared progress: not COMPLETED, and
// every known parent COMPLETED.
func ready(p map[string]kinesisload.ShardProgress) []string {
	var out []string
	for id, s := range p {
		if s.State == 0 || s.State == kinesisload.StateCompleted {
			continue
		}
		ok := true
		for _, par := range s.Parents {
			if pp, known := p[par]; known && pp.State != kinesisload.StateCompleted {
				ok = false
			}
		}
		if ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// step does what the Loader does on a wake: answer handoffs, forget lost
// leases, acquire.
func (d *driver) step() {
	d.t.Helper()
	if d.m == nil {
		return
	}
	ctx := context.Background()
	for id, l := range d.held {
		select {
		case <-l.Lost():
			delete(d.held, id)
			continue
		default:
		}
		select {
		case <-l.Handoff():
			if u, ok := d.inflight[id]; ok {
				if err := l.Commit(ctx, u); err != nil {
					d.t.Errorf("host %s: commit of the batch in flight on handoff of %s: %v", d.id, id, err)
				}
			}
			if err := l.Release(ctx); err != nil {
				d.t.Logf("host %s: release of %s: %v (it will expire)", d.id, id, err)
			}
			delete(d.held, id)
		default:
		}
	}
	for id, l := range d.held {
		if o, ok := l.(kinesisload.LoadObserver); ok && d.bytes[id] > 0 {
			o.Observe(d.bytes[id])
		}
	}
	p, err := d.m.Store().Load(ctx, stream)
	if err != nil {
		return // a dead or paused host
	}
	ls, err := d.m.Acquire(ctx, ready(p))
	if err != nil {
		d.t.Fatalf("host %s: Acquire: %v", d.id, err)
	}
	for _, l := range ls {
		if _, dup := d.held[l.Shard()]; dup {
			d.t.Fatalf("host %s: shard %s granted twice", d.id, l.Shard())
		}
		d.held[l.Shard()] = l
	}
}

func (d *driver) shards() []string { return slices.Sorted(maps.Keys(d.held)) }

// run advances time by rounds renew intervals, stepping every driver after
// each, and calls check (if not nil) after each.
func run(h Harness, rounds int, ds []*driver, check func(round int)) {
	_, renew := h.Timing()
	for i := range rounds {
		h.Advance(renew)
		for _, d := range ds {
			d.step()
		}
		if check != nil {
			check(i)
		}
	}
}

// seed returns an InitFunc that saves shards as the batch (when nothing is
// committed) and counts the calls that resolved.
func seed(shards map[string]kinesisload.ShardProgress, resolved *atomic.Int32) kinesisload.InitFunc {
	return func(ctx context.Context, st kinesisload.PositionStore) error {
		got, err := st.Load(ctx, stream)
		if err != nil {
			return err
		}
		if len(got) > 0 {
			return nil
		}
		if resolved != nil {
			resolved.Add(1)
		}
		ups := slices.Collect(maps.Values(shards))
		slices.SortFunc(ups, func(a, b kinesisload.ShardProgress) int { return cmpString(a.ShardID, b.ShardID) })
		return st.Save(ctx, stream, ups)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func active(n int, seq string) map[string]kinesisload.ShardProgress {
	out := map[string]kinesisload.ShardProgress{}
	for i := range n {
		id := fmt.Sprintf("shard-%02d", i)
		out[id] = kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.AfterSequence(seq)}
	}
	return out
}

// initialise runs Initialise on d while time passes, until it returns.
func initialise(t *testing.T, h Harness, d *driver, init kinesisload.InitFunc) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.m.Initialise(context.Background(), init) }()
	return await(t, h, done)
}

// await advances time until done answers; it fails after 10,000 rounds.
func await(t *testing.T, h Harness, done <-chan error) error {
	t.Helper()
	_, renew := h.Timing()
	for range 10000 {
		select {
		case err := <-done:
			return err
		default:
		}
		h.Advance(renew)
		time.Sleep(time.Millisecond)
	}
	t.Fatal("Initialise did not return within 10,000 renew intervals")
	return nil
}

func load(t *testing.T, d *driver) map[string]kinesisload.ShardProgress {
	t.Helper()
	p, err := d.m.Store().Load(context.Background(), stream)
	if err != nil {
		t.Fatalf("host %s: Load: %v", d.id, err)
	}
	return p
}

func positions(p map[string]kinesisload.ShardProgress) map[string]string {
	out := map[string]string{}
	for id, s := range p {
		out[id] = s.Position.String()
	}
	return out
}

func testInitialiseOnce(t *testing.T, h Harness) {
	a := join(t, h, "a")
	var resolved atomic.Int32
	want := active(3, "100")
	if err := initialise(t, h, a, seed(want, &resolved)); err != nil {
		t.Fatalf("Initialise: %v", err)
	}
	if got := load(t, a); !maps.Equal(positions(got), positions(want)) {
		t.Fatalf("after Initialise, Load = %v, want %v", positions(got), positions(want))
	}
	// A later session initialises with what is committed: nothing to do.
	if err := a.leave(); err != nil {
		t.Fatal(err)
	}
	a = join(t, h, "a")
	if err := initialise(t, h, a, seed(active(3, "999"), &resolved)); err != nil {
		t.Fatal(err)
	}
	if n := resolved.Load(); n != 1 {
		t.Errorf("the batch was resolved %d times, want once", n)
	}
	run(h, 3, []*driver{a}, nil)
	if got := a.shards(); len(got) != 3 {
		t.Errorf("the only host holds %v, want all 3 shards", got)
	}
}

func testCommitMonotone(t *testing.T, h Harness) {
	a := join(t, h, "a")
	if err := initialise(t, h, a, seed(active(1, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	run(h, 3, []*driver{a}, nil)
	l := a.held["shard-00"]
	if l == nil {
		t.Fatalf("shard-00 not granted; held %v", a.shards())
	}
	ctx := context.Background()
	for _, seq := range []string{"300", "200"} {
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-00", Position: scan.AfterSequence(seq)}); err != nil {
			t.Fatalf("Commit(%s): %v", seq, err)
		}
	}
	// Released, the lease writes its furthest position where the next
	// owner resumes.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := load(t, a)["shard-00"].Position; !got.Equal(scan.AfterSequence("300")) {
		t.Errorf("after commits of 300 then 200 the position is %v, want AFTER_SEQUENCE_NUMBER 300 (never back)", got)
	}
	delete(a.held, "shard-00")
	run(h, 3, []*driver{a}, nil)
	if l = a.held["shard-00"]; l == nil {
		t.Fatalf("shard-00 not granted again; held %v", a.shards())
	}
	if got := l.Progress().Position; got.Kind != 0 && !got.Equal(scan.AfterSequence("300")) {
		t.Errorf("granted again at %v, want AFTER_SEQUENCE_NUMBER 300 (or nothing known: the Loader's view)", got)
	}
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-00", State: kinesisload.StateCompleted, Position: scan.ShardEnd()}); err != nil {
		t.Fatal(err)
	}
	if got := load(t, a)["shard-00"].State; got != kinesisload.StateCompleted {
		t.Errorf("state after committing COMPLETED = %v", got)
	}
}

func testTwoInitialise(t *testing.T, h Harness) {
	a, b := join(t, h, "a"), join(t, h, "b")
	var resolved atomic.Int32
	da, db := make(chan error, 1), make(chan error, 1)
	go func() { da <- a.m.Initialise(context.Background(), seed(active(4, "111"), &resolved)) }()
	go func() { db <- b.m.Initialise(context.Background(), seed(active(4, "222"), &resolved)) }()
	if err := await(t, h, da); err != nil {
		t.Fatalf("a: Initialise: %v", err)
	}
	if err := await(t, h, db); err != nil {
		t.Fatalf("b: Initialise: %v", err)
	}
	if n := resolved.Load(); n != 1 {
		t.Fatalf("%d hosts resolved the batch, want exactly one", n)
	}
	pa, pb := positions(load(t, a)), positions(load(t, b))
	if !maps.Equal(pa, pb) || len(pa) != 4 {
		t.Fatalf("the hosts see different positions: a %v, b %v", pa, pb)
	}
}

// A host that calls Initialise while another host, alive, holds the
// initialisation lock waits for its commit, even before it has observed
// that host's heartbeat move: a host never seen is not a dead host, it is
// one whose lease duration starts at its first sighting.
func testInitWaits(t *testing.T, h Harness) {
	a, b := join(t, h, "a"), join(t, h, "b")
	var resolved atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	da := make(chan error, 1)
	go func() {
		da <- a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
			close(entered)
			<-release
			return seed(active(2, "111"), &resolved)(ctx, st)
		})
	}()
	<-entered // a holds the lock; no time has passed, b has seen nothing of a
	db := make(chan error, 1)
	go func() { db <- b.m.Initialise(context.Background(), seed(active(2, "222"), &resolved)) }()
	_, renew := h.Timing()
	for range 2 { // less than a lease duration: a is alive throughout
		select {
		case err := <-db:
			t.Fatalf("b's Initialise returned (%v) while a, alive, held the lock", err)
		default:
		}
		h.Advance(renew)
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := await(t, h, da); err != nil {
		t.Fatalf("a: Initialise: %v", err)
	}
	if err := await(t, h, db); err != nil {
		t.Fatalf("b: Initialise: %v", err)
	}
	if n := resolved.Load(); n != 1 {
		t.Fatalf("%d hosts resolved the batch, want exactly one", n)
	}
	for id, pos := range positions(load(t, b)) {
		if pos != scan.AfterSequence("111").String() {
			t.Errorf("shard %s at %s, want a's batch (111)", id, pos)
		}
	}
}

func testDiesMidInit(t *testing.T, h Harness) {
	a, b := join(t, h, "a"), join(t, h, "b")
	diesMidInit(t, h, a, b, func(resolved *atomic.Int32) kinesisload.InitFunc { return seed(active(2, "222"), resolved) })
}

// diesMidInit makes host a die half-way through an initialisation (its
// batch at 111 written, not committed): nothing of it is visible to b,
// which then initialises with the batch at 222 from takeover, resolved
// by b itself, while a's Initialise fails.
func diesMidInit(t *testing.T, h Harness, a, b *driver, takeover func(resolved *atomic.Int32) kinesisload.InitFunc) {
	t.Helper()
	f := h.(Faults)
	entered, release := make(chan struct{}), make(chan struct{})
	da := make(chan error, 1)
	go func() {
		da <- a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
			// The whole batch is written, then the host dies before
			// its commit.
			if err := st.Save(ctx, stream, slices.Collect(maps.Values(active(2, "111")))); err != nil {
				return err
			}
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	f.Kill("a")
	if got := load(t, b); len(got) != 0 {
		t.Fatalf("a half-done initialisation (or an earlier stream's progress) is visible: %v", positions(got))
	}
	var resolved atomic.Int32
	if err := initialise(t, h, b, takeover(&resolved)); err != nil {
		t.Fatalf("b: Initialise after a died: %v", err)
	}
	close(release)
	if err := <-da; err == nil {
		t.Errorf("the dead host's Initialise returned nil")
	}
	if resolved.Load() != 1 {
		t.Errorf("b did not resolve the batch itself (resolved %d)", resolved.Load())
	}
	for id, pos := range positions(load(t, b)) {
		if pos != scan.AfterSequence("222").String() {
			t.Errorf("shard %s at %s, want b's batch (222): the dead host's pending batch (or older progress) became visible", id, pos)
		}
	}
}

// testTakeOverT0: the lock holder saves T0 and dies before its commit;
// the host that takes the initialisation over finds that T0 (also after a
// failed attempt of its own) and cannot replace it, so that it resolves
// LATEST where the first start-up would have: records put between the
// two start-ups are delivered, not taken for "before the start".
func testTakeOverT0(t *testing.T, h Harness) {
	f := h.(Faults)
	a, b := join(t, h, "a"), join(t, h, "b")
	t0 := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	later := t0.Add(10 * time.Minute)
	startStore := func(st kinesisload.PositionStore) (kinesisload.StartStore, error) {
		ss, ok := st.(kinesisload.StartStore)
		if !ok {
			return nil, fmt.Errorf("the store of the initialisation lock's holder (%T) is not a kinesisload.StartStore", st)
		}
		return ss, nil
	}
	entered, release := make(chan struct{}), make(chan struct{})
	da := make(chan error, 1)
	go func() {
		da <- a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
			defer close(entered)
			ss, err := startStore(st)
			if err != nil {
				return err
			}
			if got, ok, err := ss.LoadStart(ctx, stream); err != nil || ok {
				return fmt.Errorf("a: LoadStart before any start-up = %v, %v, %v; want none pending", got, ok, err)
			}
			if got, err := ss.SaveStart(ctx, stream, t0); err != nil || !got.Equal(t0) {
				return fmt.Errorf("a: SaveStart(%v) = %v, %v", t0, got, err)
			}
			// T0 is saved; the host dies before it resolves and commits.
			entered <- struct{}{}
			<-release
			return nil
		})
	}()
	select {
	case <-entered:
	case err := <-da:
		t.Fatalf("a: Initialise: %v", err)
	}
	f.Kill("a")
	// b's first attempt fails after reading T0 (a transient failure of
	// its resolution); its second one commits.
	var first, second time.Time
	attempt := 0
	err := initialise(t, h, b, func(ctx context.Context, st kinesisload.PositionStore) error {
		attempt++
		ss, err := startStore(st)
		if err != nil {
			return err
		}
		got, ok, err := ss.LoadStart(ctx, stream)
		if err != nil || !ok {
			return fmt.Errorf("b: LoadStart after a died = %v, %v, %v; want a's %v", got, ok, err, t0)
		}
		first = got
		return errors.New("b: resolution failed (transient)")
	})
	if err == nil || attempt != 1 || first.IsZero() {
		t.Fatalf("b: the failing first attempt returned %v after %d calls", err, attempt)
	}
	if err := initialise(t, h, b, func(ctx context.Context, st kinesisload.PositionStore) error {
		if attempt != 1 {
			return nil
		}
		ss, err := startStore(st)
		if err != nil {
			return err
		}
		attempt++
		got, ok, err := ss.LoadStart(ctx, stream)
		if err != nil || !ok {
			return fmt.Errorf("b: LoadStart after its failed attempt = %v, %v, %v; want a's %v", got, ok, err, t0)
		}
		second = got
		if kept, err := ss.SaveStart(ctx, stream, later); err != nil || !kept.Equal(t0) {
			return fmt.Errorf("b: SaveStart(%v) over a's T0 = %v, %v; want a's %v kept", later, kept, err, t0)
		}
		if err := ss.ClearStart(ctx, stream); err != nil {
			return fmt.Errorf("b: ClearStart: %w", err)
		}
		return st.Save(ctx, stream, slices.Collect(maps.Values(active(2, "222"))))
	}); err != nil {
		t.Fatalf("b: Initialise after a died: %v", err)
	}
	close(release)
	<-da
	if !first.Equal(t0) || !second.Equal(t0) {
		t.Errorf("b resolved at %v, then %v; want a's first T0 %v both times", first, second, t0)
	}
	if got := positions(load(t, b)); len(got) != 2 {
		t.Errorf("b's batch is not visible after its commit: %v", got)
	}
	// Once committed, a later start-up (a widened selection) takes its
	// own T0: no store it is given still holds the first one.
	if err := initialise(t, h, b, func(ctx context.Context, st kinesisload.PositionStore) error {
		if ss, ok := st.(kinesisload.StartStore); ok {
			if got, ok, err := ss.LoadStart(ctx, stream); err != nil || ok {
				return fmt.Errorf("after the commit: LoadStart = %v, %v, %v; want none pending", got, ok, err)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("b: Initialise after the commit: %v", err)
	}
}

// holdAll initialises n shards and lets host a take them all.
func holdAll(t *testing.T, h Harness, n int) *driver {
	t.Helper()
	a := join(t, h, "a")
	if err := initialise(t, h, a, seed(active(n, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	run(h, 3, []*driver{a}, nil)
	if len(a.held) != n {
		t.Fatalf("host a holds %v, want all %d shards", a.shards(), n)
	}
	for id, l := range a.held {
		if got := l.Acquired(); got != kinesisload.AcquireInitial {
			t.Errorf("%s: the first lease of a shard never owned was acquired as %v, want %v", id, got, kinesisload.AcquireInitial)
		}
		if err := l.Err(); err != nil {
			t.Errorf("%s: Err() = %v on a lease held", id, err)
		}
	}
	return a
}

func testZombie(t *testing.T, h Harness) {
	f := h.(Faults)
	lease, renew := h.Timing()
	a := holdAll(t, h, 2)
	b := join(t, h, "b")
	run(h, 2, []*driver{a, b}, nil)
	var zl kinesisload.Lease
	for _, l := range a.held {
		zl = l
		break
	}
	shard := zl.Shard()
	f.Pause("a")
	run(h, int(2*lease/renew)+2, []*driver{b}, nil)
	bl := b.held[shard]
	if bl == nil {
		t.Fatalf("b did not take %s from the paused host (b holds %v)", shard, b.shards())
	}
	if bl.Epoch() <= zl.Epoch() {
		t.Errorf("b's epoch %d is not above the zombie's %d", bl.Epoch(), zl.Epoch())
	}
	if got := bl.Acquired(); got != kinesisload.AcquireExpired {
		t.Errorf("b took %s from a paused host as %v, want %v", shard, got, kinesisload.AcquireExpired)
	}
	if err := bl.Commit(context.Background(), kinesisload.ShardProgress{ShardID: shard, Position: scan.AfterSequence("500")}); err != nil {
		t.Fatal(err)
	}
	f.Resume("a")
	err := zl.Commit(context.Background(), kinesisload.ShardProgress{ShardID: shard, Position: scan.AfterSequence("900")})
	if !errors.Is(err, kinesisload.ErrLeaseLost) {
		t.Fatalf("the zombie's Commit = %v, want ErrLeaseLost", err)
	}
	var lle *kinesisload.LeaseLostError
	if !errors.As(err, &lle) || lle.Shard != shard {
		t.Errorf("the error %v is not a *LeaseLostError naming %s", err, shard)
	}
	select {
	case <-zl.Lost():
	default:
		t.Error("the zombie's lease is not Lost after its refused commit")
	}
	// Whether the zombie saw first that it could not have renewed, or the
	// table's new owner, it says so; never "released" or nothing.
	var why *kinesisload.LeaseLostError
	if !errors.As(zl.Err(), &why) {
		t.Errorf("the zombie's Err() = %v, want a *LeaseLostError", zl.Err())
	} else if w := why.Why; w != kinesisload.LostSelfFenced && w != kinesisload.LostCommitRefused && w != kinesisload.LostExpired {
		t.Errorf("the zombie's lease was lost as %v, want self_fenced, commit_refused or expired", w)
	}
	if err := bl.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := load(t, b)[shard].Position; !got.Equal(scan.AfterSequence("500")) {
		t.Errorf("position of %s = %v, want b's 500: the zombie wrote", shard, got)
	}
}

// A position committed is durable within a round: the host dies after
// one, and the host that takes its shard resumes from it (the item holds
// only its lease's start: the position is with the dead host's heartbeat).
func testCommitDurableWithinARound(t *testing.T, h Harness) {
	f := h.(Faults)
	lease, renew := h.Timing()
	a := holdAll(t, h, 1)
	l := a.held["shard-00"]
	if err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: "shard-00", Position: scan.AfterSequence("300")}); err != nil {
		t.Fatal(err)
	}
	run(h, 1, []*driver{a}, nil)
	f.Kill("a")
	b := join(t, h, "b")
	run(h, int(3*lease/renew), []*driver{b}, nil)
	bl := b.held["shard-00"]
	if bl == nil {
		t.Fatalf("b did not take shard-00 from the dead host (b holds %v)", b.shards())
	}
	if got := bl.Progress().Position; !got.Equal(scan.AfterSequence("300")) {
		t.Errorf("b resumes at %v, want the dead host's AFTER_SEQUENCE_NUMBER 300, committed a round before it died", got)
	}
	if got := bl.Acquired(); got != kinesisload.AcquireExpired {
		t.Errorf("b took shard-00 as %v, want %v", got, kinesisload.AcquireExpired)
	}
}

func testLostAnswer(t *testing.T, h Harness) {
	f := h.(Faults)
	first := join(t, h, "first")
	if err := initialise(t, h, first, seed(active(1, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10 && first.held["shard-00"] == nil; i++ {
		run(h, 1, []*driver{first}, nil)
	}
	if first.held["shard-00"] == nil {
		t.Fatalf("host first took no lease; held %v", first.shards())
	}
	before := first.held["shard-00"].Epoch()
	if err := first.leave(); err != nil {
		t.Fatal(err)
	}
	// The next take's answer is lost: re-read, granted once, epoch moved
	// once. Every write's answer is lost until the lease is granted, so
	// the take's is (the heartbeats' before it too). a's clock is set
	// before 2000, so that a take moves the epoch by one, not to a floor
	// of the clock (the fleet core's takes do: epochs are tokens).
	f.Skew("a", -40*365*24*time.Hour)
	a := join(t, h, "a")
	f.LoseAnswers("a", 1<<30)
	for i := 0; i < 10 && a.held["shard-00"] == nil; i++ {
		run(h, 1, []*driver{a}, nil)
	}
	f.LoseAnswers("a", 0)
	l := a.held["shard-00"]
	if l == nil {
		t.Fatalf("no lease after a lost answer; held %v", a.shards())
	}
	if l.Epoch() != before+1 {
		t.Errorf("epoch after one take whose answer was lost = %d, want %d (one above the previous owner's: taken once)", l.Epoch(), before+1)
	}
	// The writes of the commits (and of the heartbeats) lose their
	// answers, or are refused twice: read back, retried.
	f.LoseAnswers("a", 1)
	if err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: "shard-00", Position: scan.AfterSequence("200")}); err != nil {
		t.Fatalf("Commit whose write's answer is lost = %v, want nil", err)
	}
	run(h, 1, []*driver{a}, nil)
	f.Refuse("a", 2)
	if err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: "shard-00", Position: scan.AfterSequence("300")}); err != nil {
		t.Fatalf("Commit whose write is refused twice = %v", err)
	}
	run(h, 5, []*driver{a}, nil)
	if got := a.held["shard-00"]; got != l {
		t.Errorf("the lease changed after lost answers (epoch %d)", l.Epoch())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := load(t, a)["shard-00"].Position; !got.Equal(scan.AfterSequence("300")) {
		t.Errorf("position = %v, want 300", got)
	}
}

func testSelfFence(t *testing.T, h Harness) {
	f := h.(Faults)
	lease, renew := h.Timing()
	a := holdAll(t, h, 3)
	b := join(t, h, "b")
	run(h, 2, []*driver{a, b}, nil)
	mine := map[string]kinesisload.Lease{}
	maps.Copy(mine, a.held)
	f.Refuse("a", 1<<30) // every write of a fails from now on
	lostAt, takenAt := map[string]int{}, map[string]int{}
	run(h, int(3*lease/renew), []*driver{a, b}, func(round int) {
		for id, l := range mine {
			select {
			case <-l.Lost():
				if _, ok := lostAt[id]; !ok {
					lostAt[id] = round + 1
				}
			default:
			}
			if _, ok := b.held[id]; ok {
				if _, ok := takenAt[id]; !ok {
					takenAt[id] = round + 1
				}
			}
		}
	})
	for id := range mine {
		switch {
		case takenAt[id] == 0 && lostAt[id] == 0:
			t.Errorf("%s: neither fenced on a nor taken by b", id)
		case lostAt[id] >= takenAt[id]:
			t.Errorf("%s: b took it at round %d, a fenced itself only at round %d", id, takenAt[id], lostAt[id])
		}
		select {
		case <-mine[id].Handoff():
			continue // b asked for it first: a released it (or tried to)
		default:
		}
		var why *kinesisload.LeaseLostError
		if !errors.As(mine[id].Err(), &why) || why.Why != kinesisload.LostSelfFenced {
			t.Errorf("%s: a host that could not renew lost its lease with Err() = %v, want Why %v", id, mine[id].Err(), kinesisload.LostSelfFenced)
		}
		if l := b.held[id]; l != nil && l.Acquired() != kinesisload.AcquireExpired {
			t.Errorf("%s: b took it from a fenced host as %v, want %v", id, l.Acquired(), kinesisload.AcquireExpired)
		}
	}
}

func testSkew(t *testing.T, h Harness) {
	f := h.(Faults)
	lease, renew := h.Timing()
	f.Skew("a", 10*time.Minute)
	f.Skew("b", -10*time.Minute)
	a := holdAll(t, h, 9)
	b, c := join(t, h, "b"), join(t, h, "c")
	ds := []*driver{a, b, c}
	run(h, int(6*lease/renew), ds, nil)
	epochs := map[string]uint64{}
	for _, d := range ds {
		if n := len(d.held); n != 3 {
			t.Errorf("host %s holds %d of 9 shards with skewed clocks, want 3", d.id, n)
		}
		for id, l := range d.held {
			epochs[id] = l.Epoch()
		}
	}
	// Healthy hosts with clocks 20 minutes apart: no lease moves.
	run(h, int(5*lease/renew), ds, nil)
	for _, d := range ds {
		for id, l := range d.held {
			if epochs[id] != l.Epoch() {
				t.Errorf("%s moved (epoch %d to %d) between healthy hosts with skewed clocks", id, epochs[id], l.Epoch())
			}
		}
	}
	f.Kill("b")
	run(h, int(3*lease/renew), []*driver{a, c}, nil)
	if n := len(a.held) + len(c.held); n != 9 {
		t.Errorf("after b died a and c hold %d of 9 shards", n)
	}
}

// fair checks that every driver holds within one shard of n/len(ds).
func fair(t *testing.T, n int, ds []*driver, when string) {
	t.Helper()
	share := float64(n) / float64(len(ds))
	total := 0
	for _, d := range ds {
		total += len(d.held)
		if got := float64(len(d.held)); got < share-1 || got > share+1 {
			t.Errorf("%s: host %s holds %d shards, fair share is %.2f", when, d.id, len(d.held), share)
		}
	}
	if total != n {
		t.Errorf("%s: %d of %d shards held", when, total, n)
	}
}

func testBalance(t *testing.T, h Harness) {
	lease, renew := h.Timing()
	rounds := int(6 * lease / renew)
	a := holdAll(t, h, 10)
	b := join(t, h, "b")
	run(h, rounds, []*driver{a, b}, nil)
	fair(t, 10, []*driver{a, b}, "after b joined")
	c := join(t, h, "c")
	run(h, rounds, []*driver{a, b, c}, nil)
	fair(t, 10, []*driver{a, b, c}, "after c joined")
	if err := c.leave(); err != nil {
		t.Fatal(err)
	}
	run(h, rounds, []*driver{a, b}, nil)
	fair(t, 10, []*driver{a, b}, "after c left")
}

func testChildren(t *testing.T, h Harness) {
	ctx := context.Background()
	a := join(t, h, "a")
	shards := map[string]kinesisload.ShardProgress{
		"p1":    {ShardID: "p1", State: kinesisload.StateActive, Position: scan.AfterSequence("1")},
		"p2":    {ShardID: "p2", State: kinesisload.StateActive, Position: scan.AfterSequence("1")},
		"child": {ShardID: "child", Parents: []string{"p1", "p2"}, State: kinesisload.StatePendingParent, Position: scan.TrimHorizon()},
	}
	if err := initialise(t, h, a, seed(shards, nil)); err != nil {
		t.Fatal(err)
	}
	ds := []*driver{a}
	if h.Host("b") != nil {
		b := join(t, h, "b")
		if err := initialise(t, h, b, seed(shards, nil)); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, b)
	}
	holder := func(id string) kinesisload.Lease {
		for _, d := range ds {
			if l := d.held[id]; l != nil {
				return l
			}
		}
		return nil
	}
	noChild := func(round int) {
		if holder("child") != nil {
			t.Fatalf("round %d: the child is granted before both parents are COMPLETED", round)
		}
	}
	lease, renew := h.Timing()
	run(h, int(3*lease/renew), ds, noChild)
	for _, p := range []string{"p1", "p2"} {
		l := holder(p)
		if l == nil {
			t.Fatalf("parent %s is not granted to any host", p)
		}
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: p, State: kinesisload.StateCompleted, Position: scan.ShardEnd()}); err != nil {
			t.Fatal(err)
		}
		if p == "p2" {
			continue // p2's host keeps its lease: the child must not wait for it
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if p == "p1" {
			run(h, int(2*lease/renew), ds, noChild)
		}
	}
	run(h, int(2*lease/renew), ds, nil)
	if holder("child") == nil {
		t.Fatal("the child is not granted after both parents are COMPLETED")
	}
}

func testHandoff(t *testing.T, h Harness) {
	lease, renew := h.Timing()
	a := holdAll(t, h, 4)
	before := maps.Clone(a.held)
	for id := range a.held {
		a.inflight[id] = kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence("777")}
	}
	b := join(t, h, "b")
	run(h, int(6*lease/renew), []*driver{a, b}, nil)
	fair(t, 4, []*driver{a, b}, "after b joined")
	for id, l := range b.held {
		if got := l.Progress().Position; !got.Equal(scan.AfterSequence("777")) {
			t.Errorf("b resumed %s at %v, want the batch a had in flight committed (777)", id, got)
		}
		if old := before[id]; old != nil {
			select {
			case <-old.Handoff():
			default:
				t.Errorf("%s moved to b without a handoff asked of a", id)
			}
			if l.Epoch() <= old.Epoch() {
				t.Errorf("%s: epoch %d after the handoff, not above a's %d", id, l.Epoch(), old.Epoch())
			}
			if got := l.Acquired(); got != kinesisload.AcquireHandoff {
				t.Errorf("%s: b was handed it over, acquired as %v, want %v", id, got, kinesisload.AcquireHandoff)
			}
			var why *kinesisload.LeaseLostError
			if !errors.As(old.Err(), &why) || why.Why != kinesisload.LostReleased {
				t.Errorf("%s: a's lease after its release: Err() = %v, want Why %v", id, old.Err(), kinesisload.LostReleased)
			}
		}
	}
}

// hot runs the hot-shard case: host a holds 4 shards, shard-00 carries
// 64 MiB a round and the others nothing, host b joins; it returns the
// two drivers once the fleet had 6 lease durations to balance, after
// checking that no lease moved over 3 more.
func hot(t *testing.T, h Harness) (a, b *driver) {
	lease, renew := h.Timing()
	rounds := int(6 * lease / renew)
	a = holdAll(t, h, 4)
	load := map[string]int64{"shard-00": 64 << 20}
	a.bytes = load
	run(h, 5, []*driver{a}, nil)
	b = join(t, h, "b")
	b.bytes = load
	ds := []*driver{a, b}
	run(h, rounds, ds, nil)
	owners := func() map[string]string {
		out := map[string]string{}
		for _, d := range ds {
			for id, l := range d.held {
				out[id] = fmt.Sprintf("%s@%d", d.id, l.Epoch())
			}
		}
		return out
	}
	before := owners()
	if len(before) != 4 {
		t.Fatalf("%d of 4 shards held: %v", len(before), before)
	}
	run(h, int(3*lease/renew), ds, nil)
	if after := owners(); !maps.Equal(before, after) {
		t.Errorf("leases moved after the fleet had balanced: %v, then %v", before, after)
	}
	return a, b
}

func testHotByCount(t *testing.T, h Harness) {
	a, b := hot(t, h)
	if len(a.held) != 2 || len(b.held) != 2 {
		t.Errorf("by count: host a holds %v, host b %v; want 2 each whatever the bytes", a.shards(), b.shards())
	}
}

func testHotByThroughput(t *testing.T, h Harness) {
	a, b := hot(t, h) // Run set BalanceByThroughput

	hotOwner, other := a, b
	if b.held["shard-00"] != nil {
		hotOwner, other = b, a
	}
	if hotOwner.held["shard-00"] == nil {
		t.Fatalf("nobody holds the hot shard-00: a %v, b %v", a.shards(), b.shards())
	}
	if len(hotOwner.held) >= len(other.held) {
		t.Errorf("by throughput: host %s holds the hot shard-00 and %v, host %s holds %v; want the hot shard's owner to hold fewer",
			hotOwner.id, hotOwner.shards(), other.id, other.shards())
	}
}

// The identities of a stream and of the stream re-created under its name.
var (
	oldStream = kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:eu-west-1:123456789012:stream/" + stream, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	newStream = kinesisload.StreamIdentity{ARN: oldStream.ARN, Created: oldStream.Created.Add(time.Hour)}
)

// seedAs is seed that journals the stream's identity first, as the Loader
// does: SetIdentity when none is stored; a mismatch is returned.
func seedAs(id kinesisload.StreamIdentity, shards map[string]kinesisload.ShardProgress, resolved *atomic.Int32) kinesisload.InitFunc {
	return func(ctx context.Context, st kinesisload.PositionStore) error {
		stored, err := st.Identity(ctx, stream)
		switch {
		case err != nil:
			return err
		case stored.IsZero():
			if err := st.SetIdentity(ctx, stream, id); err != nil {
				return err
			}
		case !stored.Equal(id):
			return &kinesisload.StreamMismatchError{Stream: stream, Stored: stored, Current: id}
		}
		return seed(shards, resolved)(ctx, st)
	}
}

// startOver is what the Loader does in a session that meets the new
// stream with StreamRecreatedStartOver: StartOver on its store. A fleet
// moves to a new generation and returns an error wrapping a
// *StreamMismatchError (the session is void; the Loader joins again).
func startOver(t *testing.T, d *driver, id kinesisload.StreamIdentity) {
	t.Helper()
	err := d.m.Store().StartOver(context.Background(), stream, id)
	var mm *kinesisload.StreamMismatchError
	if !errors.As(err, &mm) || !mm.Current.Equal(id) {
		t.Fatalf("host %s: StartOver(%s) = %v, want an error wrapping a *StreamMismatchError whose Current is the new stream (the session's generation is over)", d.id, id, err)
	}
}

// rejoin ends d's session and starts the next one, as the Loader does
// after a *StreamMismatchError with StreamRecreatedStartOver.
func rejoin(t *testing.T, h Harness, d *driver) *driver {
	t.Helper()
	if err := d.leave(); err != nil {
		t.Logf("host %s: Leave of the void session: %v", d.id, err)
	}
	return join(t, h, d.id)
}

// A start-over by one host moves every host: the leases of the old
// generation are lost (LostStartedOver) and its commits refused, Acquire
// and Initialise of every old session return the mismatch, a new session
// sees the new stream's identity and no progress until the new stream's
// initialisation, which one host makes, once, through the lock; the old
// progress is never applied to the new stream.
func testStartOver(t *testing.T, h Harness) {
	a := join(t, h, "a")
	if err := initialise(t, h, a, seedAs(oldStream, active(4, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	b := join(t, h, "b")
	if err := initialise(t, h, b, seedAs(oldStream, active(4, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	c := join(t, h, "c") // joined, not initialised yet when the fleet moves
	run(h, 10, []*driver{a, b}, nil)
	old := map[string]kinesisload.Lease{}
	maps.Copy(old, a.held)
	maps.Copy(old, b.held)
	if len(old) != 4 {
		t.Fatalf("a and b hold %v and %v, want the 4 shards between them", a.shards(), b.shards())
	}

	startOver(t, b, newStream)
	ctx := context.Background()
	// A commit of the old generation racing with the start-over (a has
	// not seen it yet): refused, or landed in the old generation, never
	// in the new one (checked below: the new stream's shards hold its
	// batch only).
	for id, l := range a.held {
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence("800")}); err != nil && !errors.Is(err, kinesisload.ErrLeaseLost) {
			t.Errorf("%s: a commit of the old generation racing with the start-over = %v, want nil or ErrLeaseLost", id, err)
		}
	}
	run(h, 2, nil, nil)
	for id, l := range old {
		select {
		case <-l.Lost():
		default:
			t.Errorf("%s: the lease of the old generation is not lost two rounds after the start-over", id)
			continue
		}
		var why *kinesisload.LeaseLostError
		if !errors.As(l.Err(), &why) || why.Why != kinesisload.LostStartedOver {
			t.Errorf("%s: the old generation's lease was lost with Err() = %v, want Why %v", id, l.Err(), kinesisload.LostStartedOver)
		}
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence("900")}); !errors.Is(err, kinesisload.ErrLeaseLost) {
			t.Errorf("%s: a commit under the old generation's lease = %v, want ErrLeaseLost", id, err)
		}
	}
	for _, d := range []*driver{a, b} {
		if _, err := d.m.Acquire(ctx, ready(active(4, "100"))); !errors.Is(err, kinesisload.ErrStreamMismatch) {
			t.Errorf("host %s: Acquire in the old generation = %v, want an error wrapping ErrStreamMismatch", d.id, err)
		}
	}
	called := false
	err := initialise(t, h, c, func(ctx context.Context, st kinesisload.PositionStore) error {
		called = true
		return seedAs(newStream, active(4, "555"), nil)(ctx, st)
	})
	if !errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Errorf("host c: Initialise of a session of the old generation = %v, want an error wrapping ErrStreamMismatch", err)
	}
	if called && err == nil {
		t.Error("host c initialised the old generation after the fleet moved")
	}
	// A host that meets the new stream after the move: nothing to do.
	startOver(t, a, newStream)

	// The next sessions: the new stream, no progress, one initialisation.
	a, b, c = rejoin(t, h, a), rejoin(t, h, b), rejoin(t, h, c)
	for _, d := range []*driver{a, b, c} {
		id, err := d.m.Store().Identity(ctx, stream)
		if err != nil || !id.Equal(newStream) {
			t.Errorf("host %s: the new session's Identity = %v, %v, want %s", d.id, id, err, newStream)
		}
		if got := load(t, d); len(got) != 0 {
			t.Errorf("host %s: before the new stream is initialised, Load = %v, want nothing (the old progress is archived)", d.id, positions(got))
		}
	}
	var resolved atomic.Int32
	done := map[string]chan error{}
	for i, d := range []*driver{a, b, c} {
		ch := make(chan error, 1)
		done[d.id] = ch
		seq := fmt.Sprintf("7%d", i)
		go func() { ch <- d.m.Initialise(context.Background(), seedAs(newStream, active(3, seq), &resolved)) }()
	}
	var first string
	for _, d := range []*driver{a, b, c} {
		if err := await(t, h, done[d.id]); err != nil {
			t.Fatalf("host %s: Initialise of the new stream: %v", d.id, err)
		}
	}
	if n := resolved.Load(); n != 1 {
		t.Fatalf("%d hosts resolved the new stream's batch, want exactly one", n)
	}
	for _, d := range []*driver{a, b, c} {
		p := positions(load(t, d))
		if len(p) != 3 {
			t.Errorf("host %s sees %v, want the new stream's 3 shards only", d.id, p)
		}
		for id, pos := range p {
			if first == "" {
				first = pos
			}
			if pos != first || pos == scan.AfterSequence("100").String() {
				t.Errorf("host %s: shard %s at %s: not the one batch of the new stream", d.id, id, pos)
			}
		}
	}
	run(h, 10, []*driver{a, b, c}, nil)
	for _, d := range []*driver{a, b, c} {
		if len(d.held) != 1 {
			t.Errorf("host %s holds %v of the new stream's 3 shards, want 1", d.id, d.shards())
		}
		for id, l := range d.held {
			if l.Acquired() != kinesisload.AcquireInitial {
				t.Errorf("%s of the new stream acquired as %v, want %v (a shard never owned)", id, l.Acquired(), kinesisload.AcquireInitial)
			}
			// The epoch grows with every owner change, across
			// generations too: a TransactionalSink that stored a batch
			// of the old generation under its epoch must refuse the old
			// owner's late batches and take the new owner's.
			if was, ok := old[id]; ok && l.Epoch() <= was.Epoch() {
				t.Errorf("%s of the new stream leased at epoch %d, not above the old generation's %d: a Sink fencing by epoch would take a late batch of the old owner over the new one's", id, l.Epoch(), was.Epoch())
			}
			if p := l.Progress().Position.String(); p != first {
				t.Errorf("%s of the new stream granted at %s, want its initialised %s", id, p, first)
			}
		}
	}
}

// Two hosts that meet the new stream at once start the fleet over once:
// both sessions are void, and the next sessions see one new generation.
func testStartOverTwice(t *testing.T, h Harness) {
	a := join(t, h, "a")
	if err := initialise(t, h, a, seedAs(oldStream, active(2, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	b := join(t, h, "b")
	if err := initialise(t, h, b, seedAs(oldStream, active(2, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	run(h, 5, []*driver{a, b}, nil)
	errs := make(chan error, 2)
	for _, d := range []*driver{a, b} {
		go func() { errs <- d.m.Store().StartOver(context.Background(), stream, newStream) }()
	}
	for range 2 {
		var mm *kinesisload.StreamMismatchError
		if err := <-errs; !errors.As(err, &mm) || !mm.Current.Equal(newStream) {
			t.Errorf("StartOver at once = %v, want an error wrapping a *StreamMismatchError naming the new stream", err)
		}
	}
	// A third start-over, by a host of the new generation that still sees
	// the new stream, changes nothing.
	a, b = rejoin(t, h, a), rejoin(t, h, b)
	if err := a.m.Store().StartOver(context.Background(), stream, newStream); err != nil {
		t.Errorf("StartOver to the identity in force = %v, want nil (nothing to do)", err)
	}
	for _, d := range []*driver{a, b} {
		if id, err := d.m.Store().Identity(context.Background(), stream); err != nil || !id.Equal(newStream) {
			t.Errorf("host %s: Identity = %v, %v, want %s", d.id, id, err, newStream)
		}
		if got := load(t, d); len(got) != 0 {
			t.Errorf("host %s: Load = %v in the new generation before its initialisation", d.id, positions(got))
		}
	}
	var resolved atomic.Int32
	if err := initialise(t, h, a, seedAs(newStream, active(2, "200"), &resolved)); err != nil {
		t.Fatal(err)
	}
	if err := initialise(t, h, b, seedAs(newStream, active(2, "300"), &resolved)); err != nil {
		t.Fatal(err)
	}
	if n := resolved.Load(); n != 1 {
		t.Errorf("the new stream was initialised %d times, want once", n)
	}
	for id, pos := range positions(load(t, b)) {
		if pos != scan.AfterSequence("200").String() {
			t.Errorf("shard %s at %s, want a's batch of the new stream (200)", id, pos)
		}
	}
}

// A host that dies half-way through the new stream's initialisation (its
// batch written, not committed) leaves nothing visible; another host
// initialises the new stream; the old progress never shows.
func testStartOverDies(t *testing.T, h Harness) {
	a := join(t, h, "a")
	if err := initialise(t, h, a, seedAs(oldStream, active(2, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	b := join(t, h, "b")
	if err := initialise(t, h, b, seedAs(oldStream, active(2, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	startOver(t, a, newStream)
	a, b = rejoin(t, h, a), rejoin(t, h, b)
	diesMidInit(t, h, a, b, func(resolved *atomic.Int32) kinesisload.InitFunc {
		return seedAs(newStream, active(2, "222"), resolved)
	})
}

// A host whose view of the stream is older than the fleet's (it saw the
// old stream after the fleet moved to the new one) cannot move the fleet
// back: its StartOver is refused, nothing moves.
func testStartOverOlder(t *testing.T, h Harness) {
	a := join(t, h, "a")
	if err := initialise(t, h, a, seedAs(oldStream, active(2, "100"), nil)); err != nil {
		t.Fatal(err)
	}
	startOver(t, a, newStream)
	a = rejoin(t, h, a)
	if err := initialise(t, h, a, seedAs(newStream, active(2, "200"), nil)); err != nil {
		t.Fatal(err)
	}
	run(h, 3, []*driver{a}, nil)
	err := a.m.Store().StartOver(context.Background(), stream, oldStream)
	if err == nil || errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Errorf("StartOver to a stream created before the one in force = %v, want a refusal (not a mismatch, which would make the Loader join again and again)", err)
	}
	held := maps.Clone(a.held)
	run(h, 3, []*driver{a}, nil)
	if !maps.Equal(held, a.held) || len(held) != 2 {
		t.Errorf("a holds %v after a refused start-over, want its 2 shards, the same leases", a.shards())
	}
	b := join(t, h, "b")
	if id, err := b.m.Store().Identity(context.Background(), stream); err != nil || !id.Equal(newStream) {
		t.Errorf("Identity after a refused start-over = %v, %v, want %s", id, err, newStream)
	}
}
