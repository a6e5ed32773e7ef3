// Package coordtest is an in-memory fleet of hosts sharing streams through
// the coordination seam of [github.com/tidemark/tidemark/kinesisload]
// ([kinesisload.Coordinator]), and the conformance suite every
// Coordinator implementation can run ([Run]).
//
// [New] returns a [Fleet]: one in-memory table per stream (per generation
// of it, see below) holding an item
// per shard (owner, fencing epoch, progress, pending initialisation
// positions, handoff request), the initialisation item (lock and commit)
// and a heartbeat item per host. Every write is a single-item conditional
// write, as the DynamoDB implementation's must be. [Fleet.Host] returns a
// host, a Coordinator for [kinesisload.WithCoordinator].
//
// The protocol it implements:
//
//   - Heartbeats: each host increments its own counter once per
//     RenewInterval (one write per host per round, however many shards).
//     A host is dead in an observer's view when its counter has not moved
//     for LeaseDuration of the observer's own clock; clocks of different
//     hosts are never compared.
//   - Self-fencing: a host whose last heartbeat that landed began
//     LeaseDuration-FenceMargin ago loses all its leases (Lease.Lost is
//     closed) and commits nothing more, before any other host can see it
//     dead.
//   - Leases: taking a shard sets owner = me and epoch+1 on condition that
//     owner and epoch are what the taker read; every Commit is conditional
//     on owner = me and epoch = mine.
//   - Initialisation: a host wins the lock (conditional write of a fresh
//     token), writes the batch as pending positions under its token, then
//     writes the commit naming the token on condition that the lock is
//     still its own. Only the committed batch's positions are visible.
//     The lock holder's store is a [kinesisload.StartStore]: T0 is saved
//     in the init item under the lock's token and kept by every later
//     holder, so a host that takes the initialisation over resolves at
//     the first T0.
//   - Balance: fair share by count (ceil(leasable/live hosts)); free
//     shards (unowned, expired, reserved for the taker) first; otherwise
//     at most one steal at a time, from the most loaded host holding at
//     least two more: a handoff request that the owner answers by
//     committing its batch in flight and releasing; the shard stays
//     reserved for the requester.
//   - Children: a shard is granted only while every parent in the table
//     is COMPLETED.
//   - Start-over of a re-created stream: the identity item holds the
//     identity and the generation in force, and each generation has a
//     table of its own. A host's StartOver is one conditional write of the
//     identity item to the next generation; a session belongs to the
//     generation it joined, and once a round reads a later one its leases
//     are lost ([kinesisload.LostStartedOver]) and its Acquire, Initialise
//     and Identity return an error wrapping a
//     [*kinesisload.StreamMismatchError], so the Loader joins the new
//     generation and initialises it as a first run. The old generations
//     stay ([Fleet.Generations], [Fleet.ShardsOf]).
//
// Time moves only by [Fleet.Advance], which runs every live host's round
// on that host's own goroutine and waits for it. The fault hooks
// ([Fleet.Kill], [Fleet.Pause], [Fleet.Resume], [Fleet.Refuse],
// [Fleet.LoseAnswers], [Fleet.Skew]) replay the races of a real fleet.
package coordtest
