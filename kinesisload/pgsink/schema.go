package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the DDL of the Sink's two tables, run by [CreateSchema] for
// a table that does not exist.
//
// tidemark_records holds one row per record, keyed by stream, shard,
// sequence number (kept as text: Kinesis sequence numbers are decimal
// strings of up to 128 bits; order them with seq::numeric) and
// sub-sequence number (the user record's index in a KPL aggregate, which
// the Loader de-aggregates; 0 for a record that was not aggregated).
//
// tidemark_checkpoints holds, for every shard, where reading resumes: the
// Batch.Checkpoint of the last batch stored, in the format of
// scan.Position.String ("AFTER_SEQUENCE_NUMBER:<seq>" or "SHARD_END";
// before the shard's first record, its start, such as "TRIM_HORIZON" or
// the AFTER_SEQUENCE_NUMBER a LATEST was resolved to, which the Loader
// hands over in a batch with no records before it reads). It is written in
// the same transaction as the rows, so it always covers exactly the rows
// stored for its shard, and the database alone knows where every shard
// starts: a lost journal loses nothing. Its epoch is the highest
// Batch.Epoch delivered for the shard (0 without a fleet): the fencing
// token of the newest lease, which refuses a host that lost the lease;
// position_epoch is the Batch.Epoch of the batch that stored the position,
// which tells a new owner's overlap from a bug (see [Sink.DeliverMulti]).
// replay_until is, after an operator's rewind ([Sink.RewindCheckpoint]),
// the checkpoint the rewind set back: the records up to it are stored
// already, and are delivered again; "" otherwise.
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
	stream         text        NOT NULL,
	shard          text        NOT NULL,
	position       text        NOT NULL,
	epoch          bigint      NOT NULL DEFAULT 0,
	position_epoch bigint      NOT NULL DEFAULT 0,
	replay_until   text        NOT NULL DEFAULT '',
	updated_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, shard)
);`

// Upgrade is the DDL that brings tables created by an earlier version of
// this Sink (examples/postgres) up to date, one statement per column they
// may lack, with the value every existing row must have (an earlier
// version stored no aggregates, so every row is sub-sequence 0; it knew
// no fleet, so every checkpoint is epoch 0, which any lease's epoch
// passes, and was stored at epoch 0). [CreateSchema] runs only the
// statements of the columns a table lacks, and then makes subseq part of
// tidemark_records' primary key if it is not.
const Upgrade = `
ALTER TABLE tidemark_records ADD COLUMN IF NOT EXISTS subseq bigint NOT NULL DEFAULT 0;
ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS position_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS replay_until text NOT NULL DEFAULT '';`

// schemaLock is the key of the transaction-level advisory lock that
// serialises the DDL of CreateSchema between processes: two concurrent
// CREATE TABLE IF NOT EXISTS of one table can otherwise fail with a
// unique violation.
const schemaLock = 0x7469_6465_6d61_726b // "tidemark"

// errBadSchema is wrapped by the errors of CreateSchema that only a change
// by hand fixes.
var errBadSchema = errors.New("the tables are not the Sink's")

// schemaLockTimeout bounds how long CreateSchema's DDL waits for a lock
// of a table (a Deliver in progress holds one): an upgrade then fails,
// and is tried again, instead of queueing every Deliver behind it.
const schemaLockTimeout = 5 * time.Second

// CreateSchema makes the Sink's tables ready: it creates those that do not
// exist (see [Schema]), upgrades those of an earlier version (see
// [Upgrade]), and does nothing at all when they are up to date.
//
// Every host of a fleet runs it at start, while other hosts deliver, so
// its first step is a read of the catalog that takes no lock: on tables
// that are up to date (every start but the first of a version) it runs no
// DDL. (An ALTER TABLE ... ADD COLUMN IF NOT EXISTS takes an exclusive
// lock of the table even when the column exists, and deadlocked with a
// Deliver of another host, 40P01.) When DDL is needed it runs in one
// transaction under an advisory lock, checks again what is missing, and
// waits at most 5 s for a table's lock (lock_timeout).
//
// A tidemark_records table whose primary key is (stream, shard, seq), as
// the first version created it, would refuse the second user record of a
// KPL aggregate: its key is replaced by (stream, shard, seq, subseq). That
// is safe (the rows are unique on three columns, so on four too) but
// rebuilds the key's index under an exclusive lock of the table: on a
// large table, run it when no Loader writes. A key that is neither of the
// two, or one that cannot be dropped (a foreign key of another table
// refers to it), is an error naming the table and the column: change it
// by hand.
//
// A failure that may pass (the database unreachable or restarting, a
// lock timeout, a deadlock) is tried again, backing off from 100 ms to
// 5 s, until ctx ends: a host that starts while the database is down
// waits for it instead of exiting. Bound ctx to bound the wait. Any other
// failure is returned at once.
func CreateSchema(ctx context.Context, db *pgxpool.Pool) error {
	wait := 100 * time.Millisecond
	for {
		err := createSchema(ctx, db)
		if err == nil || errors.Is(err, errBadSchema) || !transient(err) || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("pgsink: creating the schema: %w (gave up: %w)", err, ctx.Err())
			}
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgsink: creating the schema: %w (gave up: %w)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// schemaState is what the catalog says of the Sink's tables.
type schemaState struct {
	records, checkpoints      bool // the tables exist
	subseq, epoch, positionEp bool // the columns of later versions exist
	replayUntil               bool
	key                       []string
	keyName                   string
}

func (s schemaState) upToDate() bool {
	return s.records && s.checkpoints && s.subseq && s.epoch && s.positionEp && s.replayUntil &&
		strings.Join(s.key, ", ") == "stream, shard, seq, subseq"
}

// readSchema reads the catalog: no lock of the tables is taken.
func readSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (schemaState, error) {
	var s schemaState
	err := q.QueryRow(ctx, `
		SELECT to_regclass('tidemark_records') IS NOT NULL, to_regclass('tidemark_checkpoints') IS NOT NULL,
			EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('tidemark_records') AND attname = 'subseq' AND NOT attisdropped),
			EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('tidemark_checkpoints') AND attname = 'epoch' AND NOT attisdropped),
			EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('tidemark_checkpoints') AND attname = 'position_epoch' AND NOT attisdropped),
			EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('tidemark_checkpoints') AND attname = 'replay_until' AND NOT attisdropped),
			COALESCE((SELECT c.conname::text FROM pg_constraint c WHERE c.conrelid = to_regclass('tidemark_records') AND c.contype = 'p'), ''),
			COALESCE((SELECT array_agg(a.attname::text ORDER BY k.ord)
				FROM pg_constraint c
				CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
				WHERE c.conrelid = to_regclass('tidemark_records') AND c.contype = 'p'), '{}')`).
		Scan(&s.records, &s.checkpoints, &s.subseq, &s.epoch, &s.positionEp, &s.replayUntil, &s.keyName, &s.key)
	return s, err
}

func createSchema(ctx context.Context, db *pgxpool.Pool) error {
	s, err := readSchema(ctx, db)
	if err != nil {
		return fmt.Errorf("pgsink: reading the schema: %w", err)
	}
	if s.upToDate() {
		return nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgsink: creating the schema: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLock)); err != nil {
		return fmt.Errorf("pgsink: creating the schema: %w", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", schemaLockTimeout.Milliseconds())); err != nil {
		return fmt.Errorf("pgsink: creating the schema: %w", err)
	}
	// Under the lock: another host may have done it meanwhile.
	if s, err = readSchema(ctx, tx); err != nil {
		return fmt.Errorf("pgsink: reading the schema: %w", err)
	}
	if s.upToDate() {
		return nil
	}
	if !s.records || !s.checkpoints {
		if _, err := tx.Exec(ctx, Schema); err != nil {
			return fmt.Errorf("pgsink: creating the schema: %w", err)
		}
	}
	var upgrades []string
	for _, u := range []struct {
		ok   bool
		stmt string
	}{
		{s.subseq || !s.records, "ALTER TABLE tidemark_records ADD COLUMN IF NOT EXISTS subseq bigint NOT NULL DEFAULT 0"},
		{s.epoch || !s.checkpoints, "ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0"},
		{s.positionEp || !s.checkpoints, "ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS position_epoch bigint NOT NULL DEFAULT 0"},
		{s.replayUntil || !s.checkpoints, "ALTER TABLE tidemark_checkpoints ADD COLUMN IF NOT EXISTS replay_until text NOT NULL DEFAULT ''"},
	} {
		if !u.ok {
			upgrades = append(upgrades, u.stmt)
		}
	}
	for _, stmt := range upgrades {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgsink: upgrading the schema: %w", err)
		}
	}
	if err := upgradeRecordsKey(ctx, tx); err != nil {
		return fmt.Errorf("pgsink: upgrading the schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgsink: creating the schema: %w", err)
	}
	return nil
}

// upgradeRecordsKey makes tidemark_records' primary key (stream, shard,
// seq, subseq) if it is (stream, shard, seq).
func upgradeRecordsKey(ctx context.Context, tx pgx.Tx) error {
	s, err := readSchema(ctx, tx)
	if err != nil {
		return fmt.Errorf("table tidemark_records: reading its primary key: %w", err)
	}
	if s.keyName == "" {
		return fmt.Errorf("%w: table tidemark_records has no primary key: make it (stream, shard, seq, subseq) by hand (column subseq must be part of it)", errBadSchema)
	}
	key := strings.Join(s.key, ", ")
	switch key {
	case "stream, shard, seq, subseq":
		return nil
	case "stream, shard, seq":
	default:
		return fmt.Errorf("%w: table tidemark_records: primary key %s (%s) is not the Sink's; make it (stream, shard, seq, subseq) by hand (column subseq must be part of it)", errBadSchema, s.keyName, key)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE tidemark_records DROP CONSTRAINT `+pgx.Identifier{s.keyName}.Sanitize()+
		`, ADD PRIMARY KEY (stream, shard, seq, subseq)`); err != nil {
		return fmt.Errorf("table tidemark_records: adding column subseq to its primary key %s (stream, shard, seq): %w; change it by hand", s.keyName, err)
	}
	return nil
}

// transient reports whether err may pass if the call is made again: the
// server could not be reached or dropped the connection, restarts, was
// short of resources, cancelled a statement (statement_timeout), ended an
// idle transaction (idle_in_transaction_session_timeout), timed out on a
// lock, or rolled a transaction back (a deadlock, a serialization
// failure). Errors of the statement or the data (a constraint, a type, a
// missing table) are not.
func transient(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch code := pgErr.Code; {
		case code == "55P03", code == "25P03", code == "57014": // lock timeout, idle in transaction timeout, query canceled
			return true
		case code == "25006": // read-only transaction: a standby after a failover, a server made read-only as its disk fills
			return true
		case strings.HasPrefix(code, "08"), // connection exception
			strings.HasPrefix(code, "40"), // transaction rollback: deadlock, serialization
			strings.HasPrefix(code, "53"), // insufficient resources
			strings.HasPrefix(code, "57"), // operator intervention: shutdown, cannot connect now
			strings.HasPrefix(code, "58"): // system error
			return true
		}
		return false
	}
	// Not an answer of the server: the network, a dial, a context.
	return true
}
