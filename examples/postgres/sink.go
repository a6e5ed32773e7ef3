package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Schema is the DDL that CreateSchema runs. Both statements are idempotent.
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
// journal loses nothing.
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
	position   text        NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard)
);`

// schemaLock is the key of the transaction-level advisory lock that
// serialises CreateSchema between processes: two concurrent CREATE TABLE IF
// NOT EXISTS of one table can otherwise fail with a unique violation.
const schemaLock = 0x7469_6465_6d61_726b // "tidemark"

// Errors of Sink.Deliver, wrapped with the stream, the shard and the batch.
var (
	// errBehind is wrapped when a batch ends before the shard's stored
	// checkpoint: the Loader resumed behind the database, which it never
	// does (it takes the furthest of its journal and Checkpoints), so
	// another Loader is probably writing the same stream.
	errBehind = errors.New("batch behind the stored checkpoint")
	// errOverlap is wrapped when a batch's first record is at or before
	// the shard's stored checkpoint although the batch ends after it.
	errOverlap = errors.New("batch overlaps the stored checkpoint")
	// errDuplicate is wrapped when a record's row exists already.
	errDuplicate = errors.New("record stored twice")
)

// CreateSchema creates the Sink's tables if they do not exist (see Schema).
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
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres sink: creating the schema: %w", err)
	}
	return nil
}

// Sink is an exactly-once kinesisload.TransactionalSink on PostgreSQL:
// Deliver inserts a batch's records and upserts its shard's checkpoint in
// one transaction, and Checkpoints loads the checkpoints back, so the
// Loader resumes where the database is, whatever its journal says.
//
// A duplicate row is an error, not ignored. It cannot happen while one
// Loader writes a stream: the rows and the checkpoint that covers them
// commit together, the Loader resumes after the furthest of its journal
// and Checkpoints (and its journal never gets ahead of the database, since
// it records a batch only after Deliver returned), and a batch retried
// after a COMMIT whose outcome was lost finds its own checkpoint stored and
// is skipped. A duplicate would therefore mean that the invariant broke
// (another writer, a bug): ON CONFLICT DO NOTHING would hide that, an error
// stops the Loader with the shard named.
//
// A Sink is safe for concurrent use: the Loader delivers the shards in
// parallel, each shard's batches one at a time.
type Sink struct {
	db *pgxpool.Pool

	// Test hooks, nil in production: afterInsert runs inside the
	// transaction after the rows are inserted and before the checkpoint
	// upsert and COMMIT; afterCommit runs after a successful COMMIT.
	// An error from either is returned by Deliver.
	afterInsert func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error
	afterCommit func(ctx context.Context, b kinesisload.Batch) error
}

var _ kinesisload.TransactionalSink = (*Sink)(nil)

// NewSink returns a Sink that writes through db. The tables must exist
// (CreateSchema).
func NewSink(db *pgxpool.Pool) *Sink { return &Sink{db: db} }

var recordColumns = []string{"stream", "shard", "seq", "subseq", "partition_key", "data", "arrival"}

// Deliver stores b's records and b.Checkpoint in one transaction. A batch
// with no records stores only its checkpoint: the shard's start, handed over
// before the Loader reads the shard, or SHARD_END.
//
// It first locks the shard's checkpoint row. If the stored checkpoint
// equals b.Checkpoint, b was committed already (the Loader retries a batch
// whose COMMIT succeeded but whose answer was lost) and Deliver returns nil
// without writing. A batch behind the stored checkpoint, or one that
// overlaps it, is an error. A failure anywhere rolls everything back.
func (s *Sink) Deliver(ctx context.Context, b kinesisload.Batch) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("postgres sink: stream %s, shard %s, batch of %d records ending at %v: %w",
				b.Stream, b.ShardID, len(b.Records), b.Checkpoint, err)
		}
	}()
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	// After a successful Commit this is a no-op; after a failure it ends
	// the transaction (or pgx closes a connection whose ctx ended, which
	// ends it on the server).
	defer tx.Rollback(ctx) //nolint:errcheck // the first error is what matters

	var stored string
	err = tx.QueryRow(ctx,
		`SELECT position FROM tidemark_checkpoints WHERE stream = $1 AND shard = $2 FOR UPDATE`,
		b.Stream, b.ShardID).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	default:
		prev, err := scan.Parse(stored)
		if err != nil {
			return fmt.Errorf("stored checkpoint %q: %w", stored, err)
		}
		c, err := scan.Compare(prev, b.Checkpoint)
		if err != nil {
			return err
		}
		switch {
		case c == 0:
			return nil // committed already: nothing to do
		case c > 0:
			return fmt.Errorf("%w %v", errBehind, prev)
		case prev.Kind == scan.KindAfterSequence && len(b.Records) > 0 &&
			scan.CompareSequence(b.Records[0].SequenceNumber, prev.Sequence) <= 0,
			prev.Kind == scan.KindAtSequence && len(b.Records) > 0 &&
				scan.CompareSequence(b.Records[0].SequenceNumber, prev.Sequence) < 0:
			return fmt.Errorf("%w %v: first record %s", errOverlap, prev, b.Records[0].SequenceNumber)
		}
	}

	if len(b.Records) > 0 {
		rows := make([][]any, len(b.Records))
		for i, r := range b.Records {
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
		INSERT INTO tidemark_checkpoints (stream, shard, position, updated_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (stream, shard) DO UPDATE SET position = EXCLUDED.position, updated_at = EXCLUDED.updated_at`,
		b.Stream, b.ShardID, b.Checkpoint.String()); err != nil {
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
