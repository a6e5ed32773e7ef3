// Package pgsink is an exactly-once
// [github.com/tidemark/tidemark/kinesisload.TransactionalMultiSink] on
// PostgreSQL (pgx v5): a kinesisload.Loader stores each window of batches
// (every shard's records with COPY, and every shard's checkpoint and
// lease epoch) in one transaction, exactly once, in a fleet too.
//
// It is a module of its own, so that tidemark itself needs no SQL driver.
//
//	db, err := pgxpool.New(ctx, dsn)
//	...
//	if err := pgsink.CreateSchema(ctx, db); err != nil { ... } // waits while the database is down
//	sink, err := pgsink.New(db, pgsink.Config{})
//	...
//	cfg := kinesisload.DefaultConfig()
//	cfg.Stream, cfg.Sink, cfg.Dir = "orders", sink, dir
//	cfg.MaxBatchWait = time.Second // one transaction a second for every shard
//
// # What a transaction checks
//
// [Sink.DeliverMulti] locks every shard's row of tidemark_checkpoints (in
// the order of stream and shard; a shard without one gets it first, so
// that a concurrent transaction of the shard waits), then applies the
// checks (a)-(d) of kinesisload.TransactionalSink to each shard's batch:
// a batch stored already stores nothing (a); a batch of a lease that a
// newer owner holds refuses the whole window with a
// kinesisload.ShardsFencedError naming its shards (b), and the Loader
// delivers the rest again without them; a new owner's batch stores only
// what follows the stored checkpoint (c); an overlap within one lease is
// a bug (d). The row keeps two epochs: position_epoch, the epoch of the
// batch that stored the checkpoint (compared in (c) and (d)), and epoch,
// the highest delivered (raised by (a): the sooner fence the contract
// allows, which refuses a zombie as soon as a new owner delivered
// anything). The conformance suite of kinesisload/sinktest, its
// multi-shard cases included, runs on it.
//
// # Timeouts: a frozen host does not hold a shard
//
// A host frozen or cut off inside its transaction holds its shards'
// row locks; the new owner of a shard waits for them. [Config]'s
// StatementTimeout and IdleInTransactionTimeout (5 s each by default) make
// the server end such a transaction; keep them below the fleet's lease
// duration (see [Config]).
//
// # Errors
//
// An error no retry fixes (an overlap, a duplicate row, an error of the
// data or the statement) is permanent (kinesisload.Permanent) and stops
// the Loader naming the shard; any other, such as the database being down,
// is transient and retried by the Loader without limit by default, so a
// fleet waits an outage out. [CreateSchema] waits too.
package pgsink
