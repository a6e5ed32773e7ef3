package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// session is one run of initialisation and consumption, from a start or a
// Resume to a stop, a Pause or a fatal error.
type session struct {
	l        *Loader
	client   scan.Client
	resolver *scan.Resolver
	coord    Coordinator
	// shared says other hosts change the progress too (a coordinator
	// of WithCoordinator): the topology reloads it on refresh and Wake.
	shared bool
	// m is this session's membership of the stream's fleet, store its
	// shared progress (during initialisation: the store Initialise gives).
	m     Membership
	store PositionStore
	// identity is the stream's identity, checked at the start of every
	// initialisation and after every ListShards.
	identity StreamIdentity
	// began is when Run began, on this host's monotonic clock: a first
	// run's T0 is Kinesis's clock at that moment (see keepStart).
	began time.Time
	// beganWall is the host's wall clock at that moment ([WithClock]),
	// used for T0 only when Kinesis's answer has no Date.
	beganWall time.Time
	// clockSlack is how far Kinesis's clock may be ahead of the one this
	// Run read: scan.HostClockBound when the answer had no Date.
	clockSlack time.Duration
	// t0 is the T0 of this Run's start-up once taken, kept across its
	// attempts (see startTime); zero once the start-up is saved.
	t0 time.Time

	// commit guards the consume loops' saves against sealed: once set,
	// Run has given up on stuck loops, and nothing more is saved.
	commit sync.RWMutex
	sealed bool

	// fanout is the consumer of Config.ReadMode ReadFanOut (readmode.go).
	fanout fanoutSession

	// rewound maps a shard to the rewind (its ID) this session resumed
	// it from (rewind.go).
	rewound map[string]string
	// bound and atBound are Config.StopAt's (stopat.go).
	bound   boundClock
	atBound map[string]bool
}

// seal stops every later save of the consume loops, after the saves in
// flight have finished.
func (s *session) seal() {
	s.commit.Lock()
	s.sealed = true
	s.commit.Unlock()
}

// shardDone is what a consume loop reports when it returns.
type shardDone struct {
	id        string
	completed bool // the shard's COMPLETED state is durable
	lost      bool // the lease was lost: not a failure of the Loader
	bounded   bool // the shard reached Config.StopAt
	err       error
}

// run initialises and then schedules consume loops until gctx ends
// (returns nil: a graceful stop) or a loop fails (returns its error).
// Every goroutine it started has exited when it returns.
func (s *session) run(gctx, hctx context.Context, stop context.CancelFunc) error {
	l := s.l
	stream := l.cfg.Stream
	m, err := s.coord.Join(gctx, stream)
	if err != nil {
		if gctx.Err() != nil && errors.Is(err, gctx.Err()) {
			return nil
		}
		return stopError(stream, "", "Join", ErrJournal, fmt.Errorf("joining the fleet: %w", err))
	}
	defer func() {
		// Every loop has returned (or is given up as stuck): hand what is
		// left over, even after a hard stop.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), l.cfg.CallTimeout)
		defer cancel()
		if err := m.Leave(ctx); err != nil {
			l.log.Warn("leaving the fleet", "err", err)
		}
	}()
	s.m, s.store = m, m.Store()
	lockLost := 0
	for attempt := 1; ; attempt++ {
		var t *topology
		err := m.Initialise(gctx, func(ctx context.Context, store PositionStore) (err error) {
			s.store = store
			defer func() { s.store = m.Store() }()
			t, err = s.initialise(ctx)
			return err
		})
		if err == nil {
			return s.schedule(gctx, hctx, stop, t)
		}
		if errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrSink) && gctx.Err() == nil {
			// Another host took the initialisation over: nothing of
			// ours is visible; wait for its commit. (A Sink's refusal
			// of a start batch as from a lost lease is the Sink's
			// failure, not the lock's: see sinkFenced.)
			// After a pause: a coordinator that answers "lost" at once
			// must not be asked millions of times a second.
			lockLost++
			wait := l.retryPolicy().Delay(lockLost)
			l.log.Warn("lost the initialisation lock; starting over", "err", err, "after", wait)
			attempt--
			if err := backoff.Sleep(gctx, wait); err != nil {
				return nil // paused or closed while waiting
			}
			continue
		}
		if gctx.Err() != nil && errors.Is(err, gctx.Err()) {
			return nil // stopped during initialisation: nothing was published
		}
		if !initTransient(err) || (l.cfg.KinesisMaxAttempts > 0 && attempt >= l.cfg.KinesisMaxAttempts) {
			// Every failure of initialise is a *RunError with its
			// class already; anything else is named, unclassified.
			return stopError(l.cfg.Stream, "", "Initialise", nil, err)
		}
		// Nothing of the batch was published: start over.
		wait := l.retryPolicy().Delay(attempt)
		l.retried("", "Initialise", attempt, wait, err)
		if err := backoff.Sleep(gctx, wait); err != nil {
			return nil // paused or closed while waiting
		}
	}
}

