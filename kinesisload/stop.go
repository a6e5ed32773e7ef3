package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// stuckGrace is how long Run waits, after a hard stop (its context ended,
// or Close's did), for the consume loops to return before it gives up on
// them. A Sink that honours its context returns well within it.
const stuckGrace = time.Second

// StuckError is returned by Run when, after a hard stop, a shard's loop has
// not returned within a second: typically a Sink's Deliver (or a hook) that
// ignores its context. Run returns anyway, with the journal closed and its
// lock released; whatever those loops do later is never committed (a
// Deliver that returns late is delivered again by the next run).
// errors.Is(err, ErrStuck) holds, and so does errors.Is for the cause of the
// stop ([ErrClosed], or the error of Run's context). Run returns it as the
// Err of a [*RunError] of class [ErrSink] naming the first stuck shard.
type StuckError struct {
	Stream string
	// Shards are the shards whose loops had not returned, sorted.
	Shards []string
	// Cause is why Run stopped: ErrClosed, or Run's ctx.Err().
	Cause error
}

// Error names the stream, the stuck shards and the hard stop's cause.
func (e *StuckError) Error() string {
	return fmt.Sprintf("kinesisload: stream %s: shard %s did not stop within %v of the hard stop (%v): a Sink's Deliver or a hook ignores its context; "+
		"Run returned without waiting and commits nothing more for it", e.Stream, strings.Join(e.Shards, ", "), stuckGrace, e.Cause)
}

// Unwrap returns [ErrStuck] and the cause.
func (e *StuckError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrStuck}
	}
	return []error{ErrStuck, e.Cause}
}

// PanicError is a panic of user code that the Loader recovered: a Sink's
// Deliver (a permanent refusal of the batch: Run stops with this error
// wrapped, since a bug is what no retry fixes) or a hook (logged with
// the stack, counted, and otherwise ignored: a hook observes, so its panic
// does not stop the data). errors.Is(err, ErrPanicked) holds, and when the
// panic's value is an error, errors.Is and errors.As see it too.
type PanicError struct {
	// Where names the code that panicked: "the sink", "hook OnBatchDelivered".
	Where string
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace.
	Stack []byte
}

// newPanicError is called from the deferred function that recovered v.
func newPanicError(where string, v any) *PanicError {
	return &PanicError{Where: where, Value: v, Stack: debug.Stack()}
}

// Error names where the panic was, its value and the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("kinesisload: %s panicked: %v\n%s", e.Where, e.Value, e.Stack)
}

// Unwrap returns [ErrPanicked], and the panic's value if it is an error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrPanicked, err}
	}
	return []error{ErrPanicked}
}

// abandonable runs fn, a call of the Sink made outside the consume loops
// (during initialisation or scheduling, on Run's goroutine, where drain's
// grace does not reach), so that a hard stop is not held up by a call that
// ignores its context: once the session's hard context has ended, fn has
// stuckGrace to return; then abandonable returns a [*RunError] wrapping a
// [*StuckError] (shard may be empty) and leaves fn running. A panic of fn
// is recovered as a [*PanicError].
func (s *session) abandonable(shard, op string, fn func() error) error {
	res := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				res <- newPanicError("the sink", r)
			}
		}()
		res <- fn()
	}()
	var hard <-chan struct{}
	if s.hard != nil {
		hard = s.hard.Done()
	}
	select {
	case err := <-res:
		return err
	case <-hard:
	}
	t := time.NewTimer(stuckGrace)
	defer t.Stop()
	select {
	case err := <-res:
		return err
	case <-t.C:
	}
	stream := s.l.cfg.Stream
	var shards []string
	if shard != "" {
		shards = []string{shard}
	}
	s.l.log.Error("a call of the sink did not return after the hard stop; giving up on it", "shard", shard, "op", op, "grace", stuckGrace)
	return &RunError{Stream: stream, Shard: shard, Op: op, Kind: ErrSink, Err: &StuckError{Stream: stream, Shards: shards}}
}

// checkpoints calls the TransactionalSink's Checkpoints through abandonable.
func (s *session) checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	var got map[string]scan.Position
	err := s.abandonable("", "Checkpoints", func() error {
		var err error
		got, err = s.l.tx.Checkpoints(ctx, stream)
		return err
	})
	if err != nil {
		return nil, err // got is not read: fn may still be running
	}
	return got, nil
}

// isStuck reports whether err says a call was given up after a hard stop.
func isStuck(err error) bool {
	_, ok := errors.AsType[*StuckError](err)
	return ok
}
