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

// Seeds of the run of 98,118 schedules on ba937df (seeds 8,000,000 on),
// each with a unit test of its own in kinesisload or kinesisload/fleet
// that fails before its fix; replayed here as the simulation found them.

// Seed 8014111 (LOSS): a host fenced itself after its group-committed
// positions carried a closed shard's end, before its COMPLETED commit
// landed; the next owner's take stored DRAINING at SHARD_END, which no
// host took again, and the children were never read (every run before the
// fix). TestAShardItemAtItsEndButNotCompletedIsCompletedAndItsChildrenRead.
func TestAShardAtItsEndButNotCompletedIsTakenAndCompleted(t *testing.T) {
	replaySeed(t, 8014111, 3)
}

// Seeds 8036657, 8000747, 8019740 and 8054378 (LOSS: a rewind not obeyed):
// an operator's rewind while the identity item was deleted by hand was
// written to generation 0, where no host of the started-over fleet reads,
// and reported done (every run before the fix).
// TestRewindRefusesWhileTheIdentityItemIsMissing.
func TestARewindWhileTheIdentityItemIsMissingIsRefusedNotLost(t *testing.T) {
	for _, seed := range []int64{8036657, 8000747, 8019740, 8054378} {
		replaySeed(t, seed, 2)
	}
}

// Seed 8033261 (exactly once) and 4076942: a first run's identity, written
// over an item deleted by hand in a fleet never initialised, was
// overwritten with an older backup; the fleet started over and stored
// records again. The simulated operator now restores only a missing item,
// and a fleet initialised with an identity refuses to go on without it.
// TestMissingIdentityOfAnInitialisedFirstGenerationIsReportedMissing.
func TestAFirstRunsIdentityIsNotReplacedByAnOlderBackup(t *testing.T) {
	replaySeed(t, 8033261, 3)
	replaySeed(t, 4076942, 3)
}

// Seed 8047263 (order): a second initialisation (the init item deleted by
// hand) saved a deleted shard item again at epoch 0, and its old owner
// took it back at the epoch it had held, delivering records again at that
// epoch. TestAShardItemSavedAgainByASecondInitialisationHasEpochsAboveTheOldOwners.
func TestASecondInitialisationDoesNotReuseEpochs(t *testing.T) {
	replaySeed(t, 8047263, 3)
}

// Seed 8014511 (LOSS, 1 run in 2 before the fix): a child's item deleted
// by hand was saved again from the TransactionalSink's checkpoint ACTIVE
// while its parent was still read; every later start stopped with a
// ParentAfterChildError. TestFleetChildItemDeletedByHandIsSavedAgainWaitingForItsParent.
func TestAChildSavedAgainFromTheSinkWaitsForItsParent(t *testing.T) {
	replaySeed(t, 8014511, 4)
}

// Seed 8014370 (LOSS, 1 run in 4 before the fix): a host initialising a
// generation started over, whose identity item was deleted by hand
// meanwhile, found no T0 and took a fresh one, skipping what the
// re-created stream received since its creation.
// TestStartOverT0WithTheIdentityItemMissingIsAnError.
func TestAStartOverT0IsNeverTakenAfresh(t *testing.T) {
	runs := 8
	if raceEnabled {
		runs = 3
	}
	replaySeed(t, 8014370, runs)
}

// Seeds of the run of 95,145 schedules on 9480749 (seeds 10,000,000 on).

// Seed 10078379: a child's item deleted by hand just before its parent
// completed was saved again by the child's activation as a state alone,
// without a position; every host took it and stopped ("unknown kind 0").
// TestFleetChildItemDeletedByHandAsItsParentCompletes.
func TestAnActivationDoesNotSaveAnItemWithoutAPosition(t *testing.T) {
	replaySeed(t, 10078379, 4)
}

// Seeds 10017083 and 10034604 (LOSS): the identity and init items both
// deleted by hand after the stream was re-created; the next host took the
// fleet for one never initialised, wrote the new stream as its identity
// beside the old stream's shard items, and every host then stopped for a
// broken lineage, for ever. TestJoinRefusesAMissingIdentityAndInitItemOfAFleetThatRead.
func TestAFleetThatReadIsNotTakenForANewOneWithoutItsItems(t *testing.T) {
	replaySeed(t, 10017083, 2)
	replaySeed(t, 10034604, 2)
}

