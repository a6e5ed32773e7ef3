package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MultiSink is a [Sink] that also takes the batches of many shards in one
// call: a destination whose cost is per call or per transaction (a row
// store's commit, an analytical store's version or part, a file) loads a
// window of a thousand quiet shards as one write instead of a thousand.
//
// A Loader whose Config.Sink is a MultiSink collects the pages of every
// shard it reads into one window across shards, which closes when it
// holds Config.MaxBatchRecords records or Config.MaxBatchBytes bytes,
// when Config.MaxBatchWait has passed since its oldest record was read,
// when the memory bound needs its pages back (Config.MaxBufferedBytes),
// when a shard's last records are in it, or when the Loader (or a shard:
// a handoff) stops. It then calls DeliverMulti with one [Batch] per shard
// of the window: the shard's records of the window in shard order, with
// the checkpoint after the last of them and the epoch of the shard's
// lease, exactly as [Sink.Deliver] receives a shard's batch. Once
// DeliverMulti returns nil the Loader commits every shard's checkpoint.
// With MaxBatchWait 0 (the default) a window closes as soon as it holds a
// page, and the pages read while it is delivered make the next one: the
// windows grow with the load and wait for nothing.
//
// The contract of DeliverMulti is that of Deliver for each batch: nil only
// when every batch is stored. A shard has at most one batch in a call;
// calls are never concurrent (one window is delivered at a time, while
// the next fills), and a shard's batches come in shard order across
// calls. A parent shard's last batch is committed before any batch of its
// children is in a window. An error refuses the whole call: the Loader
// delivers the window again (errors are transient or permanent as for
// Deliver, see [Sink]), so a MultiSink that stored some batches must take
// them again as a [TransactionalSink] takes a re-delivery. A retried
// refusal is reported to [HookRetry] and [Loader.Stats] for the stream
// (ShardID empty): the call is about many shards. A refusal of
// batches delivered under lost leases wraps [ErrLeaseLost] and names the
// shards: a [*ShardsFencedError]. The Loader stops those shards (each a
// lost lease of reason [LostSinkFenced]) and delivers the other batches
// again, at once, in a call without them. A MultiSink of a single process
// (every epoch 0) never returns one.
//
// Deliver is called only for the start batches of initialisation (see
// [TransactionalSink]); everything read goes through DeliverMulti. To load
// a MultiSink's shards one by one, give the Loader a Sink that hides
// DeliverMulti, such as [SinkFunc](s.Deliver).
type MultiSink interface {
	Sink
	DeliverMulti(ctx context.Context, batches []Batch) error
}

// TransactionalMultiSink is a [MultiSink] that is also a
// [TransactionalSink]: DeliverMulti stores every batch's records and every
// shard's checkpoint and epoch in one transaction, so that delivery is
// exactly once across shards. In it, per shard, it locks the shard's row
// (lock every shard's row in one order, such as by shard ID, so that two
// hosts' windows cannot deadlock) and applies the checks (a)-(d) of
// TransactionalSink to the shard's batch: (a) stores nothing of that
// batch (the others are stored), (c) stores only the records after the
// stored checkpoint, (d) is an error for the whole call. When (b) refuses
// one or more shards, it stores nothing at all and returns a
// [*ShardsFencedError] naming them: the Loader delivers the others again
// without them. kinesisload/sinktest.Run checks the contract (its
// multi-shard cases run on a Sink that has DeliverMulti);
// sinktest.Memory keeps it.
type TransactionalMultiSink interface {
	TransactionalSink
	DeliverMulti(ctx context.Context, batches []Batch) error
}

// ShardsFencedError is the refusal of a [MultiSink] (or a
// [TransactionalMultiSink]) whose batches of some shards were delivered
// under leases lost to newer owners: check (b) of the
// [TransactionalSink] contract, for each shard it names. The Sink stored
// nothing of the call. errors.Is(err, [ErrLeaseLost]) holds, and so does
// errors.Is for Err.
type ShardsFencedError struct {
	// Stream is the stream of the batches.
	Stream string
	// Shards are the shards the Sink refused, sorted.
	Shards []string
	// Err is the Sink's cause, such as which epoch holds each shard; it
	// may be nil.
	Err error
}

// Error names the fenced shards.
func (e *ShardsFencedError) Error() string {
	msg := fmt.Sprintf("kinesisload: stream %s: shards %s: delivered under lost leases (stored under newer epochs)", e.Stream, strings.Join(e.Shards, ", "))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns [ErrLeaseLost] and Err.
func (e *ShardsFencedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrLeaseLost}
	}
	return []error{ErrLeaseLost, e.Err}
}

// fencedShards returns the shards of batches that err, a refusal wrapping
// [ErrLeaseLost], names: those of a [*ShardsFencedError], or the one shard
// of a call of one batch. ok is false when the refusal names none (or a
// shard not in batches): the Sink broke the contract.
func fencedShards(batches []Batch, err error) (fenced []string, ok bool) {
	sf, named := errors.AsType[*ShardsFencedError](err)
	if !named {
		if len(batches) == 1 {
			return []string{batches[0].ShardID}, true
		}
		return nil, false
	}
	if len(sf.Shards) == 0 {
		return nil, false
	}
	for _, id := range sf.Shards {
		if !slices.ContainsFunc(batches, func(b Batch) bool { return b.ShardID == id }) {
			return nil, false
		}
	}
	// Each once: a shard named twice was dropped from the window, then
	// looked for again (the windower panicked).
	return slices.Compact(slices.Sorted(slices.Values(sf.Shards))), true
}

// deliverMultiSafely calls the Sink's DeliverMulti and turns a panic into
// an error, as [deliverSafely] does.
func deliverMultiSafely(ctx context.Context, sink MultiSink, batches []Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError("the sink", r)
		}
	}()
	return sink.DeliverMulti(ctx, batches)
}
