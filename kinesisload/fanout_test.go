package kinesisload

import (
	"sync/atomic"
	"testing"
	"time"
)

// testReadMode is the read mode that start gives a Config that names none:
// the guarantee tests set it to run in fan-out mode too (the package's
// tests do not run in parallel).
var testReadMode = ReadPolling

// testConsumer is the consumer name of the tests in fan-out mode.
const testConsumer = "tidemark-test"

// fanOutReaders counts the fan-out readers the tests made.
var fanOutReaders atomic.Int64

// fastFanOut paces subscriptions as fast as a fake without limits allows.
var fastFanOut = optionFunc(func(o *options) {
	o.tuneFanOut = func(fc *fanoutConfig) {
		fanOutReaders.Add(1)
		fc.subscribeInterval = time.Millisecond
		fc.resubscribeWait = time.Millisecond
	}
})

// withTestReadMode applies testReadMode to a Config that names no mode.
func withTestReadMode(cfg Config, opts []Option) (Config, []Option) {
	if testReadMode == ReadFanOut && cfg.ReadMode == ReadPolling && cfg.ConsumerName == "" {
		cfg.ReadMode, cfg.ConsumerName = ReadFanOut, testConsumer
	}
	if cfg.ReadMode == ReadFanOut {
		opts = append([]Option{fastFanOut}, opts...)
	}
	return cfg, opts
}

// inMode runs fn with testReadMode set to m.
func inMode(t *testing.T, m ReadMode, fn func(*testing.T)) {
	t.Helper()
	old := testReadMode
	testReadMode = m
	t.Cleanup(func() { testReadMode = old })
	before := fanOutReaders.Load()
	fn(t)
	if m == ReadFanOut && fanOutReaders.Load() == before && !t.Failed() {
		t.Error("no shard was read in fan-out mode")
	}
}

// guaranteeTests are the tests of the guarantee that run in both read
// modes: under their own names in polling mode, and in TestFanOutGuarantees
// in fan-out mode.
var guaranteeTests = []struct {
	name string
	fn   func(*testing.T)
}{
	{"LatestSurvivesAbortBeforeFirstCommit", TestLatestSurvivesAbortBeforeFirstCommit},
	{"NoLoopWhileScanPendingAcrossSplit", TestNoLoopWhileScanPendingAcrossSplit},
	{"NoLoopUntilBatchIsDurable", TestNoLoopUntilBatchIsDurable},
	{"MergeChildWaitsForBothParents", TestMergeChildWaitsForBothParents},
	{"CrashAtEveryJournalWrite", TestCrashAtEveryJournalWrite},
	{"TransactionalSinkCheckpointsWithoutJournal", TestTransactionalSinkCheckpointsWithoutJournal},
	{"CloseFinishesInFlightBatch", TestCloseFinishesInFlightBatch},
	{"CloseTimeoutCancelsDelivery", TestCloseTimeoutCancelsDelivery},
	{"PauseResumeDuringConsumption", TestPauseResumeDuringConsumption},
	{"LoaderDeaggregates", TestLoaderDeaggregates},
	{"ReviewFollowedChildOfSelectedParentStartsAtTrimHorizon", TestReviewFollowedChildOfSelectedParentStartsAtTrimHorizon},
	{"ReviewPauseRacingCompletionIsNotAnError", TestReviewPauseRacingCompletionIsNotAnError},
	{"WidenedSelectionOutOfOrderOptIn", TestWidenedSelectionOutOfOrderOptIn},
	{"HooksReportEveryEvent", TestHooksReportEveryEvent},
}

// TestFanOutGuarantees runs the guarantee tests in fan-out mode.
func TestFanOutGuarantees(t *testing.T) {
	for _, m := range []ReadMode{ReadFanOut} {
		for _, g := range guaranteeTests {
			t.Run(m.String()+"/"+g.name, func(t *testing.T) { inMode(t, m, g.fn) })
		}
	}
}
