// Package fleet is the fleet protocol of tidemark: the one implementation
// of [kinesisload.Coordinator] that lets the Loaders of many hosts share
// the shards of a Kinesis stream with the guarantee of one Loader, written
// against a small [Table] of versioned items.
//
// A table is the protocol's only seam: Get, Query of one partition, Put
// and Delete conditional on an item's version, and SetEntry, which sets
// one entry of an item's map on condition of that entry alone (so that
// every host writes its heartbeat into one item without conflicts). Its
// errors are of three kinds: a conflict ([ErrConflict]), an unknown
// outcome ([ErrUnknown]: a write is read back), and anything else, which
// no retry fixes. [MemoryTable] is a table in memory, [FaultyTable] wraps
// one with faults for tests, package tabletest is the conformance suite
// any table must pass, and kinesisload/dynamo's is DynamoDB.
// kinesisload/coordtest runs hosts of this package on a memory table with
// a manual clock, for users' tests.
//
// # The protocol
//
// A stream's generation has a partition of its own (the stream's name for
// generation 0, "<name>#genN" after N fleet-wide start-overs), which holds:
//
//   - "roster": every host's heartbeat, one entry per host: a counter
//     that moves once a round, how many changes the host made to the
//     table, what it balances by and its load. A host whose round has no
//     positions to write writes its entry (one conditional write) and the
//     answer is the whole roster: it learns every other host's beat
//     without a read. A busy host's round, which writes its positions
//     anyway, carries the counter on its first positions chunk instead
//     and then reads the roster (see below). A host is dead in an
//     observer's view when its counter has not moved for LeaseDuration of
//     the observer's own monotonic clock, on reads made after that;
//     liveness never compares clocks across hosts (epochs carry a floor
//     of the writing host's clock: see epochFloor).
//   - "shard#<id>", one per shard: owner, fencing epoch (it grows on every
//     owner change, and across generations: generation N's start above
//     N<<32), a handoff request, the shard's lineage and state, its
//     position at its last release or state change, and the pending
//     positions of initialisation batches.
//   - "init": the initialisation lock (a token), its commit (the token of
//     the batch that is visible), T0, and the holder's progress.
//
// The stream's own partition also holds "identity": the stream's ARN and
// creation time, the generation in force and the archived ones.
//
// Each host's positions are in a partition of their own per generation
// ("<partition>#pos#<host>", chunks of up to 1,000 shards): a Commit that
// only moves a position is group-committed, written once a round
// (Config.CheckpointInterval) for all the host's shards, under each
// lease's epoch. A commit of a state (DRAINING, COMPLETED) is written into
// the shard's item at once, fenced by owner and epoch.
//
// A host's round: it writes its beat and, when any moved, its positions:
// one write when its roster entry has nothing new to say but the counter
// (the counter rides on the first chunk, field "c"; the round then reads
// the roster, and the beat counts for the host's fence only when both
// the write and the read succeeded and the roster holds its entry as it
// last wrote it), two otherwise. The other hosts read the counter alone
// ([Table.GetField]) of a host whose entry says it may beat there
// ("p=1") and whose entry has not moved for a few rounds, every
// LeaseDuration x (hosts-1)/20, between a round and a lease duration, at
// a phase of their own, so that the fleet reads it about twenty times a
// lease duration whatever its size (every round in a fleet of up to
// three); one of them sees a death about LeaseDuration/20 after it. A
// host whose entry lacks "p=1" (a version before this) reads only the
// roster: while its entry stands (not left, not collected), every host
// beats in the roster. Then it reads the stream's partition only when a host's change count
// moved (a lease taken, released or asked for, a state advanced, a shard
// added: every such write is followed by a write of the writer's roster
// entry) or ResyncInterval passed; it loses the leases whose items name
// another owner or epoch, answers handoff requests, takes free shards up
// to its fair share (unowned, released, reserved for it, or owned by a
// host dead in its view: then it reads that host's positions first, and
// resumes from the position committed under the item's epoch), and asks
// for one shard from the most loaded host when nothing was free. When
// nothing changed a round makes one write and no read.
//
// Every write that matters is conditional: a take on the item's version, a
// commit on owner and epoch. A host fences itself (every lease lost,
// nothing more committed, no Deliver started: see
// [kinesisload.LeaseChecker]) once LeaseDuration-FenceMargin passed since
// the start of its last beat that landed, before any other host can see it
// dead. A write whose answer was lost is read back; a beat that landed
// counts from its own start, never a later one's. Planned moves are
// graceful handoffs: the owner stops reading, commits its batch in flight,
// writes its latest position into the item as it releases the lease.
//
// Initialisation, fleet-wide: a host wins the lock (a conditional write of
// a fresh token), resolves every LATEST and saves the batch as pending
// positions under its token, then commits it by naming the token; only
// the committed batch is visible. The first holder's T0 is kept by every
// later one. A holder that dies, or whose progress (shards resolved,
// retries, writes of its batch) stands still for InitStallTimeout, loses
// the lock to another host; its commit is then refused.
//
// A fleet-wide start-over (kinesisload.StreamRecreatedStartOver) is one
// conditional write of the identity item to the next generation, then a
// mark in the old generation's roster: every host of it learns at its next
// beat (or its next read of the identity item), its leases are lost, and
// its Loader joins the new generation, initialised through its own lock.
// The old generation's items stay, the archive ([Inspect] shows them). A
// Join that finds no identity item while a later generation exists refuses
// with [ErrIdentityMissing] rather than take it for the first; a host of a
// later generation than the identity item names (restored from a backup
// older than the start-over) stops with [ErrIdentityBehind].
//
// # Cost
//
// Writes grow with hosts, not shards: one per host per round (its beat,
// or its positions carrying it), and a few writes per lease move. Reads:
// none in a round where nothing changed and no host is busy; a busy host
// reads the roster every round, and the fleet reads each busy host's
// first chunk about twenty times a lease duration; after a change, a
// read of each shard item the writer's roster entry names (its hint), or
// of the stream's whole partition when no hint covers the change; the
// whole partition once per ResyncInterval otherwise; a read of a dead
// host's positions when its shards are taken. COMPLETED shards that
// Kinesis no longer lists are deleted ([kinesisload.Pruner]). The figures
// are in BENCHMARKS.md.
//
// # Tables of the version before this package
//
// The identity, init and shard items keep the names and encodings of the
// DynamoDB coordinator's tables before this package existed, so such a
// table is read as it is: the new hosts resume every shard where the old
// fleet committed it, with nothing to migrate. Its hosts' heartbeat items
// ("host#<id>") are not written any more: stop the old hosts before
// starting the new ones. A host that sees an older host's heartbeat move
// logs an error (nothing is lost, but shards move back and forth between
// the versions, delivering records again, until the older hosts stop).
package fleet