// initTransient reports whether a failed initialisation may succeed if it
// is started over: its cause is a transient Kinesis failure (the LATEST
// scan gave up after its own retries, or its batch deadline passed), not a
// refusal, a lineage violation, a store or Sink failure.
func initTransient(err error) bool {
	var re *RunError
	if errors.As(err, &re) && re.Kind != ErrKinesis {
		return false
	}
	return kerr.IsRetryable(err) || kerr.IsExpiredIterator(err)
}

// initialise builds the topology, resolves every LATEST into a concrete
// position and saves the batch as one atomic step, before any shard is read.
func (s *session) initialise(ctx context.Context) (*topology, error) {
	l, stream := s.l, s.l.cfg.Stream
	began := time.Now()
	// Before anything is loaded or stored: the progress must be this
	// stream's (or is archived here, when the stream was re-created and
	// Config.OnStreamRecreated says start over).
	if err := s.establishIdentity(ctx); err != nil {
		return nil, err
	}
	stored, err := s.store.Load(ctx, stream)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &RunError{Stream: stream, Op: "Load", Kind: ErrJournal, Err: fmt.Errorf("loading progress: %w", err)}
	}
	// The Sink's checkpoint of a shard rewound since does not undo the
	// rewind (rewind.go).
	rewinds, err := s.pendingRewinds(ctx, stream)
	if err != nil {
		return nil, err
	}
	rewoundCPs := map[string]scan.Position{}
	var fromSink []ShardProgress
	inSink := map[string]bool{}
	if l.tx != nil {
		// Under a deadline: in a fleet this runs under the
		// initialisation lock, which a call that never returns would
		// hold.
		cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
		cps, err := l.tx.Checkpoints(cctx, stream)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &RunError{Stream: stream, Op: "Checkpoints", Kind: ErrSink, Err: fmt.Errorf("loading the sink's checkpoints: %w", err)}
		}
		for id, pos := range cps {
			inSink[id] = true
			if err := pos.Validate(); err != nil {
				return nil, &RunError{Stream: stream, Shard: id, Op: "Checkpoints", Kind: ErrSink, Err: fmt.Errorf("the sink's checkpoint: %w", err)}
			}
			if _, ok := rewinds[id]; ok {
				rewoundCPs[id] = pos
				continue
			}
			u := ShardProgress{ShardID: id, Position: pos}
			if pos.Kind == scan.KindShardEnd {
				u.State = StateCompleted
			}
			stored[id] = merge(stored[id], u)
			fromSink = append(fromSink, u)
		}
	}
	if !s.shared { // in a fleet, each lease settles its shard's rewind
		if err := s.settleRewinds(ctx, stream, rewinds, rewoundCPs); err != nil {
			return nil, err
		}
	}
	t := newTopology(stream, l.cfg.StartPosition, l.cfg.Shards, stored)
	if ss, ok := s.store.(StartedStore); ok && t.initial {
		started, err := ss.Started(ctx, stream)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &RunError{Stream: stream, Op: "Load", Kind: ErrJournal, Err: fmt.Errorf("loading whether the stream was started: %w", err)}
		}
		if started {
			l.log.Warn("no shard the Loader tracks has progress, but the stream's start-up was published: not a first run; shards start at TRIM_HORIZON (items deleted by hand?)")
			t.initial = false
		}
	}
	t.outOfOrder = make(map[string]bool, len(l.cfg.OutOfOrderShards))
	for _, id := range l.cfg.OutOfOrderShards {
		t.outOfOrder[id] = true
	}
	shards, err := s.listShardsChecked(ctx)
	if err != nil {
		return nil, err
	}
	updates, err := s.observe(t, shards)
	if err != nil {
		return nil, err
	}
	// In a fleet, a shard whose item was deleted by hand is not a shard
	// born since: recovered from the Sink, or Run stops naming it.
	if err := s.audit(ctx, t, stored, true); err != nil {
		return nil, err
	}
	for _, id := range sortedKeys(l.cfg.Shards) {
		if t.nodes[id] == nil {
			return nil, &RunError{Stream: stream, Shard: id, Op: "Config", Kind: ErrInvalidConfig,
				Err: fmt.Errorf("%w: Shards[%s]: stream %s has no such shard", ErrInvalidConfig, id, stream)}
		}
		if l.cfg.Shards[id].Kind == scan.KindShardEnd && !t.nodes[id].closed {
			return nil, &RunError{Stream: stream, Shard: id, Op: "Config", Kind: ErrInvalidConfig,
				Err: fmt.Errorf("%w: Shards[%s] = SHARD_END: the shard is open in stream %s; SHARD_END skips only a closed shard", ErrInvalidConfig, id, stream)}
		}
	}
	// A shard the sink completed may release its children.
	t.apply(fromSink)
	// Never a parent after its child: refuse before anything is saved.
	if err := t.checkOrder(); err != nil {
		shard := ""
		if pe, ok := errors.AsType[*ParentAfterChildError](err); ok {
			shard = pe.Parent
		}
		return nil, stopError(stream, shard, "Lineage", ErrLineage, err)
	}
	pending := t.unresolved()
	unanswered := 0
	var t0 time.Time
	if len(pending) > 0 {
		l.log.Info("resolving LATEST", "shards", len(pending))
		var done atomic.Int64
		req := scan.Request{Client: s.client, Stream: stream, Shards: pending, Hooks: scan.Hooks{
			ShardResolved: func(stream string, r scan.ShardResult) {
				initProgress(s.store)
				l.hooks.onProgress(InitProgress{Stream: stream, ShardID: r.Shard, Position: r.Position,
					Done: int(done.Add(1)), Total: len(pending), Calls: r.Stats.Calls, Bytes: r.Stats.Bytes})
			},
			Retry: func(e scan.RetryEvent) {
				initProgress(s.store)
				l.retried(e.Shard, e.Op, e.Attempt, e.Backoff, e.Err)
			},
		}}
		var results []scan.ShardResult
		if m, ok := s.store.(repairMarker); ok && m.repairMark() != nil {
			// The journal lost decisions: a fresh LATEST could skip records.
			mark := m.repairMark()
			if results, err = rewindAfterRepair(stream, pending, mark); err != nil {
				return nil, stopError(stream, "", "Load", ErrJournal, err)
			}
			l.log.Warn("the journal was repaired: starting the shards to resolve before its last surviving write instead",
				"shards", len(pending), "last_write", mark.LastWrite, "rewind", RepairRewind)
		} else {
			// T0 is journaled before anything is resolved at it.
			if t0, err = s.startTime(ctx); err != nil {
				return nil, err
			}
			req.At = t0
			if results, err = s.resolver.Resolve(ctx, req); err != nil {
				if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
					return nil, err
				}
				shard := ""
				var se *scan.ShardError
				if errors.As(err, &se) {
					shard = se.Shard
				}
				return nil, &RunError{Stream: stream, Shard: shard, Op: "Resolve", Kind: ErrKinesis, Err: fmt.Errorf("initialisation: %w", err)}
			}
		}
		for _, r := range results {
			unanswered += r.Stats.Unanswered
			l.log.Debug("resolved", "shard", r.Shard, "position", r.Position, "ended", r.Ended, "calls", r.Stats.Calls, "bytes", r.Stats.Bytes)
		}
		// Every resolved position goes into the batch, also that of a
		// shard whose LATEST was stored before (a new shard's update from
		// observe carries LATEST, replaced here; merge makes the pair one).
		updates = append(updates, t.resolved(results)...)
		for i, u := range updates {
			if n := t.nodes[u.ShardID]; n != nil && u.Position.Kind == scan.KindLatest {
				updates[i].Position = n.Position
			}
		}
	}
	updates = append(updates, fromSink...)
	updates = append(updates, t.activate()...)
	// The one record that publishes the batch: until it is durable no
	// shard is read, and if it never becomes durable nothing was published.
	if err := s.save(ctx, t, updates); err != nil {
		return nil, err
	}
	if err := s.prune(ctx, t); err != nil {
		return nil, err
	}
	// A TransactionalSink stores every start it lacks, so that it holds
	// the whole truth without the journal.
	handed, err := s.storeStarts(ctx, t, inSink)
	if err != nil {
		return nil, err
	}
	if handed > 0 {
		l.log.Info("stored the starts in the sink", "shards", handed)
	}
	// Every LATEST is resolved and saved: a later start-up that finds new
	// shards to resolve (a widened selection) takes its own T0.
	if err := s.clearStart(ctx); err != nil {
		return nil, err
	}
	// From now on a new shard is born after the start: TRIM_HORIZON.
	t.initial, t.resolving = false, false
	starts := map[string]scan.Position{}
	reused := 0
	for id, n := range t.nodes {
		if !n.listed || !t.tracked(id) || n.State == StateCompleted {
			continue
		}
		starts[id] = n.Position
		if p, ok := stored[id]; ok && p.Position.Kind != 0 {
			reused++
		}
	}
	var seed []ShardProgress
	for id, n := range t.nodes {
		if t.tracked(id) && n.State != 0 {
			seed = append(seed, n.ShardProgress)
		}
	}
	l.stats.saved(seed)
	l.stats.setInitialised(true)
	took := time.Since(began)
	strategy := s.resolver.Config().Strategy
	l.hooks.onInit(InitResolved{Stream: stream, Resolved: len(pending), Reused: reused, Strategy: strategy, Unanswered: unanswered, Positions: starts, Duration: took, T0: t0})
	l.log.Info("initialised", "resolved", len(pending), "strategy", strategy, "unanswered", unanswered, "reused", reused, "reading", len(starts), "took", took)
	// The topology may have changed while the batch was resolved (a split
	// or merge of a shard being scanned): list again before reading.
	if len(pending) > 0 {
		if err := s.refresh(ctx, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// save makes updates durable, then applies them to the topology and tells
// the hooks about state changes.
func (s *session) save(ctx context.Context, t *topology, updates []ShardProgress) error {
	if len(updates) == 0 {
		return nil
	}
	before := make(map[string]ShardState, len(updates))
	for _, u := range updates {
		if n := t.nodes[u.ShardID]; n != nil {
			before[u.ShardID] = n.saved
		}
	}
	if err := s.store.Save(ctx, t.stream, updates); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err
		}
		return &RunError{Stream: t.stream, Op: "Save", Kind: ErrJournal, Err: fmt.Errorf("saving progress: %w", err)}
	}
	t.apply(updates)
	s.l.stats.saved(updates)
	for _, u := range updates {
		id := u.ShardID
		if now := t.nodes[id].State; now != before[id] {
			s.l.hooks.onState(ShardStateChanged{Stream: t.stream, ShardID: id, From: before[id], To: now})
			before[id] = now
		}
	}
	return nil
}

