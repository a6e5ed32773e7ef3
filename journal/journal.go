package journal

import (
	"context"
	"errors"
	"fmt"
)

// Errors returned by journals. Check them with [errors.Is]: the errors
// returned usually wrap one of these with the file, directory or value
// involved.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("journal: closed")
	// ErrCorrupt is wrapped by every [*CorruptError]: the journal on disk
	// is damaged in a way that a crash cannot cause. See [Repair].
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrLocked is returned by Open and Repair when the directory is
	// already open, in this process or another.
	ErrLocked = errors.New("journal: directory locked")
	// ErrTooLarge is returned by Append for a record larger than the
	// maximum record size; nothing of that call is appended.
	ErrTooLarge = errors.New("journal: record too large")
	// ErrSnapshotIndex is returned by Snapshot for an index below the
	// latest snapshot's or above the last appended record's.
	ErrSnapshotIndex = errors.New("journal: snapshot index out of range")
	// ErrFailed is returned by Append and Snapshot after a write or sync
	// of the file journal failed: what reached the disk is unknown, so the
	// journal refuses further writes. Close it and Open it again; Open
	// recovers what is durable.
	ErrFailed = errors.New("journal: failed")
	// ErrNewerFormat is returned by Open, OpenReadOnly and Repair for a
	// file written in a later format than this build reads: the journal
	// is not damaged, and Repair does not cut it.
	ErrNewerFormat = errors.New("journal: written by a newer format")
	// ErrReadOnly is returned by Append and Snapshot of a journal opened
	// with [OpenReadOnly].
	ErrReadOnly = errors.New("journal: opened read-only")
)

// Journal is a durable, append-only sequence of records, compacted by
// snapshots. The methods are safe for concurrent use.
type Journal interface {
	// Append appends recs, in order, as consecutive records and returns
	// the index of the last one. When Append returns nil, every record of
	// the call is durable and a later Replay (after a crash too) yields
	// them. Records of concurrent calls do not interleave: each call's
	// records get consecutive indexes. Append with no records appends
	// nothing and returns the index of the last record (0 if none).
	//
	// When Append returns an error, none of the call's records is
	// acknowledged, but a record that was already handed to the disk may
	// still be durable and replayed: an error is "unknown", not "absent".
	// ctx bounds only the wait; cancelling it does not withdraw records
	// already handed to the disk. Append returns an error wrapping
	// ErrTooLarge, before writing anything, if any record is larger than
	// the journal's maximum record size; ErrClosed after Close; ErrFailed
	// after an earlier write failure. Append does not retain recs.
	Append(ctx context.Context, recs ...[]byte) (last uint64, err error)

	// Replay calls fn for the latest snapshot, if there is one, and then
	// for every durable record after it, in index order (see the package
	// doc). The snapshot Entry has Snapshot set and Index the last record
	// it covers; records follow with Index = snapshot index + 1, +2, ...
	// (1, 2, ... when there is no snapshot). A journal with nothing in it
	// calls fn zero times.
	//
	// Replay may run while Append and Snapshot run: it yields a consistent
	// view taken when it starts (a snapshot and the records durable then).
	// fn may call Append and Snapshot. Entry.Data is valid only until fn
	// returns and must not be modified; copy it to keep it. If fn returns
	// an error, Replay stops and returns that error unchanged. Replay
	// returns ctx.Err() if ctx ends, a [*CorruptError] if the files are
	// damaged, and ErrClosed after Close.
	Replay(ctx context.Context, fn func(Entry) error) error

	// Snapshot durably records state as the caller's state after applying
	// every record with index <= index, and lets the journal drop those
	// records. When Snapshot returns nil the snapshot is durable: Replay
	// then yields it first, followed only by records with a larger index.
	// index must be at least the latest snapshot's index (equal replaces
	// it) and at most the index of the last record whose Append has
	// returned, else the error wraps ErrSnapshotIndex; index 0 (a state
	// before any record) is valid on a journal with no snapshot. ctx is
	// checked before anything is written; a snapshot being written is not
	// interrupted. If Snapshot returns an error, Replay yields either this
	// snapshot or the journal as it was, both of which replay to the same
	// state. Snapshot does not retain state. It returns ErrClosed after
	// Close, ErrFailed after a write failure of the file journal.
	Snapshot(ctx context.Context, index uint64, state []byte) error

	// Close waits for appends already handed to the journal to finish,
	// then releases its resources (and the file journal's directory
	// lock). Every method called after Close returns ErrClosed; a second
	// Close returns ErrClosed too.
	Close() error
}

// Entry is one item that [Journal.Replay] yields: a snapshot or a record.
type Entry struct {
	// Index is the record's index. For a snapshot it is the index of
	// the last record the snapshot covers.
	Index uint64
	// Snapshot is true for the snapshot's state, which Replay yields at
	// most once, and first.
	Snapshot bool
	// Data is the record or the snapshot state. It is valid only until
	// the callback returns and must not be modified.
	Data []byte
}

// CorruptError reports damage in a journal file that a crash cannot
// cause: a CRC mismatch, garbage before the tail, a missing or duplicate
// segment, a gap in the record indexes. It wraps [ErrCorrupt].
type CorruptError struct {
	// File is the path of the damaged file (for a missing segment, the
	// segment before the gap).
	File string
	// Offset is the byte offset in File where the damage starts.
	Offset int64
	// Reason says what is wrong.
	Reason string
}

// Error returns "journal: corrupt FILE at offset N: REASON".
func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: corrupt %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Unwrap returns [ErrCorrupt].
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
