package scan

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// A ShardError is the error of one shard's scan. It names the stream and the
// shard; Err is the cause.
type ShardError struct {
	Stream string
	Shard  string
	Err    error
}

// Error returns "scan: stream S shard H: cause".
func (e *ShardError) Error() string {
	return fmt.Sprintf("scan: stream %q shard %s: %v", e.Stream, e.Shard, e.Err)
}

// Unwrap returns the cause.
func (e *ShardError) Unwrap() error { return e.Err }

// A Request is one batch of shards to resolve. Every shard is resolved, or
// none is.
type Request struct {
	// Client makes the Kinesis calls. It is part of the request rather
	// than of the Resolver because one Resolver (one worker budget per
	// process) serves every Loader, and Loaders may read different
	// accounts or regions through different clients.
	Client Client
	// Stream is the stream name.
	Stream string
	// Shards are the IDs of the shards to resolve, without duplicates.
	Shards []string
	// Hooks are called for this request only, after the Resolver's own
	// (a Loader reports its initialisation progress with them). Optional.
	Hooks Hooks
	// At is T0, on Kinesis's clock: every shard resolves to just after
	// the last record that arrived before At (ApproximateArrivalTimestamp
	// < At, to the millisecond; At is truncated to the millisecond), or to
	// TRIM_HORIZON when none did. Records that arrive at or after At are
	// after the resolved start whatever the scan's duration, so a batch
	// resolved again at the same At resolves the same positions. At must
	// not be later than Kinesis's clock when Resolve is called; take it
	// from [Resolver.Now].
	//
	// The zero At keeps the older meaning: each shard resolves to its tip
	// when its scan catches up, so the positions depend on when the scan
	// ran.
	At time.Time
}

// A ShardResult is the resolved start of one shard and what finding it cost.
type ShardResult struct {
	Shard string
	// Position is AFTER_SEQUENCE_NUMBER of the last record before
	// [Request.At] (of the tip record when At is zero), or TRIM_HORIZON
	// when there was none.
	Position Position
	// Ended reports that a read of the scan reached the end of the
	// (closed) shard without meeting a record that arrived at or after
	// [Request.At]: no record of the shard is after the resolved start,
	// and a reader from Position would find only the shard's end. It is
	// a proof as far as the endpoint's null iterator is one (an odd
	// endpoint may end an open shard's iterator, so a Loader acts on it
	// only for a shard ListShards lists closed). False says only that
	// the scan did not read to the shard's end (an open shard, or a
	// closed one it had no need to read through), not that records
	// remain.
	Ended bool
	Stats Stats
}

// Stats is the cost of resolving one shard.
type Stats struct {
	// Calls counts Kinesis calls, every attempt included.
	Calls int
	// Retries counts attempts that were retried (after a retryable error
	// or an expired iterator).
	Retries int
	// Probes counts the reads of the probe strategy before its final
	// read: the head read and the existence probes.
	Probes int
	// Unanswered counts the probes taken for "no record at or after
	// this time" because the endpoint left their AT_TIMESTAMP
	// GetShardIterator unanswered for [Config.ProbeTimeout] while it
	// answered a control call on the same shard at once (kinesalite does
	// this past a shard's last record; see the package documentation).
	Unanswered int
	// Records and Bytes count what GetRecords returned: records, and
	// their data plus partition key bytes.
	Records int
	Bytes   int64
	// Duration is the time the scan took by [Config.Now], from claiming
	// the shard to its result.
	Duration time.Duration
}

// A Resolver turns the symbolic LATEST of shards into concrete positions
// that can be persisted. Create one per process and share it: its worker
// budget and queue bound every batch it serves. It is safe for concurrent
// use and holds no resources between calls, so it needs no closing.
type Resolver struct {
	cfg     Config
	sem     chan struct{} // one token per running shard scan
	waiting atomic.Int64  // shards admitted but not yet claimed by a worker
}

// NewResolver returns a Resolver configured by cfg, or an error wrapping
// [ErrInvalidConfig] that names the invalid field.
func NewResolver(cfg Config) (*Resolver, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Resolver{cfg: c, sem: make(chan struct{}, c.Workers)}, nil
}

