package kinesisload

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// Record is one user record as the Loader hands it to a [Sink]: a Kinesis
// record as read, or one of the user records of a KPL aggregated record
// (see the package docs, "KPL aggregation").
//
// The pair (SequenceNumber, SubSequenceNumber) is unique within a shard and
// grows in shard order: it is the key a Sink uses to write a record
// idempotently or to tell a duplicate, aggregated or not (e.g. a primary key
// of shard ID, sequence number and sub-sequence number). Batch.Checkpoint
// is always after a whole Kinesis record: the user records of one aggregate
// are never split across batches.
type Record struct {
	// Data is the record's payload. The Sink may keep it but must not
	// modify it: the user records of one aggregate alias the bytes of
	// the Kinesis record they came from (no copy per user record), so
	// keeping one keeps that record's bytes in memory. Appending to Data
	// copies it (its capacity is its length).
	Data []byte
	// PartitionKey is the key the producer gave the user record (for an
	// aggregate, the one in its partition key table).
	PartitionKey string
	// ExplicitHashKey is the explicit hash key the producer gave a user
	// record of an aggregate, in decimal; empty when none was given, and
	// always for a record that was not aggregated (GetRecords does not
	// return it).
	ExplicitHashKey string
	// SequenceNumber identifies the Kinesis record within its shard; it
	// grows with every Kinesis record (compare with
	// [scan.CompareSequence]). Every user record of one aggregate has the
	// aggregate's sequence number.
	SequenceNumber string
	// SubSequenceNumber is the user record's index inside its aggregate,
	// from 0; 0 for a record that was not aggregated.
	SubSequenceNumber int64
	// Aggregated says the record is one of the user records of a KPL
	// aggregated record.
	Aggregated bool
	// ArrivalTime is when Kinesis accepted the Kinesis record
	// (ApproximateArrivalTimestamp), in milliseconds; the same for every
	// user record of one aggregate.
	ArrivalTime time.Time
}

// Batch is a run of consecutive records of one shard, in shard order.
type Batch struct {
	// Stream and ShardID name where the records come from.
	Stream  string
	ShardID string
	// Records are the records, in shard order. Empty only in a batch for
	// a [TransactionalSink]: the one that stores a shard's start, and the
	// one that ends a closed shard.
	Records []Record
	// Checkpoint is where reading this shard resumes once this batch is
	// stored: AFTER_SEQUENCE_NUMBER of the last record, or SHARD_END when
	// the batch ends a closed shard. In a start batch (no records, for a
	// [TransactionalSink]) it is the shard's start: AFTER_SEQUENCE_NUMBER
	// of the record before it (a resolved LATEST), TRIM_HORIZON,
	// AT_TIMESTAMP, AT_SEQUENCE_NUMBER, or SHARD_END for a closed shard
	// with nothing to read. A [TransactionalSink] stores it in the same
	// transaction as the records.
	Checkpoint scan.Position
	// MillisBehindLatest is how far the batch's last record was behind
	// the shard's tip when it was read.
	MillisBehindLatest int64
	// Epoch is the fencing epoch of the shard's lease the batch is
	// delivered under ([Lease.Epoch]): it grows every time the shard's
	// owner changes in a fleet ([WithCoordinator]). It is 0 without a
	// fleet. A start batch (stored during initialisation, before any
	// lease is taken) has the start epoch of the fleet's generation
	// ([StartEpocher]): 0 in the first, and after a fleet-wide
	// start-over an epoch above every one of the earlier generations and
	// below every lease of the new one. A [TransactionalSink] shared by a
	// fleet stores it with the checkpoint to refuse a host that lost the
	// lease.
	Epoch uint64
}

