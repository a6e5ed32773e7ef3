package kinesisload_test

import "testing"

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