// Seed 10039694 (LOSS, a rewind not obeyed; 2 runs in 6 before the fix):
// the Loader's own reads of the whole partition refreshed the view and the
// time of the last read without acting on it, so the rounds never read
// again while the Loader kept reading, and a host read on under a lease an
// operator's rewind had taken. TestAReadForTheLoaderLosesALeaseTheTableMovedOn.
func TestARewindIsObeyedWhileTheLoaderReadsTheTable(t *testing.T) {
	replaySeed(t, 10039694, 6)
}

// Seeds of the run of 136,933 schedules on ef4c156 (seeds 30,000,000 on).

// Seeds 30019088 and 30030709 (Run stopped; 1 run in 3 before the fix): a
// Join met the table failing for a while, in its look for a later
// generation (a read of unknown outcome), or in folding an earlier life's
// positions into the shard items (an update that gave up after its
// attempts), and the Loader stopped. Both now wait it out.
// TestJoinReadsAgainWhenItsLookForALaterGenerationFails.
func TestAJoinWaitsOutAFailingTable(t *testing.T) {
	replaySeed(t, 30019088, 4)
	replaySeed(t, 30030709, 4)
}

// Seed 30111503 (no liveness, a rewind not obeyed; every run): the
// simulated operator restored a shard item from the backup of its first
// deletion after the item had been read to its end and deleted again, so
// the shard was ACTIVE again behind its child, and every start stopped
// with the documented ParentAfterChildError. The operator now restores
// from the latest backup only.
func TestAnItemIsRestoredFromItsLatestBackup(t *testing.T) {
	replaySeed(t, 30111503, 2)
}

// Seed 30015576 (no liveness; 1 run in 15 before the fix): a COMPLETED
// parent's item was deleted by hand and saved again, open, by a new host;
// another host, whose view still had it COMPLETED, activated the merge
// child. No host leased the child, but every start took it for read and
// stopped with a ParentAfterChildError. The fleet now loads such a child
// as waiting for its parents.
// TestAnUnreadChildActivatedBesideAnOpenParentLoadsAsPending.
func TestAChildActivatedOnAStaleViewWaitsForItsReopenedParent(t *testing.T) {
	replaySeed(t, 30015576, 4)
}

// Seeds 60080300, 60057535 and 60059801 (no liveness; every run): the
// host that committed the fleet's initialisation stopped before its first
// round, so the batch's progress was never folded into the shards' items;
// the init item deleted by hand took a COMPLETED parent's state with it,
// the parent was read again after its child, and every start stopped with
// a ParentAfterChildError. Other hosts now fold a gone committer's batch.
// TestAnotherHostFoldsTheProgressOfACommitterThatLeft.
func TestAnInitialisationWhoseCommitterLeftIsFoldedByAnotherHost(t *testing.T) {
	replaySeed(t, 60080300, 2)
	replaySeed(t, 60057535, 2)
	replaySeed(t, 60059801, 2)
}

// Seed 60037776 (the simulation's own error; 2 runs in 12): a host paused
// with a batch of a shard in flight; the operator rewound the shard past
// those records, another host read it to its end and its child, and the
// paused host's batch landed after the child's first records. The loss
// oracle owed those records nothing (the rewind skipped them); the order
// oracle still counted them. It now counts what the loss oracle owes
// (docs/operations.md says such a batch may land after the children).
func TestARecordARewindSkippedIsOwedNoOrder(t *testing.T) {
	replaySeed(t, 60037776, 4)
}

// Seed 90014580 (Run stopped; every run): with StreamRecreatedStartOver, a
// position refused by a re-created stream was explained while
// DescribeStreamSummary failed (reset for 21 s) and then while the stream
// was deleted again: the Loader stopped for the refused position instead
// of waiting for the stream and starting over. explain now keeps asking
// within StreamWaitTimeout when start-over is configured, and a stream it
// finds gone or going is waited for.
func TestARefusedPositionIsStartedOverThroughADescribeOutage(t *testing.T) {
	replaySeed(t, 90014580, 2)
}

// Seed 90004365 (no liveness; 7 runs in 60): a fleet host paused past its
// fence, then slowed by table latency, won a shard by a take that landed
// as it fenced itself (or whose answer it lost): it held no lease for it,
// while the item named it owner. Another host asked
// for the shard, reserving it: the owner gave up only shards it was sure
// of, no host takes a live host's shard, and the shard was read by no one
// for the 300 s after the faults healed. The owner now gives such a
// shard up to the asker.
// TestAHostGivesUpAShardItsTakeWonUnbeknownWhenAskedForIt.
func TestAShardAFencedTakeWonIsGivenUpToTheHostThatAsked(t *testing.T) {
	replaySeed(t, 90004365, 6)
}

