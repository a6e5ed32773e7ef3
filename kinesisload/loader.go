package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// ownResolverQueue is the queue of the Resolver a Loader makes for itself
// when [WithResolver] is not given: more shards than a stream can have.
const ownResolverQueue = 1 << 20

// Loader loads one Kinesis stream into a [Sink]. Create it with [New], run
// it with [Loader.Run], stop it with [Loader.Close].
type Loader struct {
	cfg   Config
	opt   options
	log   *slog.Logger
	hooks hooks
	tx    TransactionalSink // cfg.Sink, when it is transactional
	multi MultiSink         // cfg.Sink, when it takes many shards at once
	// buffered bounds the bytes of records held across every shard
	// (Config.MaxBufferedBytes); deliveries the Deliver calls in progress
	// (Config.MaxConcurrentDeliveries).
	buffered, deliveries *budget
	stats                statsTracker

	mu       sync.Mutex
	running  bool
	paused   bool
	closed   bool
	wake     chan struct{} // closed and replaced on Pause, Resume, Close
	graceful context.CancelFunc
	hard     context.CancelFunc
	done     chan struct{} // closed when Run returns
}

// New validates cfg and the options and returns a Loader. Every invalid
// field is reported by name and value, wrapped in [ErrInvalidConfig].
func New(cfg Config, opts ...Option) (*Loader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: a nil Option", ErrInvalidConfig)
		}
		opt.apply(&o)
	}
	switch {
	case o.coord != nil && o.store != nil:
		return nil, fmt.Errorf("%w: WithStore and WithCoordinator both given: the coordinator keeps the progress", ErrInvalidConfig)
	case o.coord != nil && cfg.Dir != "":
		return nil, fmt.Errorf("%w: Dir = %q: not used with WithCoordinator (the coordinator keeps the progress); leave it empty", ErrInvalidConfig, cfg.Dir)
	case o.store == nil && o.coord == nil && cfg.Dir == "":
		return nil, fmt.Errorf("%w: Dir = \"\": a journal directory is required unless WithStore or WithCoordinator is given", ErrInvalidConfig)
	case o.coord != nil && !cfg.StopAt.IsZero():
		return nil, fmt.Errorf("%w: StopAt = %v: a bounded replay runs on one host (Config.Dir or WithStore), not with WithCoordinator", ErrInvalidConfig, cfg.StopAt.UTC().Format(time.RFC3339Nano))
	}
	if o.resolver != nil && cfg.ResolveStrategy != 0 {
		if got := o.resolver.Config().Strategy; got != cfg.ResolveStrategy {
			return nil, fmt.Errorf("%w: ResolveStrategy = %v: the Resolver given with WithResolver uses %v", ErrInvalidConfig, cfg.ResolveStrategy, got)
		}
	}
	hs, err := newHooks(o.hooks)
	if err != nil {
		return nil, err
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	l := &Loader{
		cfg:  cfg.withDefaults(),
		opt:  o,
		log:  o.logger.With("stream", cfg.Stream),
		wake: make(chan struct{}),
		done: make(chan struct{}),
	}
	l.hooks = hs
	l.hooks.log, l.hooks.panics, l.hooks.obs = l.log, new(atomic.Int64), new(observers)
	l.tx, _ = cfg.Sink.(TransactionalSink)
	l.multi, _ = cfg.Sink.(MultiSink)
	l.stats.clock = time.Now
	if o.clock != nil {
		l.stats.clock = o.clock
	}
	l.buffered = newBudget(l.cfg.MaxBufferedBytes)
	l.deliveries = newBudget(int64(l.cfg.MaxConcurrentDeliveries))
	return l, nil
}