// Config returns the Resolver's configuration with defaults filled in.
func (r *Resolver) Config() Config {
	c := r.cfg
	c.Backoff = append([]time.Duration(nil), c.Backoff...)
	return c
}

// Resolve finds the tip of every shard in req and returns one result per
// shard, in the order of req.Shards. If any shard fails, the context ends,
// the batch deadline passes or the queue is full, it returns an error and no
// results at all. Every worker it started has exited when it returns.
//
// The batch uses at most min(len(req.Shards), Workers) workers, and waits
// for the Resolver's shared budget before each shard scan.
func (r *Resolver) Resolve(ctx context.Context, req Request) ([]ShardResult, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	n := len(req.Shards)
	if n == 0 {
		return []ShardResult{}, nil
	}
	if r.cfg.BatchTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.BatchTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scan: stream %q: resolve %d shards: %w", req.Stream, n, err)
	}
	if err := r.admit(n); err != nil {
		return nil, fmt.Errorf("scan: stream %q: resolve %d shards: %w", req.Stream, n, err)
	}
	var claimed atomic.Int64
	defer func() { r.waiting.Add(claimed.Load() - int64(n)) }()

	results := make([]ShardResult, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(min(n, r.cfg.Workers))
	for i, shard := range req.Shards {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() (err error) {
			select {
			case r.sem <- struct{}{}:
			case <-gctx.Done():
				return &ShardError{Stream: req.Stream, Shard: shard, Err: gctx.Err()}
			}
			defer func() { <-r.sem }()
			claimed.Add(1)
			r.waiting.Add(-1)
			if err := gctx.Err(); err != nil {
				return &ShardError{Stream: req.Stream, Shard: shard, Err: err}
			}
			defer func() {
				if p := recover(); p != nil {
					err = &ShardError{Stream: req.Stream, Shard: shard, Err: fmt.Errorf("%w: %v", ErrPanic, p)}
				}
			}()
			res, err := r.resolveShard(gctx, req, shard)
			if err != nil {
				return &ShardError{Stream: req.Stream, Shard: shard, Err: err}
			}
			results[i] = res
			for _, h := range []func(string, ShardResult){r.cfg.Hooks.ShardResolved, req.Hooks.ShardResolved} {
				if h != nil {
					h(req.Stream, res)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Every shard finished, but if the batch ran out of time or was
	// cancelled meanwhile, publish nothing. The deadline is checked on the
	// clock too: a context's timer may not have fired yet.
	err := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && err == nil && !time.Now().Before(dl) {
		err = context.DeadlineExceeded
	}
	if err != nil {
		return nil, fmt.Errorf("scan: stream %q: resolve %d shards: %w", req.Stream, n, err)
	}
	return results, nil
}

// admit reserves n places in the queue of waiting shards, or fails.
func (r *Resolver) admit(n int) error {
	limit := int64(r.cfg.QueueSize)
	for {
		cur := r.waiting.Load()
		if cur+int64(n) > limit {
			if int64(n) > limit {
				return fmt.Errorf("%w: a batch of %d shards exceeds QueueSize %d", ErrQueueFull, n, limit)
			}
			return fmt.Errorf("%w: %d shards waiting, %d more do not fit in QueueSize %d", ErrQueueFull, cur, n, limit)
		}
		if r.waiting.CompareAndSwap(cur, cur+int64(n)) {
			return nil
		}
	}
}

func validate(req Request) error {
	if req.Client == nil {
		return fmt.Errorf("%w: stream %q: Client is nil", ErrInvalidRequest, req.Stream)
	}
	if req.Stream == "" {
		return fmt.Errorf("%w: Stream is empty", ErrInvalidRequest)
	}
	seen := make(map[string]int, len(req.Shards))
	for i, s := range req.Shards {
		if s == "" {
			return fmt.Errorf("%w: stream %q: Shards[%d] is empty", ErrInvalidRequest, req.Stream, i)
		}
		if j, dup := seen[s]; dup {
			return fmt.Errorf("%w: stream %q: shard %s is listed twice (Shards[%d] and Shards[%d])", ErrInvalidRequest, req.Stream, s, j, i)
		}
		seen[s] = i
	}
	return nil
}
