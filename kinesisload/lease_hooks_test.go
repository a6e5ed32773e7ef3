package kinesisload_test

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// leaseLog records one host's lease hooks.
type leaseLog struct {
	mu       sync.Mutex
	acquired []kinesisload.LeaseAcquired
	lost     []kinesisload.LeaseLost
	handed   []kinesisload.LeaseHandedOff
}

func (g *leaseLog) OnLeaseAcquired(e kinesisload.LeaseAcquired) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.acquired = append(g.acquired, e)
}

func (g *leaseLog) OnLeaseLost(e kinesisload.LeaseLost) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lost = append(g.lost, e)
}

func (g *leaseLog) OnLeaseHandedOff(e kinesisload.LeaseHandedOff) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handed = append(g.handed, e)
}

// mark is how many events of each kind g has recorded.
type mark struct{ acquired, lost, handed int }

func (g *leaseLog) mark() mark {
	g.mu.Lock()
	defer g.mu.Unlock()
	return mark{len(g.acquired), len(g.lost), len(g.handed)}
}

// since returns the events recorded after m.
func (g *leaseLog) since(m mark) ([]kinesisload.LeaseAcquired, []kinesisload.LeaseLost, []kinesisload.LeaseHandedOff) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.acquired[m.acquired:]), slices.Clone(g.lost[m.lost:]), slices.Clone(g.handed[m.handed:])
}

// held returns the shards host holds by its Stats, with their epochs.
func (r *fleetRig) held(host string) map[string]uint64 {
	out := map[string]uint64{}
	for _, l := range r.loads[host].Stats().Leases {
		out[l.ShardID] = l.Epoch
	}
	return out
}

