package pgsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Defaults of [Config].
const (
	DefaultStatementTimeout         = 5 * time.Second
	DefaultIdleInTransactionTimeout = 5 * time.Second
)

// Config configures a [Sink]. The zero Config is valid: every zero field
// means its default.
//
// Both timeouts bound how long a transaction of the Sink can hold the
// lock of a shard's checkpoint row when its host stops in the middle: a
// process frozen (a long GC pause, SIGSTOP, a stalled VM) or cut off from
// the database (a partition, which TCP keepalive notices only after about
// 2 hours). The server ends such a transaction by itself: the statement
// it waits in after StatementTimeout (a COPY waiting for data counts), the
// idle transaction after IdleInTransactionTimeout. Until then the shard's
// new owner waits for the lock (a chaos run measured 13.5 s). Keep both
// below the fleet's lease duration (10 s by default, kinesisload/dynamo's
// Config.LeaseDuration): a new owner takes a shard at the earliest one
// lease duration after the old owner's last heartbeat, and by then the
// server has let the lock go. Keep StatementTimeout above the time the
// largest window takes to store (its bytes, Config.MaxBatchBytes, at the
// database's COPY rate): a statement it cancels is retried, and a window
// that never fits is retried for ever.
type Config struct {
	// StatementTimeout is the statement_timeout of every statement of
	// the Sink's transactions. Default 5 s.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is the
	// idle_in_transaction_session_timeout of the Sink's transactions:
	// the server ends the session of a transaction that waits that long
	// for its next statement. Default 5 s.
	IdleInTransactionTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.IdleInTransactionTimeout == 0 {
		c.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	return c
}

// Errors of Deliver and DeliverMulti, wrapped with the stream, the shard
// and the batch; both are permanent (kinesisload.ErrPermanent): no retry
// fixes them.
var (
	// ErrOverlap is wrapped when a batch of the stored checkpoint's epoch
	// (the same lease, or no fleet) has its first record at or before
	// the stored checkpoint although it ends after it: a batch of one
	// lease starts right after the one before it, so this is a bug or
	// another writer.
	ErrOverlap = errors.New("pgsink: batch overlaps the stored checkpoint")
	// ErrDuplicate is wrapped when a record's row exists already.
	ErrDuplicate = errors.New("pgsink: record stored twice")
)

// Sink is an exactly-once kinesisload.TransactionalMultiSink on
// PostgreSQL: DeliverMulti stores a window of many shards' batches (their
// records with COPY, and every shard's checkpoint and epoch) in one
// transaction, Deliver one batch the same way, and Checkpoints loads the
// checkpoints back, so the Loader resumes where the database is, whatever
// its journal says. It stays exactly once when several Loaders share the
// stream as a fleet, even while a host that lost its lease is still
// delivering: the stored epoch fences it (see [Sink.DeliverMulti]).
//
// Given to a Loader as it is, a Sink gets windows across shards
// (kinesisload.MultiSink; size them with the Loader's
// Config.MaxBatchWait, MaxBatchRecords and MaxBatchBytes). Give
// [Sink.PerShard] instead to store each shard's batches in transactions
// of their own.
//
// A duplicate row is an error, not ignored. It cannot happen: the rows and
// the checkpoint that covers them commit together, a batch at or behind
// the stored checkpoint is skipped, and a new owner's batch is stored only
// after the stored checkpoint. A duplicate would therefore mean that the
// invariant broke (a writer that bypasses the checkpoint, a bug): ON
// CONFLICT DO NOTHING would hide that; a permanent error stops the Loader
// with the shard named.
//
// Errors are permanent (kinesisload.Permanent) when no retry fixes them:
// an overlap or a duplicate, and an error of the statement or the data
// (a constraint, a type, a missing table: SQLSTATE classes other than
// those below). Any other (the database unreachable or restarting, a
// deadlock, a serialization failure, a timeout: classes 08, 40, 53, 57,
// 58, lock and idle timeouts, and errors of the network) is transient:
// the Loader retries it, without limit by default, so an outage of the
// database is waited out.
//
// A Sink is safe for concurrent use: the Loader delivers the shards in
// parallel (or a window of all of them), each shard's batches one at a
// time, and Sinks of several processes may deliver the same shard at once
// (a host that lost its lease and the new owner): every shard's checkpoint
// row is locked for the whole transaction, in the order of (stream,
// shard), so that two windows of the same shards wait for each other
// instead of deadlocking.
type Sink struct {
	db  *pgxpool.Pool
	cfg Config

	// Test hooks, nil in production: afterLock runs inside the
	// transaction, for each batch, once every shard's checkpoint row is
	// locked (and, when a shard had none, created); afterInsert runs
	// inside the transaction, for each batch, after the rows are
	// inserted and before the checkpoint update and COMMIT; afterCommit
	// runs after a successful COMMIT, for each batch. An error from any
	// is returned by Deliver.
	afterLock   func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error
	afterInsert func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error
	afterCommit func(ctx context.Context, b kinesisload.Batch) error
}

var _ kinesisload.TransactionalMultiSink = (*Sink)(nil)

// New returns a Sink that writes through db. The tables must exist
// ([CreateSchema]). It refuses a nil db and negative timeouts.
func New(db *pgxpool.Pool, cfg Config) (*Sink, error) {
	switch {
	case db == nil:
		return nil, errors.New("pgsink: New: a nil *pgxpool.Pool")
	case cfg.StatementTimeout < 0:
		return nil, fmt.Errorf("pgsink: Config.StatementTimeout = %v: must not be negative (0 means the default, %v)", cfg.StatementTimeout, DefaultStatementTimeout)
	case cfg.IdleInTransactionTimeout < 0:
		return nil, fmt.Errorf("pgsink: Config.IdleInTransactionTimeout = %v: must not be negative (0 means the default, %v)", cfg.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)
	}
	return &Sink{db: db, cfg: cfg.withDefaults()}, nil
}

// PerShard returns s as a kinesisload.TransactionalSink that is no
// MultiSink: a Loader given it delivers each shard's batches (pages, or
// the shard's own windows) in transactions of their own. It is a
// kinesisload.Rewinder, as s is.
func (s *Sink) PerShard() kinesisload.TransactionalSink { return perShard{s} }

type perShard struct{ s *Sink }

var _ kinesisload.Rewinder = perShard{}

func (p perShard) RewindCheckpoint(ctx context.Context, stream, shard string, to scan.Position, epoch uint64) error {
	return p.s.RewindCheckpoint(ctx, stream, shard, to, epoch)
}

func (p perShard) Deliver(ctx context.Context, b kinesisload.Batch) error { return p.s.Deliver(ctx, b) }

func (p perShard) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	return p.s.Checkpoints(ctx, stream)
}

