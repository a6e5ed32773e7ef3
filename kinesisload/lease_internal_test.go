package kinesisload

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
)

// leaseEvents records the lease hooks of one Loader.
type leaseEvents struct {
	mu       sync.Mutex
	acquired []LeaseAcquired
	handed   []LeaseHandedOff
	lost     []LeaseLost
}

func (h *leaseEvents) OnLeaseAcquired(e LeaseAcquired) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acquired = append(h.acquired, e)
}

func (h *leaseEvents) OnLeaseHandedOff(e LeaseHandedOff) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handed = append(h.handed, e)
}

func (h *leaseEvents) OnLeaseLost(e LeaseLost) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost = append(h.lost, e)
}

func (h *leaseEvents) reasons() (acquired []AcquireReason, handed []HandoffReason, lost int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.acquired {
		acquired = append(acquired, e.Reason)
	}
	for _, e := range h.handed {
		handed = append(handed, e.Reason)
	}
	return acquired, handed, len(h.lost)
}

// With the default coordinator (one process) every shard read has a lease
// of epoch 0 acquired as initial; Pause and Close hand them off with their
// reason; none is ever lost; Stats lists them while they are read.
func TestSingleProcessLeaseHooksAndStats(t *testing.T) {
	s := newFakeStream(t, 2)
	h := &leaseEvents{}
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(h, ih))
	ih.wait(t)
	s.put(shard0, "a")
	s.put(shard1, "b")
	rec.waitFor(t, "a", "b")
	st := r.l.Stats()
	if len(st.Leases) != 2 || st.LeasesAcquired != 2 {
		t.Fatalf("Stats: leases %+v, acquired %d; want both shards' leases", st.Leases, st.LeasesAcquired)
	}
	for _, l := range st.Leases {
		if l.Epoch != 0 || l.Reason != AcquireInitial || l.Since.IsZero() || time.Since(l.Since) < 0 {
			t.Errorf("Stats lease %+v, want epoch 0, initial, since a moment", l)
		}
	}
	r.l.Pause()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.l.Stats().Leases) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("paused, still holding %+v", r.l.Stats().Leases)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.l.Resume()
	s.put(shard0, "c")
	rec.waitFor(t, "c")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
	acquired, handed, lost := h.reasons()
	if want := []AcquireReason{AcquireInitial, AcquireInitial, AcquireInitial, AcquireInitial}; !slices.Equal(acquired, want) {
		t.Errorf("acquired as %v, want %v (two sessions of two shards)", acquired, want)
	}
	slices.Sort(handed)
	if want := []HandoffReason{HandoffClose, HandoffClose, HandoffPause, HandoffPause}; !slices.Equal(handed, want) {
		t.Errorf("handed off as %v, want %v", handed, want)
	}
	if lost != 0 {
		t.Errorf("%d leases lost with the default coordinator", lost)
	}
	st = r.l.Stats()
	if len(st.Leases) != 0 || st.LeasesAcquired != 4 || st.LeasesHandedOff != 4 || st.LeasesLost != 0 {
		t.Errorf("Stats after Close: leases %+v, acquired %d, handed off %d, lost %d; want none, 4, 4, 0", st.Leases, st.LeasesAcquired, st.LeasesHandedOff, st.LeasesLost)
	}
}