// Run initialises the Loader and then loads the stream until ctx ends, a
// fatal error happens, or [Loader.Close] is called; it returns ctx.Err(),
// the error, or [ErrClosed]. Initialisation resolves every tracked shard's
// LATEST into a concrete position and journals the whole batch before any
// shard is read; an initialisation that fails transiently (Kinesis
// unreachable, throttled, failing) publishes nothing and is started over
// after a backoff. While paused, Run waits for [Loader.Resume].
//
// Transient failures are retried (see the package documentation,
// "Retries"); a fatal error is a [*RunError] naming the stream, the shard
// and the operation, of the class [ErrSink], [ErrKinesis], [ErrLineage],
// [ErrJournal] or [ErrInvalidConfig].
//
// After a hard stop (ctx ends, or Close's context does) Run returns within
// about a second even if a Sink ignores its context; it then returns a
// [StuckError] naming the stuck shards, and commits nothing after it
// returned.
//
// Run may be called once at a time; after it returns it may be called again
// unless the Loader was closed.
func (l *Loader) Run(ctx context.Context) (err error) {
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return ErrClosed
	case l.running:
		l.mu.Unlock()
		return ErrRunning
	}
	l.running = true
	began, beganWall := time.Now(), l.stats.clock()
	done := make(chan struct{})
	l.done = done
	l.mu.Unlock()
	defer func() {
		l.stats.setInitialised(false)
		l.mu.Lock()
		l.running = false
		l.mu.Unlock()
		close(done)
	}()

	client := l.opt.client
	if client == nil {
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return &RunError{Stream: l.cfg.Stream, Op: "Config", Kind: ErrInvalidConfig, Err: fmt.Errorf("loading the AWS configuration: %w", err)}
		}
		// One retry layer, the Loader's: every call also passes
		// noSDKRetries, which covers a client given by WithClient.
		client = kinesis.NewFromConfig(awsCfg, noSDKRetries)
	}
	resolver := l.opt.resolver
	if resolver == nil {
		// This Resolver serves only this Loader, so its queue need not
		// bound anything: it must take a stream's every shard at once.
		if resolver, err = scan.NewResolver(scan.Config{QueueSize: ownResolverQueue, Strategy: l.cfg.ResolveStrategy}); err != nil {
			return err
		}
	}
	store := l.opt.store
	if store == nil && l.opt.coord == nil {
		j, err := journal.Open(l.cfg.Dir, journal.DefaultConfig())
		if err != nil {
			return &RunError{Stream: l.cfg.Stream, Op: "Load", Kind: ErrJournal, Err: fmt.Errorf("opening the journal: %w", err)}
		}
		if rec := j.Recovery(); rec.Torn != nil {
			l.log.Warn("journal: truncated the torn last write of a crash", "file", rec.Torn.File,
				"offset", rec.Torn.Offset, "bytes", rec.Torn.Bytes, "reason", rec.Torn.Reason)
		}
		if m := j.Recovery().Repaired; m != nil {
			l.log.Warn("journal: repaired, records after the last surviving one were removed",
				"last_index", m.LastIndex, "last_write", m.LastWrite, "repaired_at", m.Time)
		}
		defer func() {
			if cerr := j.Close(); cerr != nil && err == nil {
				err = &RunError{Stream: l.cfg.Stream, Op: "Save", Kind: ErrJournal, Err: fmt.Errorf("closing the journal: %w", cerr)}
			}
		}()
		if store, err = NewJournalStore(ctx, j, 0); err != nil {
			return stopError(l.cfg.Stream, "", "Load", ErrJournal, err)
		}
	}
	coord := l.opt.coord
	if coord == nil {
		coord = NewStoreCoordinator(store)
	}
	env := &session{l: l, client: client, resolver: resolver, coord: coord, shared: l.opt.coord != nil, began: began, beganWall: beganWall,
		fanout: fanoutSession{lock: make(chan struct{}, 1)}}
	for {
		if err := l.waitRunnable(ctx); err != nil {
			return err
		}
		gctx, hctx, gstop, ok := l.startSession(ctx)
		if !ok {
			continue // paused or closed between the wait and now
		}
		err := env.run(gctx, hctx, gstop)
		l.endSession()
		if se, ok := errors.AsType[*StuckError](err); ok && se.Cause == nil {
			if se.Cause = ctx.Err(); se.Cause == nil {
				se.Cause = ErrClosed // Close's context ended
			}
		}
		l.stats.setInitialised(false)
		var mismatch *StreamMismatchError
		startOver := l.cfg.OnStreamRecreated == StreamRecreatedStartOver && ctx.Err() == nil
		switch {
		case errors.Is(err, errReplayDone):
			return nil // every shard reached Config.StopAt
		case errors.As(err, &mismatch) && startOver:
			// Re-created while it was read: the next session's
			// initialisation archives the old progress and starts over.
			l.log.Warn("the stream was re-created while it was read; starting over", "old", mismatch.Stored.String(), "new", mismatch.Current.String())
			continue
		case err != nil && startOver && streamAbsent(err) && l.stopped():
			continue // paused or closed: the wait for the stream comes with Resume
		case err != nil && startOver && streamAbsent(err):
			// Deleted, maybe being re-created: wait for it, then the
			// next session checks its identity (and starts over).
			if werr := env.awaitStream(ctx, err); werr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return stopError(l.cfg.Stream, "", "DescribeStreamSummary", ErrKinesis, werr)
			}
			continue
		case err != nil && ctx.Err() == nil && streamInUse(err):
			return env.explainInUse(ctx, err)
		case err != nil:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
	}
}

// stopped reports whether the Loader is paused or closed.
func (l *Loader) stopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused || l.closed
}

// waitRunnable waits while the Loader is paused; it returns ErrClosed once
// closed and ctx.Err() when ctx ends.
func (l *Loader) waitRunnable(ctx context.Context) error {
	for {
		l.mu.Lock()
		closed, paused, wake := l.closed, l.paused, l.wake
		l.mu.Unlock()
		switch {
		case closed:
			return ErrClosed
		case ctx.Err() != nil:
			return ctx.Err()
		case !paused:
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
		}
	}
}

