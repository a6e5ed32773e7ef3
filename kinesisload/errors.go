package kinesisload

import (
	"errors"
	"fmt"
	"strings"
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