// Sink is the user's destination.
//
// Deliver stores b and returns nil only when b is safely stored: the Loader
// then commits b.Checkpoint, and will not deliver those records again unless
// the process crashes before the commit is durable (delivery is at least
// once; see [TransactionalSink] for exactly once). Deliver is called
// concurrently for different shards, never concurrently for one shard, and a
// shard's batches come in shard order; a parent shard's last batch is
// committed before any batch of its children is delivered.
//
// A Sink's errors are of two classes, as Kinesis's are:
//
//   - transient, the default: any error not marked permanent. The Loader
//     retries the same batch, backing off from Config.SinkBackoff to
//     SinkMaxBackoff with jitter, without limit by default (a positive
//     Config.SinkRetries bounds the retries; once they are exhausted Run
//     stops as for a permanent error). Every retry is reported to
//     [HookRetry], the log and [Loader.Stats], so a destination that is
//     down (a database restarting, a network partition) is waited out,
//     visibly, and loading resumes when it answers again.
//   - permanent: an error that wraps [ErrPermanent], made with
//     [Permanent] (or any error type whose Is reports ErrPermanent). No
//     retry can fix it (a record the destination cannot take, a schema
//     that does not fit, an invariant broken): Run stops at once with a
//     [*RunError] of class [ErrSink] that names the shard and the batch
//     and wraps the error. A Deliver that panics is permanent too (the
//     stop wraps a [*PanicError]).
//
// Either way nothing after the last accepted batch is committed. An error
// that wraps [ErrLeaseLost] is neither: it is not retried, see
// [TransactionalSink]. Deliver must honour ctx: it is cancelled when the
// Loader is stopped hard.
//
// A plain Sink keeps no positions: the journal (Config.Dir, or the
// [PositionStore]) is then the only record of where each shard resumes and
// of the resolved starts. Lose it and the next Run is a first run: LATEST
// is resolved again, at the tip of that moment, and every record that
// arrived in between is skipped (TRIM_HORIZON delivers the retained
// history again instead). Keep the journal on durable storage, or use a
// [TransactionalSink].
type Sink interface {
	// Deliver stores b; nil means the destination holds it durably, and
	// the Loader may commit past it. See above for what its errors mean.
	Deliver(ctx context.Context, b Batch) error
}

// Permanent marks err as permanent: the error it returns has err's
// message and wraps both err (errors.Is and errors.As see it) and
// [ErrPermanent]. A Sink returns it for a batch that no retry can store,
// and Run then stops at once instead of retrying (see [Sink]). Permanent
// of nil is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() []error { return []error{ErrPermanent, e.err} }

// SinkFunc adapts a function to the [Sink] interface.
type SinkFunc func(ctx context.Context, b Batch) error

// Deliver calls f(ctx, b).
func (f SinkFunc) Deliver(ctx context.Context, b Batch) error { return f(ctx, b) }

