// Package tidemark loads an AWS Kinesis data stream into your destination
// and never loses its place.
//
// # The problem
//
// A Kinesis consumer that starts a shard at LATEST usually keeps the
// symbolic position LATEST until its first record is committed. If the
// reader's iterator is lost before then (empty polling, an aborted batch, a
// timeout, a restart, a lease moving to another host), the next reader asks
// for LATEST again, gets a later tip, and silently skips every record that
// arrived in between: R1..R3 are in the shard, the reader starts after R3,
// R4 and R5 arrive, the reader dies before committing, and its replacement
// starts after R5.
//
// # The guarantee
//
// tidemark resolves LATEST into a concrete position (the shard's last
// sequence number, or TRIM_HORIZON for an empty shard), journals the whole
// batch durably, and only then starts reading. Every record that arrives in
// a shard after that shard's resolved start is delivered at least once, in
// shard order, and a parent shard's records are all delivered and
// committed before any of its children's (after a split or a merge).
// Progress is committed only for records the Sink accepted. With a
// transactional Sink, which stores each batch's position with its records,
// delivery is exactly once. This holds across crashes, restarts, aborted
// batches, expired iterators, throttling and resharding, as long as
// Kinesis still retains the records.
//
// When the promise starts: LATEST means the stream at T0, the moment the
// first Run began, on Kinesis's clock (the Date of its first answer, less
// the time elapsed since Run was called: never later than the real moment,
// at most about a second earlier). T0 is the first Run's first durable
// write, made as soon as Kinesis first answers; from then on every record
// that arrives at or after T0 is delivered, in every shard, also one that
// splits or merges while the start-up runs, however long the start-up
// takes and however often it is stopped and started again. A first Run
// stopped before that write promised nothing: the next Run takes its own
// T0. A stream deleted and re-created under the name and adopted with
// kinesisload.StreamRecreatedStartOver arrived wholly after T0, so LATEST
// there means its beginning.
//
// # Lifecycle
//
//  1. kinesisload.New validates the configuration.
//  2. Loader.Run journals T0 with the stream's identity, loads the journal,
//     lists the shards, resolves every LATEST (open or closed shard) to
//     just after the last record that arrived before T0 with a
//     scan.Resolver (a bounded worker pool shared by the process, reading
//     only the recent end of each shard), journals the batch in one atomic
//     step, and only then starts one consume loop per shard whose parents
//     are complete.
//  3. Each loop hands records to your kinesisload.Sink and commits the
//     position after the Sink accepted them.
//  4. Loader.Close stops reading, lets in-flight batches finish and commit,
//     and returns.
//
// Transient failures (throttling, 5xx, timeouts, lost connections, expired
// iterators) are retried without limit, with capped jittered backoff, and
// reported to hooks, logs and Loader.Stats; Run stops only for what no retry
// fixes (access denied, bad configuration, a lineage violation, a corrupt
// journal, a Sink that gave up), with a typed kinesisload.RunError.
//
// # Packages
//
//   - [github.com/tidemark/tidemark/kinesisload]: the Loader, the Sink and
//     PositionStore interfaces, the shard lineage.
//   - [github.com/tidemark/tidemark/kinesisload/kinesistest]: an in-memory
//     Kinesis with the real limits and fault injection, for your tests.
//   - [github.com/tidemark/tidemark/kinesisload/kinesislocal]: a client for
//     the kinesis-local emulator that reads in both modes, enhanced fan-out
//     included, for local testing only.
//   - [github.com/tidemark/tidemark/kpl]: the KPL aggregated record
//     format (aggregate, de-aggregate), which the Loader de-aggregates.
//   - [github.com/tidemark/tidemark/scan]: positions and the resolver.
//   - [github.com/tidemark/tidemark/journal]: the durable write-ahead
//     journal that holds every decision.
//   - [github.com/tidemark/tidemark/kinesisload/fleet]: the fleet protocol
//     (leases, heartbeats, the shared progress) over a small Table
//     interface, its memory table and conformance suite.
//   - [github.com/tidemark/tidemark/kinesisload/sinktest]: the Sink
//     conformance suite and an exactly-once in-memory Sink.
//   - [github.com/tidemark/tidemark/kinesisload/coordtest]: an in-memory
//     fleet for your tests.
//   - Modules of their own, so that the core needs none of their
//     dependencies: kinesisload/dynamo (the fleet on DynamoDB),
//     kinesisload/pgsink (a PostgreSQL Sink), kinesisload/kotel
//     (OpenTelemetry metrics) and cmd/tidemark (the operator's command).
package tidemark