// waitHeld waits until each host holds as many leases as want says.
func (r *fleetRig) waitHeld(want map[string]int) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := map[string]int{}
		for h := range want {
			got[h] = len(r.held(h))
		}
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("hosts hold %v leases, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventually waits until ok holds; it fails the test after a minute.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLost waits until g has recorded n lost leases after m.
func waitLost(t *testing.T, g *leaseLog, m mark, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, lost, _ := g.since(m); len(lost) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d leases lost", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func acquiredAs(t *testing.T, host, when string, es []kinesisload.LeaseAcquired, shards []string, want kinesisload.AcquireReason) {
	t.Helper()
	got := map[string]kinesisload.AcquireReason{}
	for _, e := range es {
		got[e.ShardID] = e.Reason
		if e.Epoch == 0 || e.Position.Kind == 0 || e.Stream != "orders" {
			t.Errorf("%s: %s: LeaseAcquired %+v lacks its epoch, position or stream", when, host, e)
		}
	}
	for _, id := range shards {
		if r, ok := got[id]; !ok {
			t.Errorf("%s: %s acquired %v, not %s", when, host, got, id)
		} else if r != want {
			t.Errorf("%s: %s acquired %s as %v, want %v", when, host, id, r, want)
		}
	}
}

// Every lease hook fires with the reason of the move, and Stats shows the
// leases held and the counts: a host alone takes shards never owned
// (initial); a joining host steals its share (rebalance on one side,
// handoff on the other); a host that closes hands its leases off (close)
// and the other takes them free (unowned); a host that cannot renew fences
// itself (self_fenced) and its shards are taken after the lease duration
// (expired); so are a killed host's.
func TestFleetLeaseHooksSayWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 4)
		logs := map[string]*leaseLog{"a": {}, "b": {}, "c": {}}
		r.hooks = map[string]kinesisload.Hook{"a": logs["a"], "b": logs["b"], "c": logs["c"]}
		want := r.put(40)
		r.start("a")
		r.waitAll(want)
		r.waitHeld(map[string]int{"a": 4})
		all := slices.Sorted(maps.Keys(r.held("a")))
		acq, _, _ := logs["a"].since(mark{})
		acquiredAs(t, "a", "alone", acq, all, kinesisload.AcquireInitial)
		st := r.loads["a"].Stats()
		items := r.fleet.Shards("orders")
		for _, l := range st.Leases {
			if l.Epoch != items[l.ShardID].Epoch || l.Reason != kinesisload.AcquireInitial || l.Since.IsZero() {
				t.Errorf("Stats lease %+v, want the epoch of its item (%d), initial, a start time", l, items[l.ShardID].Epoch)
			}
		}
		if st.LeasesAcquired != 4 || st.LeasesLost != 0 || st.LeasesHandedOff != 0 {
			t.Errorf("Stats counts acquired %d, lost %d, handed off %d; want 4, 0, 0", st.LeasesAcquired, st.LeasesLost, st.LeasesHandedOff)
		}

		// A steal: b joins and is handed its share.
		ma, mb := logs["a"].mark(), logs["b"].mark()
		r.start("b")
		r.waitHeld(map[string]int{"a": 2, "b": 2})
		bHeld := slices.Sorted(maps.Keys(r.held("b")))
		_, lostA, handedA := logs["a"].since(ma)
		acqB, _, _ := logs["b"].since(mb)
		acquiredAs(t, "b", "steal", acqB, bHeld, kinesisload.AcquireHandoff)
		if len(lostA) != 0 {
			t.Errorf("steal: a lost %v, want planned handoffs only", lostA)
		}
		if len(handedA) != 2 {
			t.Errorf("steal: a handed off %d leases, want 2", len(handedA))
		}
		for _, e := range handedA {
			if e.Reason != kinesisload.HandoffRebalance || !slices.Contains(bHeld, e.ShardID) || e.Held <= 0 || e.Position.Kind == 0 {
				t.Errorf("steal: a handed off %+v, want rebalance of one of b's %v, held a while, with the committed position", e, bHeld)
			}
		}
		if st := r.loads["a"].Stats(); st.LeasesHandedOff != 2 {
			t.Errorf("steal: a's Stats count %d handoffs, want 2", st.LeasesHandedOff)
		}

		// Close: b hands its leases off; a takes them as unowned.
		ma, mb = logs["a"].mark(), logs["b"].mark()
		r.close("b")
		r.waitHeld(map[string]int{"a": 4})
		_, lostB, handedB := logs["b"].since(mb)
		if len(lostB) != 0 || len(handedB) != 2 {
			t.Errorf("close: b lost %v and handed off %d, want 2 handoffs and nothing lost", lostB, len(handedB))
		}
		for _, e := range handedB {
			if e.Reason != kinesisload.HandoffClose {
				t.Errorf("close: b handed off %s as %v, want %v", e.ShardID, e.Reason, kinesisload.HandoffClose)
			}
		}
		if st := r.loads["b"].Stats(); len(st.Leases) != 0 || st.LeasesHandedOff != 2 || st.LeasesAcquired != 2 {
			t.Errorf("close: b's Stats: leases %v, acquired %d, handed off %d; want none held, 2, 2", st.Leases, st.LeasesAcquired, st.LeasesHandedOff)
		}
		acqA, _, _ := logs["a"].since(ma)
		acquiredAs(t, "a", "close", acqA, bHeld, kinesisload.AcquireUnowned)

		// Self-fencing: c joins and takes its share, then none of its writes
		// lands for a while: it stops, and a takes the shards as expired.
		r.start("c")
		r.waitHeld(map[string]int{"a": 2, "c": 2})
		cHeld := slices.Sorted(maps.Keys(r.held("c")))
		ma, mc := logs["a"].mark(), logs["c"].mark()
		r.fleet.Refuse("c", 50)
		waitLost(t, logs["c"], mc, 2)
		_, lostC, handedC := logs["c"].since(mc)
		for _, e := range lostC {
			if e.Reason != kinesisload.LostSelfFenced || e.Err == nil || !slices.Contains(cHeld, e.ShardID) {
				t.Errorf("fence: c lost %+v, want self_fenced with the coordinator's error, of one of %v", e, cHeld)
			}
		}
		if len(handedC) != 0 {
			t.Errorf("fence: c handed off %v, want nothing: it could not write", handedC)
		}
		r.waitHeld(map[string]int{"a": 4})
		acqA, _, _ = logs["a"].since(ma)
		acquiredAs(t, "a", "fence", acqA, cHeld, kinesisload.AcquireExpired)
		eventually(t, "c's Stats count the 2 leases lost", func() bool { return r.loads["c"].Stats().LeasesLost == 2 })

		// Kill: c writes again and takes its share back; killed, its shards
		// go to a as expired.
		r.waitHeld(map[string]int{"a": 2, "c": 2})
		cHeld = slices.Sorted(maps.Keys(r.held("c")))
		ma = logs["a"].mark()
		r.kill("c")
		r.waitHeld(map[string]int{"a": 4})
		acqA, _, _ = logs["a"].since(ma)
		acquiredAs(t, "a", "kill", acqA, cHeld, kinesisload.AcquireExpired)
	})
}

// A lease handed off before its first commit reports, as where the next
// owner resumes, the position it was taken at: another host's commits,
// which this host's Stats never saw. (It reported this host's Stats, the
// start it initialised with.)
func TestAHandoffBeforeTheFirstCommitReportsThePositionTheLeaseWasTakenAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		logs := map[string]*leaseLog{"a": {}, "b": {}}
		r.hooks = map[string]kinesisload.Hook{"a": logs["a"], "b": logs["b"]}
		r.start("a")
		r.start("b")
		r.waitHeld(map[string]int{"a": 1, "b": 1})
		want := r.put(20) // every shard reads and commits past its start
		r.waitAll(want)
		aHeld := slices.Sorted(maps.Keys(r.held("a")))
		r.close("a") // b takes a's shard where a committed it
		r.waitHeld(map[string]int{"b": 2})
		items := r.fleet.Shards("orders")
		mb := logs["b"].mark()
		r.close("b") // before any record more: no commit of b's on it
		_, _, handed := logs["b"].since(mb)
		for _, e := range handed {
			if e.ShardID != aHeld[0] {
				continue
			}
			if at := items[e.ShardID].Progress.Position; !e.Position.Equal(at) {
				t.Errorf("b handed off %s at %v, want where it took the lease, %v", e.ShardID, e.Position, at)
			}
			return
		}
		t.Fatalf("b handed off %v, want %s among them", handed, aHeld[0])
	})
}
