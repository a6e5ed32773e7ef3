package kinesisload_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// fleetFanOut makes the fleet rig's Loaders read with enhanced fan-out
// (consumer "fleet"); the package's tests do not run in parallel.
var fleetFanOut bool

// The fleet tests in fan-out mode: leases move between hosts that read
// through subscriptions of one consumer, and the guarantee holds.
func TestFleetFanOut(t *testing.T) {
	for _, tt := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"PlannedMovesDeliverNothingTwice", TestFleetPlannedMovesDeliverNothingTwice},
		{"KilledHostDuplicatesOnlyTheUncommittedWindow", TestFleetKilledHostDuplicatesOnlyTheUncommittedWindow},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fleetFanOut = true
			t.Cleanup(func() { fleetFanOut = false })
			tt.fn(t)
		})
	}
}

// A shard whose lease moves to another host while its loop waits for the
// fan-out consumer to become ACTIVE: the loop ends as a lease lost, not as
// a failure (Run stopped with "context canceled"; found by the
// simulation).
func TestFleetLeaseLostWhileTheConsumerIsCreatingDoesNotStopRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 4, kinesistest.WithConsumerActivation(3*time.Second))
		r.configure = func(c *kinesisload.Config) { c.ReadMode, c.ConsumerName = kinesisload.ReadFanOut, "fleet" }
		r.start("a")
		r.waitOwning("a")
		r.start("b") // takes shards from a while a's loops wait for the consumer
		r.waitOwning("a", "b")
		want := r.put(20)
		r.waitAll(want)
		for _, h := range []string{"a", "b"} {
			select {
			case err := <-r.done[h]:
				t.Fatalf("host %s: Run stopped: %v", h, err)
			default:
			}
		}
	})
}
