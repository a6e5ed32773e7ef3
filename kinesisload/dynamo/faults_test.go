package dynamo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// holder is one host of a harness holding every shard of stream "s".
type holder struct {
	h      *harness
	m      kinesisload.Membership
	leases map[string]kinesisload.Lease
}

// joinInitialised joins host a to stream s and initialises n ACTIVE
// shards, shard-0 and up, at 100; the test's cleanup leaves.
func joinInitialised(t *testing.T, h *harness, n int) kinesisload.Membership {
	t.Helper()
	ctx := context.Background()
	m, err := h.Host("a").Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	var ups []kinesisload.ShardProgress
	for i := range n {
		ups = append(ups, kinesisload.ShardProgress{ShardID: fmt.Sprintf("shard-%d", i), State: kinesisload.StateActive, Position: scan.AfterSequence("100")})
	}
	if err := m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error { return st.Save(ctx, "s", ups) }); err != nil {
		t.Fatal(err)
	}
	return m
}

// holdAll joins host a, initialises n ACTIVE shards at 100 and acquires
// them all.
func holdAll(t *testing.T, h *harness, n int) *holder {
	t.Helper()
	m := joinInitialised(t, h, n)
	ho := &holder{h: h, m: m, leases: map[string]kinesisload.Lease{}}
	ho.rounds(t, 2)
	if len(ho.leases) != n {
		t.Fatalf("host a holds %d of %d shards", len(ho.leases), n)
	}
	return ho
}

// rounds advances k renew intervals, acquiring after each.
func (ho *holder) rounds(t *testing.T, k int) {
	t.Helper()
	_, renew := ho.h.Timing()
	for range k {
		ho.h.Advance(renew)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		p, err := ho.m.Store().Load(ctx, "s")
		cancel()
		if err != nil {
			continue // an outage
		}
		var ready []string
		for id := range p {
			ready = append(ready, id)
		}
		ls, err := ho.m.Acquire(context.Background(), ready)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			ho.leases[l.Shard()] = l
		}
	}
}

func (ho *holder) position(t *testing.T, shard string) scan.Position {
	t.Helper()
	p, err := ho.m.Store().Load(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	return p[shard].Position
}

func lost(l kinesisload.Lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

// Throttling and 5xx on every call for less than the fence allows: the
// host keeps its leases (same epoch), a Commit made during the outage
// lands once it ends, and nothing is lost. For longer than that: the host
// fences itself (its leases are lost, its Commit refused), and takes its
// shards again under a new epoch once DynamoDB answers, from the
// committed position.
func TestThrottlingAnd5xxAreTransient(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	for _, fault := range []struct {
		status int
		code   string
	}{
		{http.StatusBadRequest, "ProvisionedThroughputExceededException"},
		{http.StatusBadRequest, "ThrottlingException"},
		{http.StatusInternalServerError, "InternalServerError"},
		{http.StatusServiceUnavailable, "ServiceUnavailable"},
	} {
		t.Run(fault.code, func(t *testing.T) {
			h := newHarness(t, e.Endpoint)
			ho := holdAll(t, h, 2)
			f := h.host("a").faults
			lease, renew := h.Timing()
			cfg := h.host("a").c.cfg
			l := ho.leases["shard-0"]
			epoch := l.Epoch()

			// A short outage: less than LeaseDuration-FenceMargin.
			f.set(func(f *faults) { f.failStatus, f.failCode = fault.status, fault.code })
			done := make(chan error, 1)
			go func() {
				done <- l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: "shard-0", Position: scan.AfterSequence("200")})
			}()
			short := int((cfg.LeaseDuration-cfg.FenceMargin)/renew) - 1
			ho.rounds(t, short)
			select {
			case err := <-done:
				t.Fatalf("Commit returned %v during the outage, want it to wait", err)
			default:
			}
			f.set(func(f *faults) { f.failStatus = 0 })
			if err := <-done; err != nil {
				t.Fatalf("Commit across a short outage = %v", err)
			}
			ho.rounds(t, 3)
			for id, l := range ho.leases {
				if lost(l) {
					t.Errorf("%s lost after a short outage", id)
				}
			}
			if l.Epoch() != epoch || ho.leases["shard-0"] != l {
				t.Errorf("the lease changed across a short outage")
			}
			if got := ho.position(t, "shard-0"); !got.Equal(scan.AfterSequence("200")) {
				t.Errorf("position after the outage = %v, want 200", got)
			}

			// A long outage (a minute): fenced, then back.
			f.set(func(f *faults) { f.failStatus, f.failCode = fault.status, fault.code })
			ho.rounds(t, int(time.Minute/renew))
			if !lost(l) {
				t.Fatal("the lease is not lost after a minute without a heartbeat")
			}
			err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: "shard-0", Position: scan.AfterSequence("300")})
			if !errors.Is(err, kinesisload.ErrLeaseLost) {
				t.Errorf("Commit of a fenced lease = %v, want ErrLeaseLost", err)
			}
			f.set(func(f *faults) { f.failStatus = 0 })
			ho.rounds(t, int(2*lease/renew))
			again := ho.leases["shard-0"]
			if again == l || lost(again) {
				t.Fatal("shard-0 was not taken again after the outage")
			}
			if again.Epoch() <= epoch {
				t.Errorf("epoch after re-taking = %d, want above %d", again.Epoch(), epoch)
			}
			if got := again.Progress().Position; !got.Equal(scan.AfterSequence("200")) {
				t.Errorf("re-taken at %v, want the committed 200", got)
			}
		})
	}
}