var recordColumns = []string{"stream", "shard", "seq", "subseq", "partition_key", "data", "arrival"}

// Deliver stores b's records, b.Checkpoint and b.Epoch in one transaction,
// as [Sink.DeliverMulti] stores a window of one batch. A batch with no
// records stores only its checkpoint: the shard's start, handed over
// before the Loader reads the shard, or SHARD_END.
func (s *Sink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	return s.DeliverMulti(ctx, []kinesisload.Batch{b})
}

// DeliverMulti stores a window of batches, at most one per shard, in one
// transaction: every batch's records (one COPY for all of them) and every
// shard's checkpoint and epoch, or nothing.
//
// It first locks every shard's checkpoint row, in the order of (stream,
// shard) (a shard without one gets it first, INSERT ... ON CONFLICT DO
// NOTHING, so that a concurrent transaction of the shard waits), then
// compares each batch with its shard's stored checkpoint (position), the
// epoch that stored it (position_epoch) and the highest epoch delivered
// (epoch), in the order of kinesisload.TransactionalSink's contract:
//
//   - (a) b.Checkpoint is not further than the stored checkpoint: b is
//     stored already (a retry after a COMMIT whose answer was lost, a
//     start batch for a shard that has a checkpoint, a new owner whose
//     lease lags the database, a host that lost its lease re-sending what
//     it stored). No record of it is stored; when b.Epoch is above the
//     stored epoch, b.Epoch becomes the epoch, so that the previous owner
//     is refused from now on.
//   - (b) b.Epoch is below the stored epoch: the sender lost the shard's
//     lease to a newer owner. Nothing of the window is stored, and the
//     error is a [*kinesisload.ShardsFencedError] naming every shard
//     refused so (it wraps kinesisload.ErrLeaseLost): the Loader stops
//     those shards as lost leases (LostSinkFenced) and delivers the
//     others again without them.
//   - (c) b.Epoch is above the epoch that stored the checkpoint: b is a
//     batch of a new owner, which resumed from the fleet's table; that
//     may lag the database, so b may start at or before the stored
//     checkpoint. Only the records after the stored checkpoint are
//     stored. This compares with position_epoch, not epoch: a new owner
//     whose first batches were all stored already (a) raised epoch to its
//     own, and its next batch may still overlap the stored checkpoint.
//   - (d) the epoch that stored the checkpoint (one lease, or no fleet,
//     where every epoch is 0): b must start right after the stored
//     checkpoint; a batch that overlaps it is a permanent error
//     ([ErrOverlap]) for the whole window.
//
// Unless (a) or (b) applies, b.Checkpoint is then stored, at b.Epoch as
// both epochs.
//
// The transaction runs at READ COMMITTED, whatever the server's default
// isolation, with the timeouts of [Config]. A failure anywhere rolls
// everything back.
func (s *Sink) DeliverMulti(ctx context.Context, batches []kinesisload.Batch) (err error) {
	if len(batches) == 0 {
		return nil
	}
	defer func() {
		if err != nil {
			err = classify(describe(batches, err))
		}
	}()
	bs := slices.Clone(batches)
	slices.SortFunc(bs, func(a, b kinesisload.Batch) int {
		return cmp.Or(strings.Compare(a.Stream, b.Stream), strings.Compare(a.ShardID, b.ShardID))
	})
	for i, b := range bs {
		if b.Epoch > math.MaxInt64 {
			return kinesisload.Permanent(fmt.Errorf("shard %s: epoch %d does not fit the epoch column (bigint)", b.ShardID, b.Epoch))
		}
		if i > 0 && b.Stream == bs[i-1].Stream && b.ShardID == bs[i-1].ShardID {
			return kinesisload.Permanent(fmt.Errorf("shard %s: two batches of the shard in one window", b.ShardID))
		}
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	// After a successful Commit this is a no-op; after a failure it ends
	// the transaction (or pgx closes a connection whose ctx ended, which
	// ends it on the server).
	defer tx.Rollback(ctx) //nolint:errcheck // the first error is what matters
	rows, err := lockCheckpoints(ctx, tx, bs)
	if err != nil {
		return err
	}
	if s.afterLock != nil {
		for _, b := range bs {
			if err := s.afterLock(ctx, tx, b); err != nil {
				return err
			}
		}
	}
	var (
		fenced    []string
		fenceErrs []error
		copyRows  [][]any
		again     []kinesisload.Batch // records a rewind delivers again: stored unless there
		store     []kinesisload.Batch // their checkpoints are stored
		raise     []kinesisload.Batch // (a) with a higher epoch: the fence moves
		replayed  []kinesisload.Batch // their checkpoints pass the rewound one
	)
	for i, b := range bs {
		row := rows[i]
		records := b.Records
		if row.found {
			prev := row.position
			c, err := scan.Compare(prev, b.Checkpoint)
			if err != nil {
				return kinesisload.Permanent(fmt.Errorf("shard %s: %w", b.ShardID, err))
			}
			switch {
			case c >= 0 && b.Epoch > row.epoch:
				// (a) stored already; a new owner fences the previous one.
				raise = append(raise, b)
				continue
			case c >= 0:
				continue // (a) stored already: nothing to do
			case b.Epoch < row.epoch: // (b)
				fenced = append(fenced, b.ShardID)
				fenceErrs = append(fenceErrs, fmt.Errorf("shard %s is held at epoch %d (checkpoint %v), not %d", b.ShardID, row.epoch, prev, b.Epoch))
				continue
			case b.Epoch > row.positionEpoch: // (c)
				records = after(records, prev)
			case overlaps(records, prev): // (d)
				return kinesisload.Permanent(fmt.Errorf("shard %s: %w %v: first record %s", b.ShardID, ErrOverlap, prev, records[0].SequenceNumber))
			}
		}
		if row.replayUntil.Kind != 0 {
			// After a rewind: the records up to the checkpoint it set
			// back are stored already, each once.
			rest := after(records, row.replayUntil)
			if row.replayUntil.Kind == scan.KindShardEnd {
				rest = nil // set back from SHARD_END: every record is stored already
			}
			if n := len(records) - len(rest); n > 0 {
				again = append(again, kinesisload.Batch{Stream: b.Stream, ShardID: b.ShardID, Records: records[:n]})
			}
			records = rest
			if c, err := scan.Compare(b.Checkpoint, row.replayUntil); err == nil && c >= 0 || b.Checkpoint.Kind == scan.KindShardEnd {
				replayed = append(replayed, b)
			}
		}
		for _, r := range records {
			copyRows = append(copyRows, []any{b.Stream, b.ShardID, r.SequenceNumber, r.SubSequenceNumber, r.PartitionKey, r.Data, r.ArrivalTime})
		}
		store = append(store, b)
	}
	if len(fenced) > 0 {
		return &kinesisload.ShardsFencedError{Stream: bs[0].Stream, Shards: fenced, Err: errors.Join(fenceErrs...)}
	}
	if len(store) == 0 && len(raise) == 0 {
		return nil // every batch is stored already
	}
	for _, a := range again {
		if err := storeAgain(ctx, tx, a.Stream, a.ShardID, a.Records); err != nil {
			return err
		}
	}
	if len(copyRows) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tidemark_records"}, recordColumns, pgx.CopyFromRows(copyRows)); err != nil {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23505" {
				return kinesisload.Permanent(fmt.Errorf("%w: %s", ErrDuplicate, pgErr.Detail))
			}
			return err
		}
	}
	if s.afterInsert != nil {
		for _, b := range bs {
			if err := s.afterInsert(ctx, tx, b); err != nil {
				return err
			}
		}
	}
	if err := updateCheckpoints(ctx, tx, store, raise, replayed); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if s.afterCommit != nil {
		for _, b := range bs {
			if err := s.afterCommit(ctx, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkpointRow is a shard's row of tidemark_checkpoints.
type checkpointRow struct {
	found         bool // false: the row was made by this transaction (the shard had none)
	position      scan.Position
	epoch         uint64 // the highest epoch delivered: the fence
	positionEpoch uint64 // the epoch of the batch that stored position
	// replayUntil is the checkpoint a rewind set back (a sequence
	// position, or SHARD_END), while the checkpoint is short of it: the
	// records up to it are stored already (Kind 0: none).
	replayUntil scan.Position
}

// begin starts a transaction of the Sink: READ COMMITTED whatever the
// server's default (each statement sees what committed before it, so the
// SELECT after an INSERT that found a row created by a concurrent
// transaction locks that row), with the timeouts of [Config].
func (s *Sink) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)`,
		strconv.FormatInt(s.cfg.StatementTimeout.Milliseconds(), 10), strconv.FormatInt(s.cfg.IdleInTransactionTimeout.Milliseconds(), 10)); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// lockCheckpoints locks the checkpoint row of every batch's shard, in the
// order of bs (sorted by stream and shard), and returns them in that
// order. A shard without one gets b's (it holds a concurrent Deliver of
// the shard until this transaction ends) and comes back not found.
func lockCheckpoints(ctx context.Context, tx pgx.Tx, bs []kinesisload.Batch) ([]checkpointRow, error) {
	streams, shards, positions, epochs := columns(bs)
	// Rows are created in the same order as they are locked below: two
	// transactions making rows of the same shards wait for each other.
	made := map[[2]string]bool{}
	created, err := tx.Query(ctx, `
		INSERT INTO tidemark_checkpoints (stream, shard, position, epoch, position_epoch, updated_at)
		SELECT s, h, p, e, e, now() FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS t(s, h, p, e) ORDER BY s, h
		ON CONFLICT (stream, shard) DO NOTHING
		RETURNING stream, shard`, streams, shards, positions, epochs)
	if err != nil {
		return nil, err
	}
	for created.Next() {
		var k [2]string
		if err := created.Scan(&k[0], &k[1]); err != nil {
			created.Close()
			return nil, err
		}
		made[k] = true
	}
	if err := created.Err(); err != nil {
		return nil, err
	}
	locked, err := tx.Query(ctx, `
		SELECT c.stream, c.shard, c.position, c.epoch, c.position_epoch, c.replay_until FROM tidemark_checkpoints c
		JOIN unnest($1::text[], $2::text[]) AS t(s, h) ON c.stream = t.s AND c.shard = t.h
		ORDER BY c.stream, c.shard
		FOR UPDATE OF c`, streams, shards)
	if err != nil {
		return nil, err
	}
	byKey := map[[2]string]checkpointRow{}
	for locked.Next() {
		var k [2]string
		var stored, replay string
		var epoch, positionEpoch int64
		if err := locked.Scan(&k[0], &k[1], &stored, &epoch, &positionEpoch, &replay); err != nil {
			locked.Close()
			return nil, err
		}
		p, err := scan.Parse(stored)
		if err != nil {
			locked.Close()
			return nil, kinesisload.Permanent(fmt.Errorf("shard %s: stored checkpoint %q: %w", k[1], stored, err))
		}
		if epoch < 0 || positionEpoch < 0 || positionEpoch > epoch {
			locked.Close()
			return nil, kinesisload.Permanent(fmt.Errorf("shard %s: stored epochs %d (position_epoch %d): want 0 <= position_epoch <= epoch", k[1], epoch, positionEpoch))
		}
		row := checkpointRow{found: !made[k], position: p, epoch: uint64(epoch), positionEpoch: uint64(positionEpoch)}
		if replay != "" {
			if row.replayUntil, err = scan.Parse(replay); err != nil || (row.replayUntil.Kind != scan.KindAfterSequence && row.replayUntil.Kind != scan.KindAtSequence && row.replayUntil.Kind != scan.KindShardEnd) {
				locked.Close()
				return nil, kinesisload.Permanent(fmt.Errorf("shard %s: stored replay_until %q: want a sequence position or SHARD_END (%v)", k[1], replay, err))
			}
		}
		byKey[k] = row
	}
	if err := locked.Err(); err != nil {
		return nil, err
	}
	out := make([]checkpointRow, len(bs))
	for i, b := range bs {
		row, ok := byKey[[2]string{b.Stream, b.ShardID}]
		if !ok {
			// Deleted between the INSERT and the SELECT: try again.
			return nil, fmt.Errorf("shard %s: the checkpoint row was deleted while this window waited for it", b.ShardID)
		}
		out[i] = row
	}
	return out, nil
}

// updateCheckpoints stores the checkpoint of every batch of store at its
// epoch (both epochs), and raises the fence epoch of the shards of raise
// to theirs.
func updateCheckpoints(ctx context.Context, tx pgx.Tx, store, raise, replayed []kinesisload.Batch) error {
	if len(store) > 0 {
		streams, shards, positions, epochs := columns(store)
		if _, err := tx.Exec(ctx, `
			UPDATE tidemark_checkpoints c SET position = t.p, epoch = t.e, position_epoch = t.e, updated_at = now()
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS t(s, h, p, e)
			WHERE c.stream = t.s AND c.shard = t.h`, streams, shards, positions, epochs); err != nil {
			return err
		}
	}
	if len(raise) > 0 {
		streams, shards, _, epochs := columns(raise)
		if _, err := tx.Exec(ctx, `
			UPDATE tidemark_checkpoints c SET epoch = t.e, updated_at = now()
			FROM unnest($1::text[], $2::text[], $3::bigint[]) AS t(s, h, e)
			WHERE c.stream = t.s AND c.shard = t.h`, streams, shards, epochs); err != nil {
			return err
		}
	}
	if len(replayed) > 0 {
		streams, shards, _, _ := columns(replayed)
		if _, err := tx.Exec(ctx, `
			UPDATE tidemark_checkpoints c SET replay_until = ''
			FROM unnest($1::text[], $2::text[]) AS t(s, h)
			WHERE c.stream = t.s AND c.shard = t.h`, streams, shards); err != nil {
			return err
		}
	}
	return nil
}

// storeAgain stores the records a rewind delivers again that the table
// lacks (b's, up to the rewound checkpoint): one it holds is left as it
// is.
func storeAgain(ctx context.Context, tx pgx.Tx, stream, shard string, records []kinesisload.Record) error {
	n := len(records)
	streams, shards, seqs, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	subs, datas, arrivals := make([]int64, n), make([][]byte, n), make([]time.Time, n)
	for i, r := range records {
		streams[i], shards[i], seqs[i], subs[i], keys[i], datas[i], arrivals[i] = stream, shard, r.SequenceNumber, int64(r.SubSequenceNumber), r.PartitionKey, r.Data, r.ArrivalTime
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO tidemark_records (stream, shard, seq, subseq, partition_key, data, arrival)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::timestamptz[])
		ON CONFLICT (stream, shard, seq, subseq) DO NOTHING`, streams, shards, seqs, subs, keys, datas, arrivals)
	return err
}

