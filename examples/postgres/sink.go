package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Schema is the DDL that CreateSchema runs on a database without the
// Sink's tables. Both statements are idempotent; CreateSchema then upgrades
// tables created by an earlier version (see Upgrade).
//
// tidemark_records holds one row per record, keyed by stream, shard,
// sequence number (kept as text: Kinesis sequence numbers are decimal
// strings of up to 128 bits; order them with seq::numeric) and sub-sequence
// number (the user record's index in a KPL aggregate, which the Loader
// de-aggregates; 0 for a record that was not aggregated).
//
// tidemark_checkpoints holds, for every shard, where reading resumes: the
// Batch.Checkpoint of the last batch stored, in the format of
// scan.Position.String ("AFTER_SEQUENCE_NUMBER:<seq>" or "SHARD_END"; before
// the shard's first record, its start, such as "TRIM_HORIZON" or the
// AFTER_SEQUENCE_NUMBER a LATEST was resolved to, which the Loader hands over
// in a batch with no records before it reads). It is written in the same
// transaction as the rows, so it always covers exactly the rows stored for
// its shard, and the database alone knows where every shard starts: a lost
// journal loses nothing. Its epoch is the highest Batch.Epoch delivered for
// the shard (0 without a fleet): the fencing token of the newest lease,
// which refuses a host that lost the lease; position_epoch is the
// Batch.Epoch of the batch that stored the position, which tells a new
// owner's overlap from a bug (see Sink.Deliver).
const Schema = `
CREATE TABLE IF NOT EXISTS tidemark_records (
	stream        text        NOT NULL,
	shard         text        NOT NULL,
	seq           text        NOT NULL,
	subseq        bigint      NOT NULL DEFAULT 0,
	partition_key text        NOT NULL,
	data          bytea       NOT NULL,
	arrival       timestamptz NOT NULL,
	loaded_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard, seq, subseq)
);
CREATE TABLE IF NOT EXISTS tidemark_checkpoints (
	stream     text        NOT NULL,
	shard      text        NOT NULL,
	position       text        NOT NULL,
	epoch          bigint      NOT NULL DEFAULT 0,
	position_epoch bigint      NOT NULL DEFAULT 0,
	updated_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard)
);`

// Upgrade is the DDL that CreateSchema runs after Schema, to bring tables
// created by an earlier version of this Sink up to date: it adds the
// columns they lack, with the value every existing row must have (an
// earlier version stored no aggregates, so every row is sub-sequence 0; it
// knew no fleet, so every checkpoint is epoch 0, which any lease's epoch
// passes, and was stored at epoch 0). CreateSchema then makes subseq part of tidemark_records' primary
// key if it is not (see CreateSchema).
const Upgrade = `
ALTER TABLE tidemark_records ADD COLUMN IF NOT EXISTS subseq bigint NOT NULL DEFAULT 0;
ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS position_epoch bigint NOT NULL DEFAULT 0;`

// schemaLock is the key of the transaction-level advisory lock that
// serialises CreateSchema between processes: two concurrent CREATE TABLE IF
// NOT EXISTS of one table can otherwise fail with a unique violation.
const schemaLock = 0x7469_6465_6d61_726b // "tidemark"

// Errors of Sink.Deliver, wrapped with the stream, the shard and the batch.
var (
	// errOverlap is wrapped when a batch of the stored checkpoint's epoch
	// (the same lease, or no fleet) has its first record at or before the
	// stored checkpoint although it ends after it: a batch of one lease
	// starts right after the one before it, so this is a bug or another
	// writer.
	errOverlap = errors.New("batch overlaps the stored checkpoint")
	// errDuplicate is wrapped when a record's row exists already.
	errDuplicate = errors.New("record stored twice")
)

// CreateSchema creates the Sink's tables if they do not exist (see Schema)
// and upgrades tables created by an earlier version (see Upgrade), in one
// transaction under an advisory lock, so concurrent starts do not collide.
//
// A tidemark_records table whose primary key is (stream, shard, seq), as
// the first version created it, would refuse the second user record of a
// KPL aggregate: its key is replaced by (stream, shard, seq, subseq). That
// is safe (the rows are unique on three columns, so on four too) but
// rebuilds the key's index under an exclusive lock of the table: on a large
// table, run it when no Loader writes. A key that is neither of the two, or
// one that cannot be dropped (a foreign key of another table refers to it),
// is an error naming the table and the column: change it by hand.
func CreateSchema(ctx context.Context, db *pgxpool.Pool) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres sink: creating the schema: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLock)); err != nil {
		return fmt.Errorf("postgres sink: creating the schema: %w", err)
	}
	if _, err := tx.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("postgres sink: creating the schema: %w", err)
	}
	if _, err := tx.Exec(ctx, Upgrade); err != nil {
		return fmt.Errorf("postgres sink: upgrading the schema: %w", err)
	}
	if err := upgradeRecordsKey(ctx, tx); err != nil {
		return fmt.Errorf("postgres sink: upgrading the schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres sink: creating the schema: %w", err)
	}
	return nil
}

