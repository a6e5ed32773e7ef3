// Package kinesisload loads a Kinesis data stream into a [Sink] and never
// loses its place.
//
// A [Loader] composes three parts: a [scan.Resolver] that turns LATEST into
// concrete positions, a [PositionStore] that keeps every decision durable
// (by default a [JournalStore] on a [journal] directory), and one consume
// loop per shard that hands records to the Sink and commits only what the
// Sink accepted.
//
// # Lifecycle
//
// [Loader.Run] first checks that the stream is the one its progress was
// stored for: a stream is its ARN and creation timestamp
// ([StreamIdentity], from DescribeStreamSummary), journaled before the first
// decision and checked on every Run and after every ListShards. A stream
// deleted and created again under the same name reuses the shard IDs, so
// the old positions would skip or misplace the new stream's records: Run
// stops with a [*StreamMismatchError], or, with
// [Config.OnStreamRecreated] = [StreamRecreatedStartOver], archives the old
// progress in the store and reads the new stream as on a first run.
//
// Then it initialises: it loads the stored progress (and, for a
// [TransactionalSink], the Sink's own checkpoints, taking the furthest of the
// two for every shard), lists the shards, resolves every tracked shard
// whose position is LATEST as one batch, and saves the whole batch in one
// atomic step (one journal record, or for a batch too large for one record
// several parts that only their commit record publishes). LATEST means the
// stream at T0, Kinesis's clock when the first Run began (the Date of its
// first answer, DescribeStreamSummary's, less the time elapsed since Run
// was called): each shard starts just after the last record that arrived
// before T0, however long the resolution takes. T0 is the first Run's
// first durable write, saved with the stream's identity before anything
// else (in a [StartStore], which [JournalStore] is), so a start-up that
// dies at any later point resolves at the same T0 when it runs again, and
// so does a fleet host that takes the initialisation over; it is cleared
// once the batch is saved. Every shard is resolved at T0 whatever its
// state when listed: a shard that closed after T0 (split or merged during
// the start-up, or before a restart or a takeover) still has records at or
// after T0, which are read before its children's; a closed shard whose
// scan proves it has none is COMPLETED without being read. A stream
// adopted by a start-over resolves at [StartOverT0], its creation: LATEST
// is its beginning.
// Only then does any consume loop start, for
// any shard, open or closed: a shard split or merged while its scan was
// running waits too. If initialisation is paused, closed or cancelled, or a
// shard fails, nothing of the batch is published. A [TransactionalSink]
// then stores every start it does not hold yet (a batch with no records),
// before any shard is read, so that it needs no journal to know them.
//
// Each shard is a node of the lineage graph with a durable state:
// DISCOVERED, PENDING_PARENT, ACTIVE, DRAINING (its last record has been
// read) and COMPLETED (the commit covering its last record is durable). A
// child becomes ACTIVE only when every parent is COMPLETED, and starts at
// TRIM_HORIZON. ListShards is the source of truth; a ChildShards hint from
// GetRecords only makes the Loader list sooner. A tracked shard that
// disappears before it is COMPLETED (its records expired unread), or that
// is COMPLETED in the store while ListShards lists it open, stops the
// Loader with [ErrLineage]; one that disappears after it is COMPLETED is
// forgotten by a store that is a [Pruner], so the store stays the size of
// what Kinesis lists. No run delivers a parent's record after a
// record of its child: a configuration that would (a selection widened to a
// parent whose child was already read) is refused with a
// [ParentAfterChildError] before anything is read, until the parent is
// started at SHARD_END or named in [Config.OutOfOrderShards].
//
// A shard's end is believed only when it is confirmed: an answer without
// NextShardIterator that carries ChildShards, or ListShards listing the
// shard closed. Any other answer claiming an end, and an empty answer, is
// retried like a transient error.
//
// A consume loop reads one page ahead while the Sink works on the current
// one, follows empty pages, waits [Config.IdleWait] at the tip, keeps within
// five GetRecords calls and 2 MiB per second per shard (counting each call
// from when Kinesis served it, so that network delay does not bunch calls
// up, with a few milliseconds to spare per second), backs off with jitter
// when throttled, and replaces an expired iterator with one just after the last
// record it read. Across all shards, the bytes of records held (pages
// fetched ahead and pages in the Sink) stay within
// [Config.MaxBufferedBytes] and the Deliver calls in progress within
// [Config.MaxConcurrentDeliveries]; shards wait for either in turn. After
// the Sink accepts a batch, the loop saves
// AFTER_SEQUENCE_NUMBER of its last record; after the batch that ends a
// closed shard, COMPLETED and SHARD_END.
//
// # Batches for the destination
//
// By default every page is one Deliver. [Config.MaxBatchRecords],
// [Config.MaxBatchBytes] and [Config.MaxBatchWait] make a shard's pages
// accumulate in a window, delivered as one batch with one checkpoint and
// committed once, while the shard is read on; a window closes at its
// bounds, at its wait, at the shard's end, at a stop, or early when the
// pages it holds are needed within [Config.MaxBufferedBytes]. A
// [MultiSink] takes the windows of every shard at once (DeliverMulti, one
// batch per shard, each with its checkpoint and epoch); a
// [TransactionalMultiSink] stores them in one transaction, applying the
// fleet's checks per shard, and names the shards it fences with a
// [*ShardsFencedError]: the Loader drops those and delivers the rest again.
// A child joins a window only after the window holding its parents' last
// records is committed. [HookWindowDelivered] and [Loader.Stats] show the
// windows, what closed them and what waits in them.
//
// With [Config.ReadMode] [ReadFanOut] the pages come from enhanced fan-out
// subscriptions ([Subscriber]) instead of GetRecords: the Loader registers
// or reuses the consumer [Config.ConsumerName], subscribes to each shard it
// reads after its last committed record, renews each subscription before
// Kinesis's 5 minutes, and takes an event only once the previous page was
// handed on and its bytes fit the buffer budget. Everything after the
// page (the Sink, commits, lineage, the confirmed end) is the same.
// Resolving LATEST still reads with GetRecords. To try fan-out on the
// kinesis-local emulator, whose subscriptions the stock SDK client cannot
// read, use a client from
// [github.com/tidemark/tidemark/kinesisload/kinesislocal.NewClient].
//
// [Loader.Close] is the graceful stop: batches in flight finish and commit.
// Cancelling Run's context is the hard stop: they are cancelled and not
// committed. After a hard stop Run returns within about a second even if a
// Sink ignores its context ([StuckError]), and commits nothing more.
//
// # Retries
//
// Transient failures are retried, never turned into a stop: throttling,
// 5xx and InternalFailure, timeouts, reset or refused connections,
// truncated answers and expired iterators are retried without limit by
// default, with capped, jittered exponential backoff
// ([Config.KinesisBackoff] to [Config.KinesisMaxBackoff]; throttles wait
// half as long). There is one retry layer: the SDK's own retries are off
// for every call the Loader makes. An initialisation that fails
// transiently publishes nothing and is started over. Every retry is
// reported to [HookRetry] (and [HookThrottled]) with its attempt count, to
// the log, and to [Loader.Stats], so a Loader waiting out an outage is
// visible, and it catches up once Kinesis answers again.
//
// A Sink's refusals are transient too unless it marks them permanent
// ([Permanent]): a batch refused with a transient error is retried
// without limit by default, backing off from [Config.SinkBackoff] to
// [Config.SinkMaxBackoff], each retry reported like Kinesis's, so that
// an outage of the destination is waited out and loading resumes after
// it.
//
// Only what no retry can fix stops [Loader.Run]: access denied, an unknown
// stream or shard, invalid configuration, a lineage violation, a corrupt
// journal or a failed save, a Sink's permanent error or panic, and, when
// [Config.SinkRetries] or [Config.KinesisMaxAttempts] bounds the retries,
// a transient failure that outlasted the bound. Such a stop is a [*RunError] naming the stream, the shard
// and the operation; errors.Is tells its class: [ErrSink], [ErrKinesis],
// [ErrLineage], [ErrJournal] or [ErrInvalidConfig].
//
// # Coordination
//
// The Loader learns through a [Coordinator] which shards it may read, who
// initialises the stream, and whether a commit may land (session.go and
// consume.go are where a shard's life on this host is decided). Each
// session joins the stream's fleet ([Coordinator.Join]) and initialises through
// [Membership.Initialise] (once for the whole fleet; nothing is visible
// before its commit). It then offers the shards ready in its view to
// [Membership.Acquire] and reads only those whose [Lease] it is granted;
// every position is committed by [Lease.Commit] under the lease's fencing
// epoch. A lost lease ([Lease.Lost], a commit refused with
// [ErrLeaseLost], or a batch a [TransactionalSink] refused with it) stops
// the shard at once and commits nothing more; a
// handoff ([Lease.Handoff]) stops it after the batch in flight is
// committed, then releases it, so a planned move delivers nothing twice.
// The default, [NewStoreCoordinator], is the single process over the
// PositionStore: it grants every ready shard and never takes one back.
// [WithCoordinator] selects another; the sub-package
// [github.com/tidemark/tidemark/kinesisload/coordtest] holds an in-memory
// fleet and the conformance suite every implementation can run. Each lease
// this host starts reading under, loses, or hands off is reported, with its
// epoch and why ([AcquireReason], [LostReason], [HandoffReason]), to
// [HookLeaseAcquired], [HookLeaseLost] and [HookLeaseHandedOff], and the
// leases held are in [Stats].Leases. In a fleet, a stream re-created under
// its name with [StreamRecreatedStartOver] moves every host at once to a
// new generation of the shared progress, initialised as a first run (see
// [Membership.Store]).
//
// # The guarantee
//
// From the first Run's first durable write (T0 with the stream's identity;
// see the tidemark package and docs/guarantee.md), every record that
// arrives in a shard after that shard's resolved start is delivered to the
// Sink at least once, in shard order, and a parent's records are all delivered and
// committed before any of its children's. A record is delivered again only
// if the process stopped between the Sink's acceptance and the durable
// commit. With a [TransactionalSink], which stores each batch's checkpoint
// with its records, delivery is exactly once. This holds across crashes,
// restarts, pauses, expired iterators, throttling and resharding, as long as
// Kinesis still retains the records, and as long as the journal lives: with
// a plain [Sink] the journal is the only record of the positions, and a
// lost journal makes the next Run a first run (LATEST is resolved again,
// later). A [TransactionalSink] holds every position itself, starts
// included, so its journal may be lost.
//
// In a fleet ([WithCoordinator]) the guarantee is the same fleet-wide:
// duplicates come only from batches in flight (or commits not yet written)
// when a lease moved unplanned, and with a [TransactionalSink] delivery is
// exactly once even while a host that lost a shard's lease (paused past
// it, cut off from the coordinator) is still delivering, because the
// Sink's transaction is the last fence. It must store each shard's
// checkpoint and [Batch.Epoch] with the records, lock the shard's row
// (creating it first when the shard has none), and check in this order: (a) a checkpoint not further than the stored one is
// stored already: return nil; (b) an epoch below the stored one is a host
// that lost the lease: store nothing and return an error wrapping
// [ErrLeaseLost] (the Loader stops that shard as a lost lease of reason
// [LostSinkFenced] without retrying, and Run goes on); (c) an epoch above
// it is a new owner whose first batch may overlap what the Sink holds:
// store only the records after the stored checkpoint; (d) at the same
// epoch the batch follows the stored checkpoint. See [TransactionalSink]
// for the details.
//
// It holds across a [journal.Repair] too. A repair that removed records
// may have removed a shard's resolved start; such a shard is never given a
// freshly resolved LATEST (which would skip what arrived in between): it
// starts at AT_TIMESTAMP of the journal's last surviving write minus
// [RepairRewind], or, when no write time survived, Run stops with a
// [*RepairedJournalError] naming the shards.
//
// # KPL aggregation
//
// Producers that write through the Kinesis Producer Library (or its
// aggregation modules) pack many user records into one Kinesis record: the
// magic bytes F3 89 9A C2, a protobuf AggregatedRecord, and the MD5 of the
// protobuf; package [github.com/tidemark/tidemark/kpl] reads and writes
// the format. By default (Config.Decoder nil) the Loader delivers such a
// record as its user records, in order, each with its partition key,
// explicit hash key, data, the Kinesis record's SequenceNumber and
// ArrivalTime, and its index as SubSequenceNumber. (SequenceNumber,
// SubSequenceNumber) is unique per user record: the key for idempotent or
// transactional writes. Data aliases the bytes of the Kinesis record it
// came from: no copy per user record.
//
// A record without the magic bytes is delivered as read. A record with
// them that fails a check (too short, MD5, protobuf wire format, a missing
// required field, an index out of range, no user records) is delivered as
// one plain record too, as KCL does, and reported to [HookDecodeFailed]:
// nothing is dropped, and nothing panics. [RawDecoder] turns
// de-aggregation off; any [Decoder] can replace it.
//
// A user record whose hash key (its explicit hash key, else the MD5 of its
// partition key) is outside the hash key range of the shard it was read
// from is delivered like the others and reported to
// [HookHashKeyOutOfRange]. KCL drops the whole aggregate instead, so that
// after a reshard a record routed by a stale producer is not processed
// twice (once from the wrong shard, once from the right one). But Kinesis
// stores an aggregate in exactly one shard, the one its own key chose, and
// no other shard holds a copy of its user records: dropping them loses
// them. Delivering them is safe for the guarantee: they are read once, in
// that shard's order, and checkpointed with it. What a Sink gives up is
// only that a user record may come from a shard other than its key's, so a
// Sink must not assume per-key order across shards for such records.
//
// An aggregate is never split across batches: the Loader hands every page
// read to the Sink as one batch, or, with MaxBatchRecords, MaxBatchBytes or
// MaxBatchWait set, gathers whole pages into windows, so every Checkpoint
// is after a whole Kinesis record, and a restart never repeats or skips
// part of an aggregate.
//
// # Tests
//
// The sub-package [github.com/tidemark/tidemark/kinesisload/kinesistest]
// is an in-memory Kinesis with the real limits and fault injection, for
// testing a Sink without AWS; its Aggregate writes KPL aggregated records.
// The sub-package [github.com/tidemark/tidemark/kinesisload/sinktest]
// holds an in-memory [TransactionalSink] that keeps the fleet contract and
// the conformance suite that checks a TransactionalSink against it.
package kinesisload