// columns returns the streams, shards, checkpoints and epochs of bs, as
// arrays for unnest.
func columns(bs []kinesisload.Batch) (streams, shards, positions []string, epochs []int64) {
	streams, shards, positions, epochs = make([]string, len(bs)), make([]string, len(bs)), make([]string, len(bs)), make([]int64, len(bs))
	for i, b := range bs {
		streams[i], shards[i], positions[i], epochs[i] = b.Stream, b.ShardID, b.Checkpoint.String(), int64(b.Epoch)
	}
	return streams, shards, positions, epochs
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

// describe wraps err with the stream, and the shard and batch of a window
// of one, or the window's shards.
func describe(bs []kinesisload.Batch, err error) error {
	if len(bs) == 1 {
		b := bs[0]
		return fmt.Errorf("pgsink: stream %s, shard %s, batch of %d records ending at %v at epoch %d: %w",
			b.Stream, b.ShardID, len(b.Records), b.Checkpoint, b.Epoch, err)
	}
	const named = 5
	ids := make([]string, 0, named)
	records := 0
	for i, b := range bs {
		records += len(b.Records)
		if i < named {
			ids = append(ids, b.ShardID)
		}
	}
	more := ""
	if len(bs) > named {
		more = fmt.Sprintf(" and %d more", len(bs)-named)
	}
	return fmt.Errorf("pgsink: stream %s, a window of %d batches (%d records; shards %s%s): %w",
		bs[0].Stream, len(bs), records, strings.Join(ids, ", "), more, err)
}

// classify marks err permanent when no retry fixes it (see [Sink]).
func classify(err error) error {
	if errors.Is(err, kinesisload.ErrLeaseLost) || errors.Is(err, kinesisload.ErrPermanent) || transient(err) {
		return err
	}
	return kinesisload.Permanent(err)
}

// Checkpoints returns the checkpoint stored for every shard of stream: an
// empty map when none is stored.
func (s *Sink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	rows, err := s.db.Query(ctx, `SELECT shard, position FROM tidemark_checkpoints WHERE stream = $1`, stream)
	if err != nil {
		return nil, fmt.Errorf("pgsink: stream %s: loading checkpoints: %w", stream, err)
	}
	defer rows.Close()
	out := map[string]scan.Position{}
	for rows.Next() {
		var shard, position string
		if err := rows.Scan(&shard, &position); err != nil {
			return nil, fmt.Errorf("pgsink: stream %s: loading checkpoints: %w", stream, err)
		}
		p, err := scan.Parse(position)
		if err != nil {
			return nil, fmt.Errorf("pgsink: stream %s, shard %s: stored checkpoint %q: %w", stream, shard, position, err)
		}
		out[shard] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgsink: stream %s: loading checkpoints: %w", stream, err)
	}
	return out, nil
}
