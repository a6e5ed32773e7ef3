package sim

import (
	"strings"
	"testing"
)

// Seeds the simulation failed with, replayed as named tests. A schedule
// replays in practice, not bit for bit (goroutines interleave as they
// will), so each runs several times.

// Seed 1331: a fleet host that fenced itself took back a shard an
// operator had rewound twice; the lease read the rewind from the member's
// view of the item, which a round had replaced by then, so the Loader
// resumed from its own further position and never read again what the
// rewind asked (1 run in 60 before the fix; a lease now keeps the rewind
// as its take stored it).
func TestRewindOfAShardRetakenByAFencedHostIsObeyed(t *testing.T) {
	runs := 100
	if raceEnabled {
		runs = 15
	}
	const ignored = "LOSS or no liveness: not delivered again after a rewind"
	for range runs {
		res := runSchedule(t, 1331, nil, false)
		switch kind := failureKind(res); kind {
		case "":
		case ignored:
			t.Fatalf("seed 1331: %s", strings.Join(res.Failures, "\n"))
		default:
			// Another oracle's finding on this seed (an open one: see
			// the order oracle's note in docs/testing.md), not what this
			// test is about; the fixed budget's run of seed 1331 still
			// reports it.
			t.Logf("seed 1331, not a rewind ignored: %s", strings.Join(res.Failures, "\n"))
		}
	}
}
