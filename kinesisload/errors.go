package kinesisload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/kpl"
)

// The classes of the errors that stop [Loader.Run]. Every such error is a
// [*RunError] whose Kind is one of them (or [ErrLineage],
// [ErrStreamMismatch] or [ErrInvalidConfig]), so that errors.Is tells what
// failed:
//
//	switch {
//	case errors.Is(err, kinesisload.ErrSink):    // the destination gave up
//	case errors.Is(err, kinesisload.ErrKinesis): // Kinesis refused for good
//	case errors.Is(err, kinesisload.ErrLineage): // data would be skipped
//	case errors.Is(err, kinesisload.ErrJournal): // progress cannot be stored
//	case errors.Is(err, kinesisload.ErrStreamMismatch): // another stream under the name
//	}
//
// Transient failures never stop Run unless a bound was configured
// ([Config.KinesisMaxAttempts], [Config.SinkRetries]); see the package
// documentation, "Retries", and [Sink] for the Sink's two classes of
// errors.
var (
	// ErrSink is the class of a stop caused by the Sink: it refused a
	// batch with a permanent error ([ErrPermanent]) or panicked on it, or
	// refused it more often than a positive [Config.SinkRetries] allows,
	// failed to load its checkpoints, or ignored its context after a hard
	// stop ([*StuckError]).
	ErrSink = errors.New("kinesisload: the sink failed")
	// ErrKinesis is the class of a stop caused by Kinesis: an error no
	// retry can fix (access denied, an unknown stream or shard, an
	// invalid argument), or a transient one that outlasted
	// [Config.KinesisMaxAttempts] when that is set.
	ErrKinesis = errors.New("kinesisload: kinesis failed")
	// ErrJournal is the class of a stop caused by the [PositionStore]:
	// progress could not be loaded (a corrupt journal) or saved.
	ErrJournal = errors.New("kinesisload: the position store failed")
)

// The sentinel errors of the package, besides the classes above: each is
// wrapped by the errors its documentation names, so that errors.Is tells
// them apart.
var (
	// ErrShardMissing is wrapped by a [*MissingShardError].
	ErrShardMissing = errors.New("kinesisload: a shard's progress is missing from the fleet's table")
	// ErrInvalidConfig is wrapped by every error of [Config.Validate] and [New].
	ErrInvalidConfig = errors.New("kinesisload: invalid config")
	// ErrLeaseLost is wrapped by a [*LeaseLostError].
	ErrLeaseLost = errors.New("kinesisload: lease lost")
	// ErrStreamMismatch is wrapped (by [*StreamMismatchError]) when the stream
	// Kinesis serves under the configured name is not the one the stored
	// progress was made on: it was deleted and created again, or the journal
	// belongs to a stream of another region or account.
	ErrStreamMismatch = errors.New("kinesisload: the stream is not the one the progress was stored for")
	// ErrStreamDeleted is wrapped by the error that stops Run when Kinesis says
	// the stream is being deleted. (A stream already gone stops Run with
	// Kinesis's ResourceNotFoundException.)
	ErrStreamDeleted = errors.New("kinesisload: the stream is being deleted")
	// ErrBadAggregate is wrapped by the error reported to [HookDecodeFailed]
	// for a record that starts with the KPL magic bytes but fails a check (too
	// short, MD5, protobuf, a missing required field, an index out of range,
	// no user records). Such a record is delivered as one plain record. It is
	// [kpl.ErrCorrupt].
	ErrBadAggregate = kpl.ErrCorrupt
	// ErrClosed is returned by Run after Close, and by Run on a Loader
	// that was closed before it ran.
	ErrClosed = errors.New("kinesisload: loader closed")
	// ErrRunning is returned by Run when the Loader is already running.
	ErrRunning = errors.New("kinesisload: loader already running")
	// ErrJournalRepaired is wrapped by a [*RepairedJournalError].
	ErrJournalRepaired = errors.New("kinesisload: the journal was repaired and lost decisions")
	// ErrPermanent is wrapped by an error of a [Sink] that no retry can fix:
	// Run stops at once, with a [*RunError] of class [ErrSink] naming the
	// shard(s) and the batch. Make one with [Permanent].
	ErrPermanent = errors.New("kinesisload: permanent sink error")
	// ErrStuck is wrapped by a [StuckError]: a hard stop found a shard
	// whose delivery did not return.
	ErrStuck = errors.New("kinesisload: a shard did not stop")
	// ErrPanicked is wrapped by a [PanicError]: user code (the Sink, a
	// hook) panicked.
	ErrPanicked = errors.New("kinesisload: user code panicked")
	// ErrStoreCorrupt is wrapped when a stored record cannot be decoded.
	ErrStoreCorrupt = errors.New("kinesisload: position store record cannot be decoded")
	// ErrLineage is wrapped by the error that stops the Loader when a shard it
	// tracks disappears from ListShards before it was COMPLETED (its records
	// expired unread), or when ListShards lists open a shard the stored
	// progress holds as COMPLETED, so that data is never skipped silently, and
	// by a [ParentAfterChildError].
	ErrLineage = errors.New("kinesisload: shard lineage broken")
	// ErrRewindRefused is wrapped by the error of a rewind that was
	// refused before anything was written ([JournalStore.Rewind],
	// [PlanRewind]): a shard unknown or COMPLETED, a position that
	// cannot be stored, a missing ID.
	ErrRewindRefused = errors.New("kinesisload: rewind refused")
	// ErrRewindPending is wrapped by a [*RewindError].
	ErrRewindPending = errors.New("kinesisload: a rewound shard waits for the sink's checkpoint")
)

