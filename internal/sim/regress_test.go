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
// as its take stored it). The seed also made the order oracle report a
// re-created shard item's reused epochs (fixed since: docs/testing.md).
func TestRewindOfAShardRetakenByAFencedHostIsObeyed(t *testing.T) {
	runs := 100
	if raceEnabled {
		runs = 15
	}
	replaySeed(t, 1331, runs)
}

// replaySeed runs seed runs times and fails at the first failure.
func replaySeed(t *testing.T, seed int64, runs int) {
	t.Helper()
	for range runs {
		if res := runSchedule(t, seed, nil, false); len(res.Failures) > 0 {
			t.Fatalf("seed %d: %s", seed, strings.Join(res.Failures, "\n"))
		}
	}
}

// Seed 4050582: a fleet host whose TransactionalSink stored a closed
// shard's last batch (its checkpoint SHARD_END), then fenced itself
// before it committed COMPLETED, took the shard back: the Sink's
// checkpoint made it start reading at SHARD_END, which the reader refuses,
// and Run stopped ("start position SHARD_END"), 3 runs in 3 before the
// fix. Such a shard is now committed COMPLETED without a read.
func TestAShardWhoseEndTheSinkHoldsIsCompletedNotRead(t *testing.T) {
	replaySeed(t, 4050582, 10)
}

// Seed 473: a fleet whose stream is re-created (start-over) while
// DescribeStreamSummary is throttled: a host whose stored position the new
// stream refused stopped naming the position, because the one call that
// would name the re-creation was throttled (25 runs in 60 before the fix;
// explain now tries a few times). TestARefusedPositionIsExplainedAsARecreationThroughAThrottle
// in kinesisload is the unit form.
func TestARefusedPositionOfARecreatedStreamStartsOver(t *testing.T) {
	replaySeed(t, 473, 20)
}

// Seed 6006417: a single host with StreamRecreatedStartOver whose readers
// found the stream re-created (the identity check after an iterator) kept
// that finding in every later session: each stopped for it at once and
// started over again, for ever, with the virtual clock standing still
// (reported stuck). TestARecreationFoundByAReaderIsStartedOverOnce in
// kinesisload is the unit form.
func TestARecreationFoundByAReaderDoesNotStopEveryLaterSession(t *testing.T) {
	replaySeed(t, 6006417, 3)
}