// With CheckpointInterval, position commits are coalesced: written once
// the interval passed (by the renew round), at once for a state change,
// and before a Release.
func TestCheckpointIntervalCoalesces(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	h.cfg.CheckpointInterval = 5 * time.Second
	ho := holdAll(t, h, 2)
	ctx := context.Background()
	_, renew := h.Timing()
	f := h.host("a").faults
	writes := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.writes
	}
	l := ho.leases["shard-0"]
	// The interval since the grant passed: the next commit writes.
	ho.rounds(t, int(h.cfg.CheckpointInterval/renew)+1)
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-0", Position: scan.AfterSequence("200")}); err != nil {
		t.Fatal(err)
	}
	if got := ho.position(t, "shard-0"); !got.Equal(scan.AfterSequence("200")) {
		t.Fatalf("first commit after the interval not written: %v", got)
	}
	before := writes()
	for _, seq := range []string{"300", "400", "500"} {
		if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-0", Position: scan.AfterSequence(seq)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes() - before; n != 0 {
		t.Errorf("%d writes for 3 commits within the interval, want 0", n)
	}
	if got := ho.position(t, "shard-0"); !got.Equal(scan.AfterSequence("200")) {
		t.Errorf("coalesced commits visible before the interval: %v", got)
	}
	ho.h.Advance(5 * time.Second)
	if got := ho.position(t, "shard-0"); !got.Equal(scan.AfterSequence("500")) {
		t.Errorf("after the interval the position is %v, want the last commit 500", got)
	}
	// A state change is written at once, with the coalesced position.
	l1 := ho.leases["shard-1"]
	if err := l1.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-1", Position: scan.AfterSequence("150")}); err != nil {
		t.Fatal(err)
	}
	if err := l1.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-1", State: kinesisload.StateDraining, Position: scan.AfterSequence("160")}); err != nil {
		t.Fatal(err)
	}
	p, err := ho.m.Store().Load(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if p["shard-1"].State != kinesisload.StateDraining || !p["shard-1"].Position.Equal(scan.AfterSequence("160")) {
		t.Errorf("state change not written at once: %+v", p["shard-1"])
	}
	// Release writes the coalesced position first.
	if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-0", Position: scan.AfterSequence("600")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ho.position(t, "shard-0"); !got.Equal(scan.AfterSequence("600")) {
		t.Errorf("after Release the position is %v, want the coalesced 600", got)
	}
}