// RunError is the error that stops [Loader.Run] (besides ctx.Err(),
// [ErrClosed] and [ErrRunning]). errors.As gives the stream, the shard, the
// operation and the cause; errors.Is matches its Kind and anything its Err
// wraps (such as a *types.AccessDeniedException).
type RunError struct {
	// Stream is the stream the Loader reads.
	Stream string
	// Shard is the shard the failure is about; empty when it is about
	// the stream as a whole (ListShards, initialisation).
	Shard string
	// Op is what failed: a Kinesis call ("ListShards",
	// "GetShardIterator", "GetRecords"), "Resolve" (the LATEST scan of
	// initialisation), "Deliver" or "Checkpoints" (the Sink), "Load" or
	// "Save" or "Prune" (the PositionStore), "Lineage", "Config",
	// "DescribeStreamSummary" (the stream's identity), "StartOver" (the
	// PositionStore could not archive a re-created stream's progress, see
	// [StreamRecreatedStartOver]), or "Initialise" (a
	// failure of initialisation not classified above).
	Op string
	// Kind is the class: [ErrSink], [ErrKinesis], [ErrJournal],
	// [ErrLineage], [ErrStreamMismatch] or [ErrInvalidConfig]. A typed
	// stop error of its own (such as [*StuckError], [*StreamMismatchError], [*ParentAfterChildError],
	// [*RepairedJournalError], [*PanicError]) is the Err of a RunError of
	// its class: errors.As finds both.
	Kind error
	// Err is the cause.
	Err error
}

// Error returns "kinesisload: stream S shard H: Op: cause", without the
// shard when there is none; or the cause's message alone when it names the
// stream itself (a [*StuckError], a [*ParentAfterChildError], ...).
func (e *RunError) Error() string {
	msg := fmt.Sprint(e.Err)
	if strings.HasPrefix(msg, "kinesisload: stream "+e.Stream+":") {
		return msg
	}
	where := "stream " + e.Stream
	if e.Shard != "" {
		where += " shard " + e.Shard
	}
	return fmt.Sprintf("kinesisload: %s: %s: %s", where, e.Op, msg)
}

// Unwrap returns the Kind and the cause, for errors.Is and errors.As.
func (e *RunError) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

// stopError returns err as a [*RunError] of the given class, unless it
// already holds one (the innermost naming is the most precise) or is nil.
func stopError(stream, shard, op string, kind, err error) error {
	if err == nil {
		return nil
	}
	var re *RunError
	if errors.As(err, &re) {
		return err
	}
	return &RunError{Stream: stream, Shard: shard, Op: op, Kind: kind, Err: err}
}

// MissingShardError stops Run when shards that Kinesis lists, and that
// the fleet's shared progress held, are missing from it (their items were
// deleted by hand): their positions are lost, and no host would read them
// again. Without a [TransactionalSink] holding their checkpoints, the
// Loader cannot tell where they resume. errors.Is(err, ErrShardMissing)
// holds. Restore the items (from an export made before, with the tidemark
// command's import), then run again.
type MissingShardError struct {
	Stream string
	// Shards are the shards missing, sorted.
	Shards []string
}

// Error names the stream and the missing shards.
func (e *MissingShardError) Error() string {
	return fmt.Sprintf("kinesisload: stream %s: shards %s are listed by Kinesis and were in the fleet's table, but their progress is gone from it (deleted by hand?): "+
		"no host would read them again, and no TransactionalSink holds their checkpoints; restore them from an export (tidemark import --missing) or a backup of the table, then run again",
		e.Stream, strings.Join(e.Shards, ", "))
}

// Unwrap returns [ErrShardMissing].
func (e *MissingShardError) Unwrap() error { return ErrShardMissing }
