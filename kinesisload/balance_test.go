package kinesisload_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/tidemark/tidemark/kinesisload"
)

// observing wraps a Coordinator so that its leases implement
// kinesisload.LoadObserver and count what they are told, per shard.
type observing struct {
	kinesisload.Coordinator
	mu    sync.Mutex
	bytes map[string]int64
}

type observingMembership struct {
	kinesisload.Membership
	o *observing
}

type observingLease struct {
	kinesisload.Lease
	o *observing
}

func (o *observing) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	m, err := o.Coordinator.Join(ctx, stream)
	if err != nil {
		return nil, err
	}
	return observingMembership{m, o}, nil
}

func (m observingMembership) Acquire(ctx context.Context, ready []string) ([]kinesisload.Lease, error) {
	ls, err := m.Membership.Acquire(ctx, ready)
	for i, l := range ls {
		ls[i] = observingLease{l, m.o}
	}
	return ls, err
}

func (l observingLease) Observe(bytes int64) {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	l.o.bytes[l.Shard()] += bytes
}

func (o *observing) total() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, b := range o.bytes {
		n += b
	}
	return n
}

// A lease that implements LoadObserver is told the bytes of every batch
// the Sink accepted from its shard.
func TestLeaseObservesDeliveredBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		obs := &observing{Coordinator: r.fleet.Host("a"), bytes: map[string]int64{}}
		r.coords = map[string]kinesisload.Coordinator{"a": obs}
		r.start("a")
		want := r.put(40)
		r.waitAll(want)
		var n int64
		for _, d := range want {
			n += 2 * int64(len(d)) // data plus partition key (the same string), as Kinesis counts
		}
		r.close("a")
		if got := obs.total(); got != n {
			t.Errorf("leases observed %d bytes, want the %d bytes of the %d records delivered", got, n, len(want))
		}
	})
}

// With every shard at the floor, PickSteal is the count rule: a steal only
// when the other host holds at least two more shards.
func TestPickStealAtTheFloorIsTheCountRule(t *testing.T) {
	f := kinesisload.RateFloor
	if got := kinesisload.PickSteal(1*f, 2*f, map[string]float64{"x": f, "y": f}); got != "" {
		t.Errorf("one shard apart: PickSteal = %q, want no steal", got)
	}
	if got := kinesisload.PickSteal(0, 2*f, map[string]float64{"x": f, "y": f}); got != "x" {
		t.Errorf("two shards apart: PickSteal = %q, want x (the lowest ID of equal moves)", got)
	}
}

// PickSteal moves the shard that leaves the two loads closest, and none
// that would only swap which host is heavier.
func TestPickStealNarrowsTheSpread(t *testing.T) {
	f := kinesisload.RateFloor
	hot := 1000 * f
	// a holds the hot shard and two idle ones, b nothing: the hot one
	// leaves the loads closest (b: hot, a: 2 idle).
	if got := kinesisload.PickSteal(0, hot+2*f, map[string]float64{"hot": hot, "i1": f, "i2": f}); got != "hot" {
		t.Errorf("PickSteal = %q, want hot", got)
	}
	// a holds the hot shard only, b three idle ones: moving it would only
	// make b the heavier; nothing moves.
	if got := kinesisload.PickSteal(3*f, hot, map[string]float64{"hot": hot}); got != "" {
		t.Errorf("PickSteal = %q, want no steal", got)
	}
}