// startSession makes the contexts of one session: gctx ends on a graceful
// stop (Pause, Close: stop reading, finish in-flight batches), hctx on a
// hard one (ctx ends, or Close's context ends first).
func (l *Loader) startSession(ctx context.Context) (gctx, hctx context.Context, gstop context.CancelFunc, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.paused {
		return nil, nil, nil, false
	}
	hctx, l.hard = context.WithCancel(ctx)
	gctx, l.graceful = context.WithCancel(hctx)
	return gctx, hctx, l.graceful, true
}

func (l *Loader) endSession() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.graceful()
	l.hard()
	l.graceful, l.hard = nil, nil
}

// signal wakes Run's wait after a change of paused or closed. Called with
// l.mu held.
func (l *Loader) signal() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// Pause stops reading: a pending initialisation is cancelled and publishes
// nothing, in-flight batches finish and commit, and no new record is read
// until [Loader.Resume]. Pause does not wait.
func (l *Loader) Pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused || l.closed {
		return
	}
	l.paused = true
	if l.graceful != nil {
		l.graceful()
	}
	l.signal()
}

// Resume undoes [Loader.Pause]: Run initialises again (nothing is resolved
// twice: what was journaled is reused) and reading goes on.
func (l *Loader) Resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.paused {
		return
	}
	l.paused = false
	l.signal()
}

// Close stops the Loader like [net/http.Server.Shutdown]: it stops reading
// new records, lets in-flight batches finish and commit, and waits for Run
// to return. If ctx ends first, Close cancels the in-flight deliveries
// (their batches are not committed and will be delivered again) and returns
// ctx.Err() at once. Run then returns [ErrClosed]; so does every later Run.
// If a delivery ignores the cancellation, Run still returns within a second,
// with a [StuckError] naming its shard, and commits nothing more.
//
// Close is the graceful stop. Cancelling Run's context is the hard stop:
// in-flight deliveries are cancelled at once and not committed (their
// records are delivered again by the next run), like Close's context
// ending.
func (l *Loader) Close(ctx context.Context) error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		if l.graceful != nil {
			l.graceful()
		}
		l.signal()
	}
	running, done := l.running, l.done
	l.mu.Unlock()
	if !running {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		if l.hard != nil {
			l.hard()
		}
		l.mu.Unlock()
		return ctx.Err()
	}
}

// listShards returns every shard of the stream, following the pages. No
// ShardFilter is used: lineage needs the closed parents as well as the
// open shards, and every retained shard is exactly what an unfiltered list
// returns. Each page is one call under its own timeout, with the SDK's
// retries off.
func listShards(ctx context.Context, c scan.Client, stream string, timeout time.Duration) ([]types.Shard, error) {
	var shards []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	tokens := map[string]bool{}
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		out, err := c.ListShards(cctx, in, noSDKRetries)
		cancel()
		if err != nil {
			return nil, err
		}
		if out == nil {
			return nil, fmt.Errorf("%w: ListShards returned no output and no error", kerr.ErrOddAnswer)
		}
		shards = append(shards, out.Shards...)
		if out.NextToken == nil || *out.NextToken == "" {
			return shards, checkListing(shards)
		}
		if tokens[*out.NextToken] {
			// A listing that would go round in circles, growing
			// without bound until ctx ends.
			return nil, fmt.Errorf("%w: ListShards returned a NextToken it had returned before, after %d shards", kerr.ErrOddAnswer, len(shards))
		}
		tokens[*out.NextToken] = true
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// checkListing reports an odd answer when a listing has a shard without
// an ID, or a lineage Kinesis never gives: a shard listed as its own
// parent, or parents that go round in a cycle. Taken as they are, such
// shards would wait for themselves forever, read by no one, and Run would
// never say why.
func checkListing(shards []types.Shard) error {
	parents := make(map[string][]string, len(shards))
	for i, s := range shards {
		id := aws.ToString(s.ShardId)
		if id == "" {
			return fmt.Errorf("%w: ListShards listed a shard without a ShardId (entry %d of %d)", kerr.ErrOddAnswer, i, len(shards))
		}
		for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
			if p := aws.ToString(p); p != "" {
				if p == id {
					return fmt.Errorf("%w: ListShards listed shard %s as its own parent", kerr.ErrOddAnswer, id)
				}
				parents[id] = append(parents[id], p)
			}
		}
	}
	// Depth first, colouring: 1 on the path, 2 done.
	color := make(map[string]int, len(parents))
	var visit func(id string, path []string) error
	visit = func(id string, path []string) error {
		switch color[id] {
		case 1:
			return fmt.Errorf("%w: ListShards listed shards whose parents go round in a cycle: %s", kerr.ErrOddAnswer, strings.Join(append(path, id), " -> "))
		case 2:
			return nil
		}
		color[id] = 1
		for _, p := range parents[id] {
			if err := visit(p, append(path, id)); err != nil {
				return err
			}
		}
		color[id] = 2
		return nil
	}
	for _, id := range sortedKeys(parents) {
		if err := visit(id, nil); err != nil {
			return err
		}
	}
	return nil
}
