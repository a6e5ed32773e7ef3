// Package sinktest is the reference in-memory
// [github.com/tidemark/tidemark/kinesisload.TransactionalSink] ([Memory])
// and the conformance suite of the TransactionalSink contract ([Run]),
// which any implementation can run, as
// [github.com/tidemark/tidemark/kinesisload/kinesistest] is for Kinesis
// and [github.com/tidemark/tidemark/kinesisload/coordtest] for a
// Coordinator.
//
// The contract (see [kinesisload.TransactionalSink]) keeps delivery
// exactly once in a fleet even while a host that lost a shard's lease is
// still delivering. Per shard the Sink stores the checkpoint and the epoch
// in the same transaction as the records and, under the shard's lock,
// checks in order: (a) a checkpoint not further than the stored one is
// stored already, a no-op; (b) an epoch below the stored one is refused
// with an error wrapping [kinesisload.ErrLeaseLost]; (c) a higher epoch
// stores only the records after the stored checkpoint; (d) at the same
// epoch an overlap is an error (a permanent one, [kinesisload.Permanent]).
// [Memory.Store] explains each check; read it as the specification in
// code.
//
// A [github.com/tidemark/tidemark/kinesisload.TransactionalMultiSink]
// applies the checks to each shard of a window in one transaction: it
// stores every shard's batch and checkpoint, or nothing, and refuses the
// shards check (b) fences with a [kinesisload.ShardsFencedError] naming
// exactly them ([Memory.StoreMulti]). Run's cases named Multi... check
// that on a Sink that has DeliverMulti: a window stored whole, a fenced
// shard refused alone while the others are stored when delivered again
// without it, nothing stored of a window with a bug, a new owner's
// overlaps, and a zombie's and a new owner's windows at once.
//
// To check a Sink, give [Run] a [Harness]: handles on one store (a
// zombie's and a new owner's) and a way to read back what a shard
// stores:
//
//	func TestConformance(t *testing.T) {
//		db := openTestDatabase(t)
//		sinktest.Run(t, func(t *testing.T) sinktest.Harness { return myHarness{db} })
//	}
//
// The suite's own tests prove that each case fails for a Memory broken in
// the rule the case checks.
package sinktest
