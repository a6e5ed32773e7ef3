// Package coordtest is an in-memory fleet of hosts sharing streams through
// the coordination seam of [github.com/tidemark/tidemark/kinesisload]
// ([kinesisload.Coordinator]), for tests, and the conformance suite of
// that seam ([Run]).
//
// [New] returns a [Fleet]: hosts of the fleet protocol
// ([github.com/tidemark/tidemark/kinesisload/fleet], the same code that
// runs on DynamoDB) sharing one [fleet.MemoryTable], each through a
// [fleet.FaultyTable] of its own. [Fleet.Host] returns a host, a
// Coordinator for [kinesisload.WithCoordinator]. Time is a manual clock:
// it moves only by [Fleet.Advance], which runs every live host's round
// and waits for it. The fault hooks ([Fleet.Kill], [Fleet.Pause],
// [Fleet.Resume], [Fleet.Refuse], [Fleet.LoseAnswers], [Fleet.Skew])
// replay the races of a real fleet; [Fleet.Shards], [Fleet.Generations]
// and [Fleet.ShardsOf] show the table as [fleet.Inspect] reads it.
//
// The package keeps the API it had when it held a protocol of its own
// (before package fleet): code written against it runs unchanged. The
// positions a host commits are now group-committed, durable within a
// round (see [kinesisload.Lease]): a test that reads [Fleet.Shards] right
// after a Commit advances the fleet's time by a round first.
//
// [Run] checks any Coordinator against the seam's contract: on the
// in-memory fleet ([Fleet.Harness]), and on the default single-process
// coordinator ([Single]).
package coordtest
