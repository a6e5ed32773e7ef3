package kinesisload

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
)

// lockLosingCoordinator is the default coordinator whose Initialise
// always answers at once that the initialisation lock was lost.
type lockLosingCoordinator struct {
	Coordinator
	calls *atomic.Int64
}

func (c lockLosingCoordinator) Join(ctx context.Context, stream string) (Membership, error) {
	m, err := c.Coordinator.Join(ctx, stream)
	return lockLosingMembership{Membership: m, calls: c.calls}, err
}

type lockLosingMembership struct {
	Membership
	calls *atomic.Int64
}

func (m lockLosingMembership) Initialise(ctx context.Context, init InitFunc) error {
	m.calls.Add(1)
	return &LeaseLostError{Stream: "orders", Why: LostCommitRefused, Reason: "another host holds the initialisation lock"}
}

// After a lost initialisation lock the Loader waits before it asks again,
// backing off: a coordinator that answers "lost" at once is not asked
// millions of times a second. (Before the fix, it was.)
func TestLostInitialisationLockIsRetriedWithBackoff(t *testing.T) {
	s := newFakeStream(t, 1)
	var calls atomic.Int64
	coord := lockLosingCoordinator{Coordinator: NewStoreCoordinator(memStore(t, journal.NewMemory())), calls: &calls}
	start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder(), KinesisBackoff: 100 * time.Millisecond, KinesisMaxBackoff: 200 * time.Millisecond},
		WithClient(s.f), WithCoordinator(coord))
	time.Sleep(time.Second)
	// 100 ms doubling to 200 ms, with jitter between half and all of it:
	// at most about a dozen calls in a second.
	if n := calls.Load(); n > 15 || n < 2 {
		t.Errorf("Initialise was called %d times in a second after lost locks, want a few (backing off 100-200 ms)", n)
	}
}