// TransactionalSink is a [Sink] that stores each batch's Checkpoint in the
// same transaction as its records, and can load the checkpoints back. With
// one, delivery is exactly once, in a fleet ([WithCoordinator]) too, even
// while a host that lost a shard's lease is still delivering, when Deliver
// keeps the contract below: on start the Loader loads the Sink's
// checkpoints and, for every shard, resumes from the furthest of the Sink's
// and its own journal's (in a fleet: also when it is granted a shard's
// lease, from the furthest of the lease's progress and the Sink's), never
// moving back. A shard whose checkpoint is SHARD_END is complete.
//
// A TransactionalSink also receives batches with no records, so that it
// holds the whole truth without the journal:
//
//   - a start batch for every shard it holds no checkpoint for, during
//     initialisation, after the starts are journaled and before any shard
//     is read: its Checkpoint is the shard's start (a resolved LATEST as
//     AFTER_SEQUENCE_NUMBER, TRIM_HORIZON, AT_TIMESTAMP,
//     AT_SEQUENCE_NUMBER, or SHARD_END). Store it as the shard's
//     checkpoint, like any other; a later batch's checkpoint is further
//     along (order positions as [PositionStore.Save] documents: a start
//     before any record position, SHARD_END last). So a journal lost or
//     deleted before the first record arrives never makes the Loader
//     resolve LATEST again, later. The starts of a shard's parents are
//     delivered (and stored) before the shard's own;
//   - the batch that ends a closed shard when it holds no records, so
//     that SHARD_END is stored.
//
// The contract of Deliver. Per shard, store the checkpoint and the
// epoch ([Batch.Epoch]) in the same transaction as the records. In
// Deliver, lock the shard's row (SELECT ... FOR UPDATE; when the shard has
// none yet, create it first, as with INSERT ... ON CONFLICT DO NOTHING, and
// lock it then: a SELECT ... FOR UPDATE that finds no row locks nothing,
// and two hosts' first batches of a new shard would both be stored) and
// check, in this order:
//
//	(a) b.Checkpoint is not further than the stored checkpoint: the batch
//	    is stored already; do nothing and return nil. It is a re-delivery
//	    after an unknown outcome (the answer to a COMMIT was lost, or ctx
//	    ended during it: the Loader delivers the same batch again), or a
//	    start batch for a shard that has a checkpoint.
//	(b) b.Epoch is less than the stored epoch: the sender lost the shard's
//	    lease to a newer owner (a host paused past its lease that woke up
//	    mid-Deliver). Store nothing and return an error that wraps
//	    kinesisload.ErrLeaseLost. The Loader does not retry it: it stops
//	    that shard at once as a lost lease of reason LostSinkFenced,
//	    commits nothing more of it, and Run goes on.
//	(c) b.Epoch is greater than the stored epoch: a new owner, whose first
//	    batch may overlap what the previous owner stored (the fleet's
//	    progress may lag the Sink: a coalesced commit, or a host that
//	    stored a batch after the new owner had started). Store only the
//	    records after the stored checkpoint (record r is after checkpoint
//	    c when scan.Compare(scan.AfterSequence(r.SequenceNumber), c) > 0; a
//	    checkpoint is always after a whole Kinesis record, so sub-sequence
//	    numbers need no comparison), then the checkpoint and the epoch.
//	(d) the same epoch: the batch must start right after the stored
//	    checkpoint; an overlap is a bug: return a permanent error
//	    ([Permanent]) that does not wrap ErrLeaseLost (Run stops with
//	    ErrSink naming the shard, rather than giving the lease up; an
//	    error that is not permanent is retried first, without limit by
//	    default).
//
// The epoch compared in (b), (c) and (d) is the one stored with the
// checkpoint. These checks store every record once, even when a host that
// lost the lease stores a batch after the new owner's first batch was
// found stored whole by (a): that batch is then the next one of the
// shard, and the new owner finds it stored. A Sink may fence such a host
// sooner by also keeping the highest epoch delivered (raised by (a)) and
// refusing below it in (b), while (c) and (d) still compare with the
// epoch stored with the checkpoint (a new owner's table may lag by more
// than one batch): kinesisload/pgsink does.
//
// See [ErrLeaseLost] and [LostSinkFenced]; kinesisload/pgsink keeps this
// contract on PostgreSQL. To check a Sink against it, run
// [github.com/tidemark/tidemark/kinesisload/sinktest.Run] on it (it
// accepts the sooner fence too); sinktest.Memory is the reference
// implementation in memory, check by check. Order positions as [PositionStore.Save] documents ([scan.Compare]: a
// start before any record position, SHARD_END last). Without a fleet
// every epoch is 0, stored or delivered, and the checks reduce to (a) and
// storing the batch: an error wrapping ErrLeaseLost then cannot be right,
// and stops Run with a [*RunError] of class [ErrSink] naming the shard.
//
// The stored epochs belong to the lease table that issued them. When the
// Loaders move to another table (a new dynamo.Config.Table, a table
// deleted and created again) or from a fleet back to a single process,
// set the epochs the Sink stores to 0 (keep the checkpoints) before they
// start: otherwise every batch of a shard is refused until the new
// table's epoch for it has passed the stored one (a lease lost and taken
// again each time), and a single process stops on the first batch.
//
// An operator's rewind of a shard (cmd/tidemark rewind) moves the stored
// position back on purpose; the Sink's checkpoint must follow, or the
// Loader would resume from it: implement [Rewinder], or the Loader stops
// with a [*RewindError] naming the checkpoint to reset.
//
// Because a shard's position never moves back, restoring the Sink's store
// from an older backup does not make the Loader deliver again what the
// journal has already passed: restore the journal directory from the same
// moment, or start with an empty one (the Sink's checkpoints then decide).
//
// The checkpoints are keyed by stream name and shard ID. When a stream is
// deleted and created again under its name, remove its checkpoints before
// the Loader starts over on it (see [Config.OnStreamRecreated]): the new
// stream reuses the shard IDs.
type TransactionalSink interface {
	Sink
	// Checkpoints returns the checkpoint last stored for every shard of
	// stream: an empty map, not an error, when none is stored.
	Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error)
}