// Seed 110017179 (Run stopped; every run): a fleet host initialising with
// LATEST was killed between the start batches it hands sinktest.Memory: a
// child's start (begun, after its records before T0) was stored, its
// parent's (SHARD_END: the parent closed before T0) was not. The init
// item, holding T0, was then deleted by hand. Every later start found no
// T0, no progress in the table and the Sink's rows, read the parent from
// TRIM_HORIZON after the child, and stopped with a ParentAfterChildError.
// The starts are now stored parents first.
// TestTheSinkNeverHoldsAChildsStartWithoutItsParents.
func TestTheSinkHoldsNoChildsStartWithoutItsParentsAfterTheInitItemIsLost(t *testing.T) {
	replaySeed(t, 110017179, 1)
}

// Seed 110105956 (LOSS; every run): the init, identity and only shard item
// were deleted by hand while a host read the shard. The host stopped: its
// release found the shard's item gone and dropped the position, which no
// other item held. The fleet then looked new, the next host resolved
// LATEST at a fresh T0 and wrote the items again (so the operator's
// restores failed), and what the stream received between the T0s was
// never read. A release now writes a missing item again with the position
// reached: the next Join refuses with ErrIdentityMissing until the
// identity item is restored.
// TestAReleaseWritesAgainTheItemOfItsShardDeletedByHand.
func TestAShardItemDeletedByHandIsWrittenAgainByItsReleaseWithThePositionReached(t *testing.T) {
	replaySeed(t, 110105956, 1)
}

// Seed 110076524 (LOSS in the oracle's eyes; about 1 run in 10): an
// operator's rewind of every shard to TRIM_HORIZON, then a shard's item
// deleted by hand before any host took the rewound lease. A starting host
// wrote the item again (at TRIM_HORIZON, as a shard it could not tell from
// one born since), so the operator's restore failed; a running host took
// it and resumed where its own view had the shard, before the rewind,
// which lived only in the deleted item. The records the rewind asked for
// again were not delivered again. The Loaders did as docs/fleet.md says;
// the oracle now voids a rewind lost with its shard's item, deleted by
// hand after it and written again before the restore (world.voidRewinds).
func TestARewindLostWithItsShardItemDeletedByHandIsOwedNothing(t *testing.T) {
	replaySeed(t, 110076524, 30)
}

// Seed 8080248 (Run stopped; about 1 run in 3): with start-over, a fleet
// host paused past the stream's second re-creation woke and took leases of
// the old generation as it was being stopped; its loops' stored positions
// were refused by the new stream, and the drain of the stopping session
// took the first failure as Run's, unexplained: a refused position, not a
// re-creation. The drain now explains it as finish does.
// TestARecreationReportedAsTheLoaderPausesIsStartedOverAfterThePause.
func TestALoopFailureMetWhileASessionStopsIsExplainedAsARecreation(t *testing.T) {
	replaySeed(t, 8080248, 20)
}

// Seed 10077635 (LOSS: no liveness; about 1 run in 5): a parent shard's
// item, COMPLETED, was deleted by hand and restored from its backup; a
// host paused for 30 s then took the shard from its view of the item's
// first life, ACTIVE, at the version the restored copy had again (a
// created item started at version 1): the take landed, the parent was
// ACTIVE again after its child was read, and every start stopped with a
// ParentAfterChildError. A Table now creates an item at a version its key
// never had (tabletest's DeleteConditional fails before the fix).
func TestATakeFromAViewOfADeletedItemDoesNotLandOnItsRestoredCopy(t *testing.T) {
	replaySeed(t, 10077635, 30)
}

// Seed 3065314 (LOSS; every run since it was found, unanalysed until the
// seeds of every earlier failure were replayed): a fleet's init and only
// shard item were deleted by hand and written again by the next
// initialisation before the restores, which found no T0, took the stream
// for a new one and resolved LATEST at a fresh T0: what arrived between
// the T0s was never read. The first initialisation's T0 is now kept in
// the identity item too.
// TestTheFirstT0OutlivesTheInitItemInTheIdentityItem.
func TestAnInitialisationAfterTheInitItemIsDeletedResolvesAtTheFirstT0(t *testing.T) {
	replaySeed(t, 3065314, 1)
}

