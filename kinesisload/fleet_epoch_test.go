package kinesisload_test

import (
	"testing"
	"testing/synctest"
)

// TestFleetBatchCarriesLeaseEpoch checks that every batch carries the
// epoch of the lease it was delivered under, and that a shard's next owner
// delivers under a higher one: the token a TransactionalSink shared by a
// fleet compares to refuse a host that lost the lease.
func TestFleetBatchCarriesLeaseEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.start("a")
		first := r.put(20)
		r.waitAll(first)
		r.close("a")
		r.start("b")
		second := r.put(20)
		r.waitAll(append(first, second...))

		before := map[string]uint64{} // shard -> host a's epoch
		for _, d := range r.sink.deliveries() {
			if d.epoch == 0 {
				t.Fatalf("host %s delivered %s of shard %s at epoch 0; want the lease's epoch", d.host, d.seq, d.shard)
			}
			if d.host == "a" {
				if e, ok := before[d.shard]; ok && e != d.epoch {
					t.Fatalf("host a delivered shard %s at epochs %d and %d under one lease", d.shard, e, d.epoch)
				}
				before[d.shard] = d.epoch
			}
		}
		for _, d := range r.sink.deliveries() {
			if d.host == "b" && d.epoch <= before[d.shard] {
				t.Fatalf("host b delivered shard %s at epoch %d, not above host a's %d", d.shard, d.epoch, before[d.shard])
			}
		}
	})
}