// refresh lists the shards, saves the new ones and activates the children
// whose parents are complete.
func (s *session) refresh(ctx context.Context, t *topology) error {
	if err := s.sync(ctx, t); err != nil {
		return err
	}
	shards, err := s.listShardsChecked(ctx)
	if err != nil {
		return err
	}
	updates, err := s.observe(t, shards)
	if err != nil {
		return s.explainVanished(ctx, err)
	}
	if err := s.save(ctx, t, updates); err != nil {
		return err
	}
	if err := s.save(ctx, t, t.activate()); err != nil {
		return err
	}
	return s.prune(ctx, t)
}

// observe merges a listing into the topology (see [topology.observe]); a
// lineage violation comes back as a [*RunError] of class [ErrLineage].
func (s *session) observe(t *topology, shards []types.Shard) ([]ShardProgress, error) {
	updates, err := t.observe(shards)
	if err != nil {
		return nil, stopError(t.stream, "", "Lineage", ErrLineage, err)
	}
	return updates, nil
}

// schedule runs one consume loop per runnable shard, starts children when
// their parents complete, and lists shards periodically, until gctx ends or
// a loop fails. It waits for every loop before it returns.
func (s *session) schedule(gctx, hctx context.Context, gstop context.CancelFunc, t *topology) error {
	// For a MultiSink one windower batches every shard's pages (window.go).
	var windows *windower
	if s.l.multi != nil {
		windows = newWindower(s, hctx, true)
		defer s.endWindows(windows)
	}
	done := make(chan shardDone)
	// finished lets a loop that outlives schedule (abandoned as stuck)
	// exit without a receiver.
	finished := make(chan struct{})
	defer close(finished)
	hint := make(chan struct{}, 1)
	running := map[string]bool{}
	var fatal error
	stop := func(err error) {
		if fatal == nil && err != nil {
			fatal = err
		}
		gstop()
	}
	stopping := func() bool { return gctx.Err() != nil || fatal != nil }
	// start runs a loop for every shard whose lease the coordinator
	// grants among those ready in this host's view (the default: all).
	start := func() {
		leases, err := s.m.Acquire(gctx, s.unbounded(t.runnable()))
		if err != nil {
			if gctx.Err() == nil {
				stop(stopError(t.stream, "", "Acquire", ErrJournal, fmt.Errorf("acquiring leases: %w", err)))
			}
			return
		}
		sinkAt := s.sinkCheckpoints(gctx, leases)
		for _, ls := range leases {
			id := ls.Shard()
			if running[id] || t.nodes[id] == nil {
				s.release(hctx, ls) // not ours to read (never by the contract)
				continue
			}
			t.apply([]ShardProgress{ls.Progress()}) // where the fleet left it
			settled, lost, err := s.leaseRewound(gctx, t, ls)
			if err != nil || lost {
				s.release(hctx, ls)
				if err != nil && gctx.Err() == nil {
					stop(err)
				}
				continue
			}
			if pos, ok := sinkAt[id]; ok && !settled {
				t.apply([]ShardProgress{{ShardID: id, Position: pos}}) // or the Sink, if further
			}
			if t.nodes[id].State == StateCompleted {
				s.release(hctx, ls)
				continue
			}
			running[id] = true
			c := &consumer{s: s, lease: ls, shard: id, from: t.nodes[id].Position, draining: t.nodes[id].State == StateDraining, hint: hint, keys: t.nodes[id].keys, windows: windows}
			since := s.leaseAcquired(ls, c.from)
			go func() {
				lg, lh, unwatch := leaseContexts(gctx, hctx, ls)
				completed, err := c.run(lg, lh)
				unwatch()
				lost := isLost(ls, err)
				switch {
				case lost:
					s.leaseLost(ls, err, since)
					if isSinkFenced(err) {
						s.releaseFenced(hctx, ls)
					}
				case s.release(hctx, ls):
					s.leaseReleased(gctx, ls, completed, since)
				default:
					s.l.stats.leaseEnded(id, endUncounted) // left to expire; not a handoff
				}
				select {
				case done <- shardDone{id: id, completed: completed, lost: lost, bounded: c.bounded, err: err}:
				case <-finished:
				}
			}()
		}
	}
	start()
	if s.replayOver(t) {
		stop(errReplayDone)
	}
	ticker := time.NewTicker(s.l.cfg.ListShardsInterval)
	defer ticker.Stop()
	for {
		if stopping() && len(running) == 0 {
			return fatal
		}
		select {
		case d := <-done:
			delete(running, d.id)
			switch {
			case d.lost: // reported by leaseLost
			case d.err != nil && !(errors.Is(d.err, context.Canceled) && gctx.Err() != nil):
				stop(s.explain(hctx, d.err))
			case d.bounded:
				s.markBound(d.id)
				if s.replayOver(t) {
					stop(errReplayDone)
				}
			case d.completed && !stopping():
				t.apply([]ShardProgress{{ShardID: d.id, State: StateCompleted, Position: scan.ShardEnd()}})
				// A Pause or Close may cancel gctx during this save: that
				// is a stop, not a failure (the next initialisation
				// activates the children from the durable COMPLETED).
				if err := s.save(gctx, t, t.activate()); err != nil {
					if gctx.Err() == nil {
						stop(err)
					}
					continue
				}
				start()
				if s.replayOver(t) {
					stop(errReplayDone)
				}
			}
		case <-ticker.C:
			if stopping() {
				continue
			}
			if err := s.refresh(gctx, t); err != nil && gctx.Err() == nil {
				stop(err)
				continue
			}
			start()
		case <-s.m.Wake():
			if stopping() {
				continue
			}
			if err := s.sync(gctx, t); err != nil && gctx.Err() == nil {
				stop(err)
				continue
			}
			start()
		case <-hint:
			if stopping() {
				continue
			}
			if err := s.refresh(gctx, t); err != nil && gctx.Err() == nil {
				stop(err)
				continue
			}
			start()
		case <-gctx.Done():
			// Wait for the loops: they finish their in-flight batch. After
			// a hard stop, a loop that does not return within stuckGrace
			// is given up: Run must not hang on a Sink that ignores its
			// context.
			hard := hctx.Done()
			var grace <-chan time.Time
			for len(running) > 0 {
				select {
				case d := <-done:
					delete(running, d.id)
					if d.err != nil && !d.lost && !errors.Is(d.err, context.Canceled) && fatal == nil {
						fatal = d.err
					}
				case <-hard:
					hard = nil
					timer := time.NewTimer(stuckGrace)
					defer timer.Stop()
					grace = timer.C
				case <-grace:
					s.seal()
					stuck := sortedKeys(running)
					s.l.log.Error("shards did not stop after the hard stop; giving up on them", "shards", stuck, "grace", stuckGrace)
					// A Deliver (or a hook) that ignores its context: the
					// destination's failure.
					return &RunError{Stream: s.l.cfg.Stream, Shard: stuck[0], Op: "Deliver", Kind: ErrSink,
						Err: &StuckError{Stream: s.l.cfg.Stream, Shards: stuck}}
				}
			}
			return fatal
		}
	}
}

// sync merges the shared progress into the topology when other hosts
// change it too (a fleet): parents they completed, positions they
// committed. It then activates the children whose parents are all
// COMPLETED. The default coordinator's progress changes only through this
// session, so there is nothing to do.
func (s *session) sync(ctx context.Context, t *topology) error {
	if !s.shared {
		return nil
	}
	stored, err := s.store.Load(ctx, t.stream)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return stopError(t.stream, "", "Load", ErrJournal, fmt.Errorf("loading the fleet's progress: %w", err))
	}
	if err := s.audit(ctx, t, stored, false); err != nil {
		return err
	}
	updates := make([]ShardProgress, 0, len(stored))
	for id, p := range stored {
		p.ShardID = id
		updates = append(updates, p)
	}
	t.apply(updates)
	return s.save(ctx, t, t.activate())
}

// release gives a lease back after its shard's loop returned, with a
// context of its own: a handoff must complete even while the session
// stops. A failure leaves the lease to expire; it reports whether the
// release succeeded.
func (s *session) release(hctx context.Context, ls Lease) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), s.l.cfg.CallTimeout)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		s.l.log.Warn("releasing a lease", "shard", ls.Shard(), "epoch", ls.Epoch(), "err", err)
		return false
	}
	return true
}
