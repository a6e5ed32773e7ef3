package sinktest

// flaw is a set of deliberate breaks of the contract in a [Memory], one
// per rule, that the package's tests use to prove the conformance suite
// fails a Sink that breaks that rule. NewMemory sets none.
type flaw uint32

const (
	flawNoA                      flaw = 1 << iota // (a) skipped: a stored batch goes on to (b)-(d)
	flawAOnlyPast                                 // (a) only for a checkpoint strictly behind: an equal one goes on
	flawARaisesEpoch                              // (a) stores a higher epoch as the one epoch
	flawNoB                                       // (b) skipped: a lower epoch is stored like (c)
	flawBNotLeaseLost                             // (b) refuses with an error that does not wrap ErrLeaseLost
	flawCStoresAll                                // (c) stores every record of a new owner's overlap
	flawCAsD                                      // (c) refuses a new owner's overlap as (d) does
	flawCKeepsAtCheckpoint                        // (c) and (d) treat the record the checkpoint is after as not stored
	flawNoD                                       // (d) skips the overlap silently instead of failing
	flawNoEmpty                                   // a batch with no records stores no checkpoint
	flawSeqKey                                    // records keyed by sequence number only: an aggregate keeps its first user record
	flawAllStreams                                // Checkpoints returns the shards of every stream
	flawNoLock                                    // the checks and the write are not one transaction under the shard's lock
	flawAtAsAfter                                 // (c) and (d) take a stored AT_SEQUENCE_NUMBER start for AFTER_SEQUENCE_NUMBER: the record at it counts as stored
	flawTextSeq                                   // (c) and (d) compare sequence numbers as text, not as numbers
	flawNoRowLock                                 // as flawNoLock, but only for a shard with no row yet (SELECT ... FOR UPDATE of a missing row locks nothing)
	flawEmptyNoEpoch                              // a batch with no records stores its checkpoint but not its epoch
	flawDNotPermanent                             // (d) refuses with an error that is not permanent: the Loader retries it without limit
	flawMultiFirstCheckpointOnly                  // DeliverMulti stores every batch's records but only the first batch's checkpoint
	flawMultiOneByOne                             // DeliverMulti is a transaction per batch: a failed call has stored the batches before the failure
	flawMultiStoresAroundFence                    // DeliverMulti stores the others when a shard is fenced, and returns nil
	flawMultiFencesAll                            // DeliverMulti names every shard of the call as fenced when one is
	flawMultiUnnamedFence                         // DeliverMulti refuses a fenced shard with ErrLeaseLost but no *ShardsFencedError
	flawFloatSeq                                  // (a), (c) and (d) compare sequence numbers as float64 (as SQL's seq::float8): 56-digit ones collide
	flawRewindNoop                                // RewindCheckpoint returns nil and changes nothing
	flawRewindKeepsEpoch                          // RewindCheckpoint moves the checkpoint but keeps the stored epoch
)

func (f flaw) has(g flaw) bool { return f&g != 0 }
