package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// failingRelease wraps a Coordinator so that its leases observe load and
// every Release (which does release) answers with an error, as a table
// that throttled the answer would.
type failingRelease struct{ Coordinator }

type failingReleaseMembership struct{ Membership }

type failingReleaseLease struct{ Lease }

func (c failingRelease) Join(ctx context.Context, stream string) (Membership, error) {
	m, err := c.Coordinator.Join(ctx, stream)
	if err != nil {
		return nil, err
	}
	return failingReleaseMembership{m}, nil
}

func (m failingReleaseMembership) Acquire(ctx context.Context, ready []string) ([]Lease, error) {
	ls, err := m.Membership.Acquire(ctx, ready)
	for i, l := range ls {
		ls[i] = &failingReleaseLease{l}
	}
	return ls, err
}

func (l *failingReleaseLease) Observe(int64) {}

func (l *failingReleaseLease) Release(ctx context.Context) error {
	_ = l.Lease.Release(ctx)
	return errors.New("release: the answer was throttled")
}

// observed returns how many leases the Loader's load observers hold.
func (l *Loader) observed() int {
	l.hooks.obs.mu.Lock()
	defer l.hooks.obs.mu.Unlock()
	return len(l.hooks.obs.m)
}

// A lease whose Release failed leaves the load observers when its loop
// returns, as a released one does: a completed parent's lease was kept
// (with all its coordinator holds) for the Loader's life.
func TestALeaseWhoseReleaseFailedIsNoLongerObserved(t *testing.T) {
	ctx := context.Background()
	s := newFakeStream(t, 1)
	store, err := NewJournalStore(ctx, journal.NewMemory(), 0)
	if err != nil {
		t.Fatal(err)
	}
	rec, ih := newRecorder(), newInitHook()
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: 2 * time.Millisecond}
	r := start(t, ctx, cfg, WithClient(s.f), WithCoordinator(failingRelease{NewStoreCoordinator(store)}), WithHooks(ih))
	ih.wait(t)
	s.split(shard0)
	var want []string
	for _, sh := range s.openShards() {
		s.put(sh, "x-"+sh)
		want = append(want, "x-"+sh)
	}
	rec.waitFor(t, want...) // the parent completed, its children read
	deadline := time.Now().Add(10 * time.Second)
	for r.l.observed() > len(s.openShards()) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if n := r.l.observed(); n != len(s.openShards()) {
		t.Fatalf("the load observers hold %d leases, want the %d of the open shards", n, len(s.openShards()))
	}
}