// upgradeRecordsKey makes tidemark_records' primary key (stream, shard,
// seq, subseq) if it is (stream, shard, seq).
func upgradeRecordsKey(ctx context.Context, tx pgx.Tx) error {
	var name string
	var cols []string
	err := tx.QueryRow(ctx, `
		SELECT c.conname, array_agg(a.attname::text ORDER BY k.ord)
		FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		WHERE c.conrelid = to_regclass('tidemark_records') AND c.contype = 'p'
		GROUP BY c.conname`).Scan(&name, &cols)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errors.New("table tidemark_records has no primary key: make it (stream, shard, seq, subseq) by hand (column subseq must be part of it)")
	case err != nil:
		return fmt.Errorf("table tidemark_records: reading its primary key: %w", err)
	}
	key := strings.Join(cols, ", ")
	switch key {
	case "stream, shard, seq, subseq":
		return nil
	case "stream, shard, seq":
	default:
		return fmt.Errorf("table tidemark_records: primary key %s (%s) is not the Sink's; make it (stream, shard, seq, subseq) by hand (column subseq must be part of it)", name, key)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE tidemark_records DROP CONSTRAINT `+pgx.Identifier{name}.Sanitize()+
		`, ADD PRIMARY KEY (stream, shard, seq, subseq)`); err != nil {
		return fmt.Errorf("table tidemark_records: adding column subseq to its primary key %s (stream, shard, seq): %w; change it by hand", name, err)
	}
	return nil
}

// Sink is an exactly-once kinesisload.TransactionalSink on PostgreSQL:
// Deliver inserts a batch's records and writes its shard's checkpoint and
// epoch in one transaction, and Checkpoints loads the checkpoints back, so
// the Loader resumes where the database is, whatever its journal says. It
// stays exactly once when several Loaders share the stream as a fleet,
// even while a host that lost its lease is still delivering: the stored
// epoch fences it (see Deliver).
//
// A duplicate row is an error, not ignored. It cannot happen: the rows and
// the checkpoint that covers them commit together, a batch at or behind the
// stored checkpoint is skipped, and a new owner's batch is stored only
// after the stored checkpoint. A duplicate would therefore mean that the
// invariant broke (a writer that bypasses the checkpoint, a bug): ON
// CONFLICT DO NOTHING would hide that, an error stops the Loader with the
// shard named.
//
// A Sink is safe for concurrent use: the Loader delivers the shards in
// parallel, each shard's batches one at a time, and Sinks of several
// processes may deliver the same shard at once (a host that lost its lease
// and the new owner): the shard's checkpoint row is locked for the whole
// transaction.
type Sink struct {
	db *pgxpool.Pool

	// Test hooks, nil in production: afterLock runs inside the
	// transaction once the shard's checkpoint row is locked (and, when the
	// shard had none, created); afterInsert runs inside the transaction
	// after the rows are inserted and before the checkpoint update and
	// COMMIT; afterCommit runs after a successful COMMIT. An error from
	// any is returned by Deliver.
	afterLock   func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error
	afterInsert func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error
	afterCommit func(ctx context.Context, b kinesisload.Batch) error
}

var _ kinesisload.TransactionalSink = (*Sink)(nil)

// NewSink returns a Sink that writes through db. The tables must exist
// (CreateSchema).
func NewSink(db *pgxpool.Pool) *Sink { return &Sink{db: db} }

var recordColumns = []string{"stream", "shard", "seq", "subseq", "partition_key", "data", "arrival"}

// Deliver stores b's records, b.Checkpoint and b.Epoch in one transaction.
// A batch with no records stores only its checkpoint: the shard's start,
// handed over before the Loader reads the shard, or SHARD_END.
//
// It first locks the shard's checkpoint row (SELECT ... FOR UPDATE; when
// the shard has none, it creates it, so that a concurrent Deliver of the
// shard waits), then compares b with the stored checkpoint (position), the
// epoch that stored it (position_epoch) and the highest epoch delivered
// (epoch), in the order of kinesisload.TransactionalSink's contract:
//
//   - (a) b.Checkpoint is not further than the stored checkpoint: b is
//     stored already (a retry after a COMMIT whose answer was lost, a start
//     batch for a shard that has a checkpoint, a new owner whose lease lags
//     the database, a host that lost its lease re-sending what it stored).
//     Deliver stores no record and returns nil; when b.Epoch is above the
//     stored epoch, it stores b.Epoch as the epoch, so that the previous
//     owner is refused from now on.
//   - (b) b.Epoch is below the stored epoch: the sender lost the shard's
//     lease to a newer owner. Deliver stores nothing and returns an error
//     wrapping kinesisload.ErrLeaseLost, and the Loader stops that shard at
//     once as a lost lease (LostSinkFenced) and commits nothing more.
//   - (c) b.Epoch is above the epoch that stored the checkpoint: b is a
//     batch of a new owner, which resumed from the fleet's table; that may
//     lag the database, so b may start at or before the stored checkpoint.
//     Deliver stores only the records after the stored checkpoint. This
//     compares with position_epoch, not epoch: a new owner whose first
//     batches were all stored already (a) raised epoch to its own, and its
//     next batch may still overlap the stored checkpoint.
//   - (d) the epoch that stored the checkpoint (one lease, or no fleet,
//     where every epoch is 0): b must start right after the stored
//     checkpoint; a batch that overlaps it is an error.
//
// Unless (a) or (b) returned, b.Checkpoint is then stored, at b.Epoch as
// both epochs.
//
// The transaction runs at READ COMMITTED, whatever the server's default
// isolation. A failure anywhere rolls everything back.
func (s *Sink) Deliver(ctx context.Context, b kinesisload.Batch) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("postgres sink: stream %s, shard %s, batch of %d records ending at %v at epoch %d: %w",
				b.Stream, b.ShardID, len(b.Records), b.Checkpoint, b.Epoch, err)
		}
	}()
	if b.Epoch > math.MaxInt64 {
		return fmt.Errorf("epoch %d does not fit the epoch column (bigint)", b.Epoch)
	}
	// READ COMMITTED whatever the server's default: each statement sees
	// what committed before it, so the SELECT after an INSERT that found
	// the row created by a concurrent Deliver locks that row.
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	// After a successful Commit this is a no-op; after a failure it ends
	// the transaction (or pgx closes a connection whose ctx ended, which
	// ends it on the server).
	defer tx.Rollback(ctx) //nolint:errcheck // the first error is what matters

	row, found, err := lockCheckpoint(ctx, tx, b)
	if err != nil {
		return err
	}
	prev := row.position
	if s.afterLock != nil {
		if err := s.afterLock(ctx, tx, b); err != nil {
			return err
		}
	}
	records := b.Records
	if found {
		c, err := scan.Compare(prev, b.Checkpoint)
		if err != nil {
			return err
		}
		switch {
		case c >= 0 && b.Epoch > row.epoch:
			// (a) stored already; a new owner fences the previous one.
			if _, err := tx.Exec(ctx, `UPDATE tidemark_checkpoints SET epoch = $3, updated_at = now() WHERE stream = $1 AND shard = $2`,
				b.Stream, b.ShardID, int64(b.Epoch)); err != nil {
				return err
			}
			return tx.Commit(ctx)
		case c >= 0:
			return nil // (a) stored already: nothing to do
		case b.Epoch < row.epoch: // (b)
			return fmt.Errorf("%w: fenced: the shard is held at epoch %d (checkpoint %v)",
				kinesisload.ErrLeaseLost, row.epoch, prev)
		case b.Epoch > row.positionEpoch: // (c)
			records = after(records, prev)
		case overlaps(records, prev): // (d)
			return fmt.Errorf("%w %v: first record %s", errOverlap, prev, records[0].SequenceNumber)
		}
	}

	if len(records) > 0 {
		rows := make([][]any, len(records))
		for i, r := range records {
			rows[i] = []any{b.Stream, b.ShardID, r.SequenceNumber, r.SubSequenceNumber, r.PartitionKey, r.Data, r.ArrivalTime}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tidemark_records"}, recordColumns, pgx.CopyFromRows(rows)); err != nil {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23505" {
				return fmt.Errorf("%w: %s", errDuplicate, pgErr.Detail)
			}
			return err
		}
	}
	if s.afterInsert != nil {
		if err := s.afterInsert(ctx, tx, b); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `
		UPDATE tidemark_checkpoints SET position = $3, epoch = $4, position_epoch = $4, updated_at = now()
		WHERE stream = $1 AND shard = $2`,
		b.Stream, b.ShardID, b.Checkpoint.String(), int64(b.Epoch)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if s.afterCommit != nil {
		return s.afterCommit(ctx, b)
	}
	return nil
}

// checkpointRow is a shard's row of tidemark_checkpoints.
type checkpointRow struct {
	position      scan.Position
	epoch         uint64 // the highest epoch delivered: the fence
	positionEpoch uint64 // the epoch of the batch that stored position
}

// lockCheckpoint locks the shard's checkpoint row and returns it. When the
// shard has none, it inserts b's, which holds a concurrent Deliver of the
// shard until this transaction ends, and returns found false.
func lockCheckpoint(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) (row checkpointRow, found bool, err error) {
	for range 2 {
		var stored string
		var epoch, positionEpoch int64
		err := tx.QueryRow(ctx,
			`SELECT position, epoch, position_epoch FROM tidemark_checkpoints WHERE stream = $1 AND shard = $2 FOR UPDATE`,
			b.Stream, b.ShardID).Scan(&stored, &epoch, &positionEpoch)
		switch {
		case err == nil:
			p, err := scan.Parse(stored)
			if err != nil {
				return row, false, fmt.Errorf("stored checkpoint %q: %w", stored, err)
			}
			if epoch < 0 || positionEpoch < 0 || positionEpoch > epoch {
				return row, false, fmt.Errorf("stored epochs %d (position_epoch %d): want 0 <= position_epoch <= epoch", epoch, positionEpoch)
			}
			return checkpointRow{position: p, epoch: uint64(epoch), positionEpoch: uint64(positionEpoch)}, true, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return row, false, err
		}
		// No row: create it. If another transaction created it in the
		// meantime, this waits for it to end and inserts nothing, and the
		// SELECT again locks what it committed.
		tag, err := tx.Exec(ctx, `
			INSERT INTO tidemark_checkpoints (stream, shard, position, epoch, position_epoch, updated_at) VALUES ($1, $2, $3, $4, $4, now())
			ON CONFLICT (stream, shard) DO NOTHING`,
			b.Stream, b.ShardID, b.Checkpoint.String(), int64(b.Epoch))
		if err != nil {
			return row, false, err
		}
		if tag.RowsAffected() == 1 {
			return row, false, nil
		}
	}
	return row, false, errors.New("the checkpoint row was created and deleted again while this batch waited for it")
}

// after returns the records after the stored checkpoint p: a checkpoint
// is always after a whole Kinesis record, so sequence numbers alone decide
// (the user records of an aggregate share theirs). A start that is no
// sequence number (TRIM_HORIZON, AT_TIMESTAMP) is before every record the
// Loader reads from it.
func after(records []kinesisload.Record, p scan.Position) []kinesisload.Record {
	if p.Kind != scan.KindAfterSequence && p.Kind != scan.KindAtSequence {
		return records
	}
	for i, r := range records {
		c := scan.CompareSequence(r.SequenceNumber, p.Sequence)
		if c > 0 || c == 0 && p.Kind == scan.KindAtSequence {
			return records[i:]
		}
	}
	return nil
}

// overlaps reports whether records start at or before p, where the next
// batch of the lease that stored p must start after it.
func overlaps(records []kinesisload.Record, p scan.Position) bool {
	if len(records) == 0 {
		return false
	}
	c := scan.CompareSequence(records[0].SequenceNumber, p.Sequence)
	return p.Kind == scan.KindAfterSequence && c <= 0 || p.Kind == scan.KindAtSequence && c < 0
}

// Checkpoints returns the checkpoint stored for every shard of stream: an
// empty map when none is stored.
func (s *Sink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	rows, err := s.db.Query(ctx, `SELECT shard, position FROM tidemark_checkpoints WHERE stream = $1`, stream)
	if err != nil {
		return nil, fmt.Errorf("postgres sink: stream %s: loading checkpoints: %w", stream, err)
	}
	defer rows.Close()
	out := map[string]scan.Position{}
	for rows.Next() {
		var shard, position string
		if err := rows.Scan(&shard, &position); err != nil {
			return nil, fmt.Errorf("postgres sink: stream %s: loading checkpoints: %w", stream, err)
		}
		p, err := scan.Parse(position)
		if err != nil {
			return nil, fmt.Errorf("postgres sink: stream %s, shard %s: stored checkpoint %q: %w", stream, shard, position, err)
		}
		out[shard] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres sink: stream %s: loading checkpoints: %w", stream, err)
	}
	return out, nil
}