// Seed 3130153 (Run stopped; about 1 run in 10): a fleet host's first
// DescribeStreamSummary answer waited through a table outage while the
// stream was re-created twice more; the host took the stream for another
// than the fleet's, asked to start the fleet over to the older stream,
// was refused (the fleet moves only forward) and stopped. A Run whose
// answer is no later than the stored identity now asks again.
// TestAnAnswerOlderThanTheStoredIdentityIsAskedAgain.
func TestAStaleDescriptionIsAskedAgainBeforeAStartOver(t *testing.T) {
	replaySeed(t, 3130153, 20)
}

// Seed 200044146 (about 1 run in 3, on the oracle of ace7aa9): an
// operator's rewind moved a shard forward, past records never read; the
// shard's item, holding the rewind, was then deleted by hand and written
// again by a host before the restore, which voided the rewind. The voided
// rewind owed the records it had skipped again. A void rewind now only
// stops owing what it asked delivered again; what it skipped stays
// skipped.
func TestAVoidRewindStillSkipsWhatItMovedPast(t *testing.T) {
	replaySeed(t, 200044146, 40)
}

// Seed 239000561 (LOSS, every run): the identity, init and only shard
// items deleted by hand within five seconds of the first initialisation,
// while its host read the shard. A host joining found no item that showed
// the fleet had read the stream, initialised it afresh at a T0 of its own
// (its items then made the operator's restores fail), took the shard from
// the reading host, and what arrived between the two T0s was never read.
// The reading host's positions now show the read: Join refuses with
// ErrIdentityMissing until the identity item is restored.
// TestJoinRefusesAMissingIdentityWhenOnlyAHostsPositionsShowTheRead.
func TestAFleetWhoseItemsWereAllDeletedIsNotInitialisedAgainWhileAHostRead(t *testing.T) {
	replaySeed(t, 239000561, 1)
}

// Seed 239002964 (LOSS in the oracle's eyes, every run on the code
// before): with a TransactionalSink, an operator's rewind landed while a
// host's Loader initialised, between its read of the rewinds and its Save
// of the Sink's checkpoints (read before the rewind). The Save merged the
// Sink's further position over the rewound item: the next owner set the
// Sink's checkpoint back to the rewind's but read on from the Sink's old
// position, and the records the rewind asked again never came. Found by a
// review (02a8b2a) as the simulation gained rewinds with a
// TransactionalSink, which finds it too.
// TestASaveOfPositionsReadBeforeARewindDoesNotUndoIt.
func TestARewindIsNotUndoneByTheSinksCheckpointsReadBeforeIt(t *testing.T) {
	replaySeed(t, 239002964, 1)
}

// Seed 245011133 (no liveness, about one run in two on the code before;
// 245000697, 245004751, 245007522, 245010607, 245000864 and 245010699
// too): in a fleet balancing by throughput, host h2 was paused until it
// fenced itself, and ran again. It took back one of the two shards the
// table still named it owner of, its fair share of three among three
// hosts, and left the other. No host takes a live host's shard, and the
// idle host asked for one of the host that published the highest load;
// h2's published load counted only the lease it held, so it asked h0,
// whose one shard it could not take without moving the imbalance. The
// shard was read by no one until the end. A host now takes back every
// shard still its own. TestAFencedHostTakesBackEveryShardStillItsOwn.
func TestAShardAFencedHostStillOwnsIsReadAgainWhenBalancingByThroughput(t *testing.T) {
	replaySeed(t, 245011133, 4)
}

// Seed 248600504 (LOSS, every run on the code before): a fleet of one
// shard, its only host killed; the shard's item deleted by hand, then a
// host joined, read the init item committed, and ran its start-up on the
// committed batch. The init item was deleted by hand during that
// start-up, and the store's Started read the table again: no committed
// initialisation, so the Loader took the start-up for the stream's first
// and resolved LATEST at a T0 of its own. The records since the last
// position a host committed were never read. Found by the simulation as
// it gained the planned-move oracle.
// TestTheStoreOfACommittedStartUpSaysStartedAfterTheInitItemIsDeleted.
func TestAStartUpOnACommittedBatchIsNoFirstRunWhenTheInitItemGoes(t *testing.T) {
	replaySeed(t, 248600504, 1)
}

// Seed 252549814: a fleet host was paused while it resolved its start-up,
// and the stream was re-created twice meanwhile; resumed, it resolved
// with a sequence number of the old stream, which the new one refused
// ("did not come from this stream"), and Run stopped with Kinesis's error
// (every run before the fix, on this session's first code too) instead of
// starting over. A failed resolve now asks whether the stream was
// re-created, as a failed read does.
func TestAStartUpResolvedAcrossARecreationStartsOver(t *testing.T) {
	replaySeed(t, 252549814, 3)
}