// The answer to a take (a PutItem of the shard's item) is lost: the host
// reads the item back, finds itself the owner at the epoch it wrote, and
// holds the lease once, at that epoch; nothing is taken twice.
func TestTakeWhoseAnswerIsLost(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ctx := context.Background()
	m := joinInitialised(t, h, 1)
	if ls, err := m.Acquire(ctx, []string{"shard-0"}); err != nil || len(ls) != 0 {
		t.Fatalf("Acquire before any round = %v, %v", ls, err)
	}
	h.host("a").faults.set(func(f *faults) { f.lose, f.loseOp = 1, "PutItem" })
	_, renew := h.Timing()
	h.Advance(renew)
	ls, err := m.Acquire(ctx, []string{"shard-0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Epoch() != 1 {
		t.Fatalf("after a take whose answer was lost, Acquire = %v, want shard-0 at epoch 1", ls)
	}
	h.host("a").faults.mu.Lock()
	left := h.host("a").faults.lose
	h.host("a").faults.mu.Unlock()
	if left != 0 {
		t.Fatalf("no PutItem answer was lost: the test did not exercise a lost take")
	}
	h.Advance(3 * renew)
	if more, _ := m.Acquire(ctx, []string{"shard-0"}); len(more) != 0 || lost(ls[0]) {
		t.Errorf("the lease changed after the lost answer: granted again %v, lost %v", more, lost(ls[0]))
	}
}

// Renewal does not wait for commits: with every PutItem (the writes of
// shard items) hanging for twice the lease duration, on a real clock, the
// host's heartbeats still land, so it keeps its lease (same epoch, not
// lost), and the hung Commit lands once PutItem answers again.
func TestRenewalIsNotBlockedByAHungCommit(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	f := newFaults()
	c, err := New(newClient(e.Endpoint, f), Config{Table: "renewal", HostID: "a", CreateTable: true, LeaseDuration: 3 * time.Second, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := c.Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Leave(context.Background()) }()
	ups := []kinesisload.ShardProgress{{ShardID: "shard-0", State: kinesisload.StateActive, Position: scan.AfterSequence("100")}}
	if err := m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error { return st.Save(ctx, "s", ups) }); err != nil {
		t.Fatal(err)
	}
	var l kinesisload.Lease
	for l == nil {
		ls, err := m.Acquire(ctx, []string{"shard-0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			l = ls[0]
			break
		}
		select {
		case <-m.Wake():
		case <-time.After(30 * time.Second):
			t.Fatal("shard-0 not granted within 30 s")
		}
	}
	f.set(func(f *faults) { f.blockOp = "PutItem" })
	done := make(chan error, 1)
	go func() {
		done <- l.Commit(ctx, kinesisload.ShardProgress{ShardID: "shard-0", Position: scan.AfterSequence("200")})
	}()
	time.Sleep(2 * c.Config().LeaseDuration)
	if lost(l) {
		t.Fatal("the lease was lost while only its commit hung: renewal waited for it")
	}
	f.set(func(f *faults) { f.blockOp = "" })
	if err := <-done; err != nil {
		t.Fatalf("the hung Commit = %v once PutItem answered", err)
	}
	p, err := m.Store().Load(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !p["shard-0"].Position.Equal(scan.AfterSequence("200")) || lost(l) {
		t.Errorf("after the hang: position %v, lost %v", p["shard-0"].Position, lost(l))
	}
}

// The heartbeat items of a host that left, and of one dead for long that
// owns nothing, are removed; a host whose item was removed and that comes
// back writes it afresh and counts as alive again.
func TestDepartedHostsItemsAreCollected(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ho := holdAll(t, h, 2)
	ctx := context.Background()
	lease, renew := h.Timing()
	hosts := func() map[string]HostInfo {
		t.Helper()
		info, err := h.host("a").c.Inspect(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		return info.Hosts
	}
	b, err := h.Host("b").Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.Host("c").Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Leave(context.Background()) })
	ho.rounds(t, 2)
	if got := hosts(); len(got) != 3 {
		t.Fatalf("hosts %v, want a, b, c", got)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	h.Kill("c")
	ho.rounds(t, 1)
	if _, ok := hosts()["b"]; ok {
		t.Error("the item of b, which left, is still there after a round")
	}
	if _, ok := hosts()["c"]; !ok {
		t.Fatal("the item of c was removed at once; it must stand still for a while first")
	}
	ho.rounds(t, int(4*lease/renew))
	if _, ok := hosts()["c"]; ok {
		t.Fatal("the item of c, dead for 4 lease durations and owning nothing, is still there")
	}
	// c comes back.
	h.host("c").faults.set(func(f *faults) { f.killed = false })
	ho.rounds(t, 3)
	if hi, ok := hosts()["c"]; !ok || hi.Left || hi.Counter == 0 {
		t.Errorf("c came back but its item is %+v (present %v)", hi, ok)
	}
}
