package fleet_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// tdriver plays the Loader on one host of a world: it offers every shard,
// keeps the leases granted, releases on a handoff, and feeds each lease
// the bytes of its shard per step.
type tdriver struct {
	t     *testing.T
	name  string
	h     *host
	held  map[string]kinesisload.Lease
	bytes map[string]int64
	dead  bool
}

func newDriver(t *testing.T, name string, h *host, bytes map[string]int64) *tdriver {
	return &tdriver{t: t, name: name, h: h, held: map[string]kinesisload.Lease{}, bytes: bytes}
}

func (d *tdriver) step(ids []string) {
	d.t.Helper()
	if d.dead {
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
			_ = l.Release(ctx)
			delete(d.held, id)
			continue
		default:
		}
		if o, ok := l.(kinesisload.LoadObserver); ok && d.bytes[id] > 0 {
			o.Observe(d.bytes[id])
		}
	}
	ls, err := d.h.m.Acquire(ctx, ids)
	if err != nil {
		d.t.Fatalf("host %s: Acquire: %v", d.name, err)
	}
	for _, l := range ls {
		if _, dup := d.held[l.Shard()]; dup {
			d.t.Fatalf("host %s: shard %s granted twice", d.name, l.Shard())
		}
		d.held[l.Shard()] = l
	}
}

func (d *tdriver) shards() []string { return slices.Sorted(maps.Keys(d.held)) }

// drive advances the world one RenewInterval at a time, stepping every
// driver, n times.
func drive(w *world, n int, ids []string, ds ...*tdriver) {
	for range n {
		w.advance(w.cfg.RenewInterval)
		for _, d := range ds {
			d.step(ids)
		}
	}
}

func owners(ds ...*tdriver) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		for id := range d.held {
			out[id] = d.name
		}
	}
	return out
}

func describe(ds ...*tdriver) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprintf(" %s=%v", d.name, d.shards())
	}
	return s
}

var _ = fleet.Config{}
