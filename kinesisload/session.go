package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// A shard's life on this host is decided in two files. This one holds the
// session: initialisation (the stream's identity checked, T0 taken and
// kept, the shards listed and resolved, every start journaled, the fleet's
// audit) and scheduling (which shards are ready, leases asked for, a
// consumer started per lease, a closed shard's children unblocked, pruning).
// consume.go holds a shard's run: read, deliver, commit, and what a lease's
// loss, release or handoff does. The concerns they call into have files of
// their own: identity.go (the stream's identity and start-over),
// readmode.go (polling or fan-out), window.go (batches across pages and
// shards), rewind.go and stopat.go (an operator's rewind, a bounded
// replay), coordinator.go (the seam to a fleet).

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
	// initialising is true while the initialisation runs (see sync).
	initialising bool
	// gate confirms the stream's identity after a reader gets a fresh
	// iterator (see confirmIdentity).
	gate identityGate
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
	// startedFresh is true when this initialisation attempt's keepStart
	// made the pending T0 (none was pending): every checkpoint the Sink
	// holds then predates it, so none is a start batch stored at it (see
	// continueFirstRun).
	startedFresh bool

	// hard is the session's hard context (see abandonable).
	hard context.Context

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
	// Each session checks the identity it establishes: the previous
	// session's checks (a mismatch it stopped for) are not this one's.
	s.gate = identityGate{}
	s.hard = hctx
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
			s.store, s.initialising = store, true
			defer func() { s.store, s.initialising = m.Store(), false }()
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
	return kerr.IsRetryable(err) || kerr.IsExpiredIterator(err) || errors.Is(err, errResolverBusy) || errors.Is(err, errShardExpired)
}

// errShardExpired marks a start-up whose scan found a shard listed closed
// gone (expired by retention since the listing).
var errShardExpired = errors.New("a closed shard expired while it was resolved")

// errResolverBusy marks a batch refused by a shared Resolver whose queue is
// full of other batches only for the moment: the batch itself fits.
var errResolverBusy = errors.New("the resolver's queue is busy with other batches")

// initialise builds the topology, resolves every LATEST into a concrete
// position and saves the batch as one atomic step, before any shard is read.
func (s *session) initialise(ctx context.Context) (*topology, error) {
	l, stream := s.l, s.l.cfg.Stream
	began := time.Now()
	s.startedFresh = false
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
	storeFirst := newTopology(stream, l.cfg.StartPosition, l.cfg.Shards, stored).initial
	fromSink, inSink, rewoundCPs, err := s.sinkProgress(ctx, stored, rewinds)
	if err != nil {
		return nil, err
	}
	if !s.shared { // in a fleet, each lease settles its shard's rewind
		if err := s.settleRewinds(ctx, stream, rewinds, rewoundCPs); err != nil {
			return nil, err
		}
	}
	t := newTopology(stream, l.cfg.StartPosition, l.cfg.Shards, stored)
	if err := s.continueFirstRun(ctx, t, storeFirst); err != nil {
		return nil, err
	}
	if err := s.checkStarted(ctx, t); err != nil {
		return nil, err
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
	if err := s.checkSelection(t); err != nil {
		return nil, err
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
		var results []scan.ShardResult
		if results, t0, err = s.resolve(ctx, pending); err != nil {
			// A shard listed closed that is gone now expired by
			// retention meanwhile: it had nothing at or after T0. Start
			// over; the next listing no longer has it.
			if re, ok := errors.AsType[*RunError](err); ok && re.Shard != "" && errorIsNotFound(err) {
				if n := t.nodes[re.Shard]; n != nil && n.closed {
					return nil, &RunError{Stream: stream, Shard: re.Shard, Op: re.Op, Kind: ErrKinesis, Err: fmt.Errorf("%w: %w", errShardExpired, re.Err)}
				}
			}
			return nil, err
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
	s.reportInitialised(t, stored, len(pending), unanswered, t0, began)
	// The topology may have changed while the batch was resolved (a split
	// or merge of a shard being scanned): list again before reading.
	if len(pending) > 0 {
		if err := s.refresh(ctx, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// continueFirstRun keeps t a first run when the store holds no progress
// (storeFirst) and a start time is pending, although a TransactionalSink
// holds checkpoints: they are the start batches of a first initialisation
// that stopped before it published (another host's, or this one's before
// a crash), delivered at that same T0. The shards without progress then
// resolve at T0, as that initialisation resolved them, not from
// TRIM_HORIZON as shards born since. (Taken for a later run, a parent
// closed before T0 was read from TRIM_HORIZON after a child whose start
// the Sink held: Run stopped with a ParentAfterChildError at every start.)
func (s *session) continueFirstRun(ctx context.Context, t *topology, storeFirst bool) error {
	ss, ok := s.store.(StartStore)
	if !storeFirst || t.initial || !ok {
		return nil
	}
	_, pending, err := ss.LoadStart(ctx, s.l.cfg.Stream)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &RunError{Stream: s.l.cfg.Stream, Op: "LoadStart", Kind: ErrJournal, Err: fmt.Errorf("loading the pending start time: %w", err)}
	}
	if pending && !s.startedFresh {
		// Nothing was read before the first start-up published: the
		// Sink's checkpoints are where reading starts.
		t.initial = true
		for _, n := range t.nodes {
			n.begun = false
		}
	}
	return nil
}

// checkStarted: a topology with no progress of any shard the Loader
// tracks is a first run, unless the store says the stream's start-up was
// published before (the items were deleted by hand): then new shards
// start at TRIM_HORIZON, not at LATEST.
func (s *session) checkStarted(ctx context.Context, t *topology) error {
	l, stream := s.l, s.l.cfg.Stream
	if ss, ok := s.store.(StartedStore); ok && t.initial {
		started, err := ss.Started(ctx, stream)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &RunError{Stream: stream, Op: "Load", Kind: ErrJournal, Err: fmt.Errorf("loading whether the stream was started: %w", err)}
		}
		if started {
			l.log.Warn("no shard the Loader tracks has progress, but the stream's start-up was published: not a first run; shards start at TRIM_HORIZON (items deleted by hand?)")
			t.initial = false
		}
	}
	return nil
}

// sinkProgress folds a TransactionalSink's checkpoints into stored: the
// Sink's is the truth of what it holds. It returns the updates they make
// (fromSink), the shards the Sink has a checkpoint of (inSink), and the
// checkpoints of shards rewound since (rewoundCPs, set aside: the Sink's
// checkpoint of a shard rewound since does not undo the rewind).
func (s *session) sinkProgress(ctx context.Context, stored map[string]ShardProgress, rewinds map[string]Rewind) (fromSink []ShardProgress, inSink map[string]bool, rewoundCPs map[string]scan.Position, err error) {
	l, stream := s.l, s.l.cfg.Stream
	inSink, rewoundCPs = map[string]bool{}, map[string]scan.Position{}
	if l.tx == nil {
		return nil, inSink, rewoundCPs, nil
	}
	// Under a deadline: in a fleet this runs under the initialisation
	// lock, which a call that never returns would hold.
	cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	cps, err := s.checkpoints(cctx, stream)
	cancel()
	if err != nil {
		if isStuck(err) {
			return nil, nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, nil, ctx.Err()
		}
		return nil, nil, nil, &RunError{Stream: stream, Op: "Checkpoints", Kind: ErrSink, Err: fmt.Errorf("loading the sink's checkpoints: %w", err)}
	}
	for id, pos := range cps {
		inSink[id] = true
		if err := pos.Validate(); err != nil {
			return nil, nil, nil, &RunError{Stream: stream, Shard: id, Op: "Checkpoints", Kind: ErrSink, Err: fmt.Errorf("the sink's checkpoint: %w", err)}
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
	return fromSink, inSink, rewoundCPs, nil
}

// checkSelection refuses a Config.Shards entry naming a shard the stream
// does not have, or SHARD_END for a shard that is open.
func (s *session) checkSelection(t *topology) error {
	l, stream := s.l, s.l.cfg.Stream
	for _, id := range sortedKeys(l.cfg.Shards) {
		if t.nodes[id] == nil {
			return &RunError{Stream: stream, Shard: id, Op: "Config", Kind: ErrInvalidConfig,
				Err: fmt.Errorf("%w: Shards[%s]: stream %s has no such shard", ErrInvalidConfig, id, stream)}
		}
		// Not listed: it expired (retention), after it was closed.
		if n := t.nodes[id]; l.cfg.Shards[id].Kind == scan.KindShardEnd && n.listed && !n.closed {
			return &RunError{Stream: stream, Shard: id, Op: "Config", Kind: ErrInvalidConfig,
				Err: fmt.Errorf("%w: Shards[%s] = SHARD_END: the shard is open in stream %s; SHARD_END skips only a closed shard", ErrInvalidConfig, id, stream)}
		}
	}
	return nil
}

// resolve resolves the shards of pending at T0, journaled first (or, after
// a repair of the journal, before its last surviving write), telling the
// hooks of each shard resolved and each retry.
func (s *session) resolve(ctx context.Context, pending []string) (results []scan.ShardResult, t0 time.Time, err error) {
	l, stream := s.l, s.l.cfg.Stream
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
	if m, ok := s.store.(repairMarker); ok && m.repairMark() != nil {
		// The journal lost decisions: a fresh LATEST could skip records.
		mark := m.repairMark()
		if results, err = rewindAfterRepair(stream, pending, mark); err != nil {
			return nil, time.Time{}, stopError(stream, "", "Load", ErrJournal, err)
		}
		// A pending T0 that survived the repair was written before every
		// lost decision of this stream: never start after it.
		if ss, ok := s.store.(StartStore); ok {
			t0, pendingT0, err := ss.LoadStart(ctx, stream)
			if err != nil {
				return nil, time.Time{}, stopError(stream, "", "LoadStart", ErrJournal, fmt.Errorf("loading the start time: %w", err))
			}
			if at := scan.AtTimestamp(t0); pendingT0 && len(results) > 0 && at.Timestamp.Before(results[0].Position.Timestamp) {
				for i := range results {
					results[i].Position = at
				}
			}
		}
		l.log.Warn("the journal was repaired: starting the shards to resolve before its last surviving write instead",
			"shards", len(pending), "last_write", mark.LastWrite, "rewind", RepairRewind)
	} else {
		// T0 is journaled before anything is resolved at it.
		if t0, err = s.startTime(ctx); err != nil {
			return nil, time.Time{}, err
		}
		req.At = t0
		if results, err = s.resolver.Resolve(ctx, req); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, time.Time{}, err
			}
			shard := ""
			var se *scan.ShardError
			if errors.As(err, &se) {
				shard = se.Shard
			}
			if errors.Is(err, scan.ErrQueueFull) && len(pending) <= s.resolver.Config().QueueSize {
				err = fmt.Errorf("%w: %w", errResolverBusy, err)
				return nil, time.Time{}, &RunError{Stream: stream, Shard: shard, Op: "Resolve", Kind: ErrKinesis, Err: fmt.Errorf("initialisation: %w", err)}
			}
			// A stream re-created while it was resolved (a host paused
			// meanwhile) refuses the old stream's sequence numbers: that
			// is its re-creation, not a failure of the position (found by
			// the simulation, seed 252549814).
			return nil, time.Time{}, s.explain(ctx, &RunError{Stream: stream, Shard: shard, Op: "Resolve", Kind: ErrKinesis, Err: fmt.Errorf("initialisation: %w", err)})
		}
	}
	return results, t0, nil
}

// reportInitialised tells the Stats, the hooks and the log that the
// start-up batch is durable: the shards read from now on, and how many of
// their positions were stored before (reused) rather than resolved.
func (s *session) reportInitialised(t *topology, stored map[string]ShardProgress, resolved, unanswered int, t0, began time.Time) {
	l, stream := s.l, s.l.cfg.Stream
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
	l.stats.restart(seed)
	l.stats.setInitialised(true)
	took := time.Since(began)
	strategy := s.resolver.Config().Strategy
	l.hooks.onInit(InitResolved{Stream: stream, Resolved: resolved, Reused: reused, Strategy: strategy, Unanswered: unanswered, Positions: starts, Duration: took, T0: t0})
	l.log.Info("initialised", "resolved", resolved, "strategy", strategy, "unanswered", unanswered, "reused", reused, "reading", len(starts), "took", took)
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
	err := s.store.Save(ctx, t.stream, updates)
	if me, ok := errors.AsType[*MissingShardError](err); ok && s.shared {
		// The items of me.Shards were deleted by hand since they were
		// loaded, and these updates cannot stand for them (a state
		// without a position): the others landed, and the missing are
		// recovered as the audit recovers them.
		landed := slices.DeleteFunc(slices.Clone(updates), func(u ShardProgress) bool { return slices.Contains(me.Shards, u.ShardID) })
		s.applySaved(t, landed, before)
		return s.recoverMissing(ctx, t, slices.Clone(me.Shards))
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err
		}
		return &RunError{Stream: t.stream, Op: "Save", Kind: ErrJournal, Err: fmt.Errorf("saving progress: %w", err)}
	}
	s.applySaved(t, updates, before)
	return nil
}

// applySaved applies updates, saved, to t, and reports each state change
// (from the states before).
func (s *session) applySaved(t *topology, updates []ShardProgress, before map[string]ShardState) {
	t.apply(updates)
	s.l.stats.saved(updates)
	for _, u := range updates {
		id := u.ShardID
		if now := t.nodes[id].State; now != before[id] {
			s.l.hooks.onState(ShardStateChanged{Stream: t.stream, ShardID: id, From: before[id], To: now})
			before[id] = now
		}
	}
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
	return s.applyListing(ctx, t, shards)
}

// applyListing merges a listing of the stream's shards into the topology,
// saves what changed, activates the children whose parents are all
// COMPLETED, and prunes. The listing must be newer than every change of
// the topology's shards and states (see scheduler.list).
func (s *session) applyListing(ctx context.Context, t *topology, shards []types.Shard) error {
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
		shard := ""
		if se, ok := errors.AsType[*shardError](err); ok {
			shard = se.shard
		}
		return nil, stopError(t.stream, shard, "Lineage", ErrLineage, err)
	}
	return updates, nil
}

// schedule runs one consume loop per runnable shard, starts children when
// their parents complete, and lists shards periodically, until gctx ends or
// a loop fails. It waits for every loop before it returns.
func (s *session) schedule(gctx, hctx context.Context, gstop context.CancelFunc, t *topology) error {
	sc := &scheduler{s: s, t: t, gctx: gctx, hctx: hctx, gstop: gstop,
		done: make(chan shardDone), finished: make(chan struct{}),
		hint: make(chan struct{}, 1), running: map[string]bool{}, listed: make(chan listing)}
	// For a MultiSink one windower batches every shard's pages (window.go).
	if s.l.multi != nil {
		sc.windows = newWindower(s, hctx, true)
		defer s.endWindows(sc.windows)
	}
	defer sc.listers.Wait() // after finished is closed: a listing ends with gctx
	defer close(sc.finished)
	sc.start()
	if s.replayOver(t) {
		sc.stop(errReplayDone)
	}
	ticker := time.NewTicker(s.l.cfg.ListShardsInterval)
	defer ticker.Stop()
	for {
		if sc.stopping() && len(sc.running) == 0 {
			return sc.fatal
		}
		select {
		case d := <-sc.done:
			sc.finish(d)
		case <-ticker.C:
			sc.list(false)
		case <-s.m.Wake():
			sc.relist(s.sync)
		case <-sc.hint:
			sc.list(true)
		case r := <-sc.listed:
			sc.listedShards(r)
		case <-gctx.Done():
			return sc.drain()
		}
	}
}

// listing is what a ListShards made off the schedule's loop found: the
// shards, or the error that stops the session; and the topology's shards
// when it began (each: COMPLETED then or not).
type listing struct {
	shards []types.Shard
	err    error
	began  map[string]bool
}

// maxStaleListings is how many listings in a row list may find stale
// before it lists in the loop, as refresh does, so that a topology that
// keeps changing is still listed.
const maxStaleListings = 3

// list brings the topology up to date as refresh does, but calls
// ListShards in a goroutine of its own, so that the loop goes on finishing
// shards and starting their children while ListShards is slow, throttled
// or retried (a loop blocked in it for 3-7 s delayed every child's start
// in the fan-out kill loop). One listing is in flight at a time: a tick
// meanwhile is skipped, but a listing asked for because a loop found its
// shard closed is made when the one in flight returns, which may predate
// the close.
func (sc *scheduler) list(again bool) {
	if sc.stopping() {
		return
	}
	if sc.listing {
		sc.listAgain = sc.listAgain || again
		return
	}
	if sc.stale >= maxStaleListings {
		sc.stale = 0
		sc.relist(sc.s.refresh)
		return
	}
	// What other hosts committed first (and start what it made ready):
	// the listing is then newer than every shard the topology holds.
	sc.relist(sc.s.sync)
	if sc.stopping() {
		return
	}
	sc.listing, sc.listAgain = true, false
	began := sc.t.completedNow()
	sc.listers.Go(func() {
		shards, err := sc.s.listShardsChecked(sc.gctx)
		select {
		case sc.listed <- listing{shards: shards, err: err, began: began}:
		case <-sc.finished:
		}
	})
}

// listedShards applies a listing made by list and starts what became
// ready. A listing older than a change of the topology made while it was
// in flight is stale: it lists open a shard whose end was read since, or
// misses a shard another host's progress brought in since, which observe
// would take for progress of another stream or records expired. It is
// dropped, and the shards listed again. (A listing during which a shard
// it lists closed completed is not stale: the one a split's hint asks for
// usually is.)
func (sc *scheduler) listedShards(r listing) {
	sc.listing = false
	switch {
	case r.err == nil && sc.t.outdates(r.began, r.shards):
		sc.stale++
		sc.listAgain = true
	default:
		sc.stale = 0
		sc.relist(func(ctx context.Context, t *topology) error {
			if r.err != nil {
				return r.err
			}
			return sc.s.applyListing(ctx, t, r.shards)
		})
	}
	if sc.listAgain {
		sc.list(false)
	}
}

// scheduler is the state of one session's schedule: the consume loops
// running, and the first error that stops them all.
type scheduler struct {
	s          *session
	t          *topology
	gctx, hctx context.Context
	gstop      context.CancelFunc
	windows    *windower // a MultiSink's, or nil
	done       chan shardDone
	// finished lets a loop that outlives schedule (abandoned as stuck)
	// exit without a receiver.
	finished chan struct{}
	hint     chan struct{} // a loop found its shard closed: list again
	running  map[string]bool
	fatal    error
	// listed receives the listing made off the loop (list); listing is
	// true while one is in flight, listAgain when another was asked for
	// meanwhile; stale counts the listings in a row found stale; listers
	// is the goroutine that makes them.
	listed             chan listing
	listing, listAgain bool
	stale              int
	listers            sync.WaitGroup
}

// stop records the first error that stops the session (nil: a stop
// without failure) and stops every loop gracefully.
func (sc *scheduler) stop(err error) {
	if sc.fatal == nil && err != nil {
		sc.fatal = err
	}
	sc.gstop()
}

func (sc *scheduler) stopping() bool { return sc.gctx.Err() != nil || sc.fatal != nil }

// start runs a loop for every shard whose lease the coordinator grants
// among those ready in this host's view (the default: all).
func (sc *scheduler) start() {
	s, t := sc.s, sc.t
	leases, err := s.m.Acquire(sc.gctx, s.unbounded(t.runnable()))
	if err != nil {
		if sc.gctx.Err() == nil {
			sc.stop(stopError(t.stream, "", "Acquire", ErrJournal, fmt.Errorf("acquiring leases: %w", err)))
		}
		return
	}
	sinkAt := s.sinkCheckpoints(sc.gctx, leases)
	for _, ls := range leases {
		id := ls.Shard()
		if sc.running[id] || t.nodes[id] == nil {
			s.release(sc.hctx, ls) // not ours to read (never by the contract)
			continue
		}
		t.apply([]ShardProgress{ls.Progress()}) // where the fleet left it
		settled, lost, err := s.leaseRewound(sc.gctx, t, ls)
		if err != nil || lost {
			s.release(sc.hctx, ls)
			if err != nil && sc.gctx.Err() == nil {
				sc.stop(err)
			}
			continue
		}
		if pos, ok := sinkAt[id]; ok && !settled {
			t.apply([]ShardProgress{{ShardID: id, Position: pos}}) // or the Sink, if further
		}
		if t.nodes[id].State == StateCompleted {
			s.release(sc.hctx, ls)
			continue
		}
		sc.running[id] = true
		sc.launch(ls)
	}
}

// launch runs the consume loop of a granted lease's shard in a goroutine
// that reports to done when the loop returns, after releasing the lease
// (or reporting it lost).
func (sc *scheduler) launch(ls Lease) {
	s, n, id := sc.s, sc.t.nodes[ls.Shard()], ls.Shard()
	c := &consumer{s: s, lease: ls, shard: id, from: n.Position, draining: n.State == StateDraining, hint: sc.hint, keys: n.keys, windows: sc.windows}
	since := s.leaseAcquired(ls, c.from)
	gctx, hctx := sc.gctx, sc.hctx
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
		s.l.hooks.obs.remove(ls) // a lease released or not: no more batches
		select {
		case sc.done <- shardDone{id: id, completed: completed, lost: lost, bounded: c.bounded, err: err}:
		case <-sc.finished:
		}
	}()
}

// finish handles a loop's return: a failure stops the session, a shard
// read to the bound of a replay is marked, and a completed shard is saved
// COMPLETED, which may make its children ready.
func (sc *scheduler) finish(d shardDone) {
	s, t := sc.s, sc.t
	delete(sc.running, d.id)
	switch {
	case d.lost: // reported by leaseLost
	case d.err != nil && !(errors.Is(d.err, context.Canceled) && sc.gctx.Err() != nil):
		sc.stop(s.explain(sc.hctx, d.err))
	case d.bounded:
		s.markBound(d.id)
		if s.replayOver(t) {
			sc.stop(errReplayDone)
		}
	case d.completed && !sc.stopping():
		t.apply([]ShardProgress{{ShardID: d.id, State: StateCompleted, Position: scan.ShardEnd()}})
		// A Pause or Close may cancel gctx during this save: that is a
		// stop, not a failure (the next initialisation activates the
		// children from the durable COMPLETED).
		if err := s.save(sc.gctx, t, t.activate()); err != nil {
			if sc.gctx.Err() == nil {
				sc.stop(err)
			}
			return
		}
		sc.start()
		if s.replayOver(t) {
			sc.stop(errReplayDone)
		}
	}
}

// relist brings the topology up to date (refresh: list the shards; sync:
// load what other hosts committed) and starts what became ready.
func (sc *scheduler) relist(update func(context.Context, *topology) error) {
	if sc.stopping() {
		return
	}
	if err := update(sc.gctx, sc.t); err != nil && sc.gctx.Err() == nil {
		sc.stop(err)
		return
	}
	sc.start()
}

// drain waits, after a stop, for the loops: they finish their in-flight
// batch. After a hard stop, a loop that does not return within stuckGrace
// is given up: Run must not hang on a Sink that ignores its context.
func (sc *scheduler) drain() error {
	s := sc.s
	hard := sc.hctx.Done()
	var grace <-chan time.Time
	for len(sc.running) > 0 {
		select {
		case d := <-sc.done:
			delete(sc.running, d.id)
			if d.err != nil && !d.lost && !errors.Is(d.err, context.Canceled) && sc.fatal == nil {
				// Explained as finish does: a loop that failed during
				// a Pause or Close because the stream was re-created
				// under it is a re-creation, not a refused position
				// (found by the simulation, seed 8080248). Asked a few
				// times only: the stop must not wait for the answer.
				sc.fatal = s.explainWithin(sc.hctx, d.err, false)
			}
		case <-hard:
			hard = nil
			timer := time.NewTimer(stuckGrace)
			defer timer.Stop()
			grace = timer.C
		case <-grace:
			s.seal()
			stuck := sortedKeys(sc.running)
			s.l.log.Error("shards did not stop after the hard stop; giving up on them", "shards", stuck, "grace", stuckGrace)
			// A Deliver (or a hook) that ignores its context: the
			// destination's failure.
			return &RunError{Stream: s.l.cfg.Stream, Shard: stuck[0], Op: "Deliver", Kind: ErrSink,
				Err: &StuckError{Stream: s.l.cfg.Stream, Shards: stuck}}
		}
	}
	return sc.fatal
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
	// The initialisation audited what it loaded before it saved; what it
	// saved since may be pending, invisible to Load until the commit.
	if !s.initialising {
		if err := s.audit(ctx, t, stored, false); err != nil {
			return err
		}
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

// The shard audit of a fleet: a shard Kinesis lists, that the fleet's
// shared progress held, and whose entry is gone (deleted by hand from the
// table) would never be granted to any host again, and no host would say
// why. The Loader notices it, and recovers it from a TransactionalSink's
// checkpoint, or stops naming it ([MissingShardError]).
//
// audit compares the shared progress a fleet loaded (stored) with the
// topology: a tracked shard that Kinesis lists, that is not COMPLETED,
// that this session saw stored, and that stored lacks now, is missing. It
// is saved again from the Sink's checkpoint when a TransactionalSink holds
// one; otherwise audit returns a [*MissingShardError].
//
// At initialisation (a host starting) nothing was seen stored yet: a
// listed shard with no progress, none of whose parents has any, in a
// stream whose progress holds others, was there when the stream was
// initialised (or the selection was widened to it): its item may have
// been deleted. It starts at TRIM_HORIZON, as a shard born later (records
// may be delivered again, none is lost); audit says so in the log. (With
// a TransactionalSink its checkpoint was merged already.)
func (s *session) audit(ctx context.Context, t *topology, stored map[string]ShardProgress, initialising bool) error {
	if !s.shared || (initialising && len(stored) == 0) {
		return nil
	}
	var missing, orphans []string
	for id, n := range t.nodes {
		if _, ok := stored[id]; ok || !n.listed || n.State == StateCompleted || !t.tracked(id) {
			continue
		}
		switch {
		case n.saved != 0 && !initialising:
			missing = append(missing, id)
		case initialising && !t.initial && !slices.ContainsFunc(n.Parents, func(p string) bool { _, ok := stored[p]; return ok }):
			if _, selected := t.selected[id]; !selected {
				orphans = append(orphans, id)
			}
		}
	}
	if len(orphans) > 0 {
		slices.Sort(orphans)
		s.l.log.Warn("shards listed by Kinesis have no progress in the fleet's table, nor have their parents, though the stream's progress holds others: "+
			"if their items were deleted by hand they are read from TRIM_HORIZON (records delivered again); restore them from an export to resume where they were",
			"shards", orphans)
	}
	if len(missing) == 0 {
		return nil
	}
	return s.recoverMissing(ctx, t, missing)
}

// recoverMissing saves the shards missing from the fleet's table (their
// items deleted by hand) again from the TransactionalSink's checkpoints,
// or stops naming them (a *MissingShardError) when the Sink holds none.
func (s *session) recoverMissing(ctx context.Context, t *topology, missing []string) error {
	slices.Sort(missing)
	var cps map[string]scan.Position
	if s.l.tx != nil {
		cctx, cancel := context.WithTimeout(ctx, s.l.cfg.CallTimeout)
		var err error
		cps, err = s.checkpoints(cctx, t.stream)
		cancel()
		if isStuck(err) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			return stopError(t.stream, missing[0], "Checkpoints", ErrSink, fmt.Errorf("loading the sink's checkpoints to recover shards missing from the fleet's table: %w", err))
		}
	}
	var recover []ShardProgress
	var lost []string
	for _, id := range missing {
		pos, ok := cps[id]
		if !ok || pos.Validate() != nil || pos.Kind == scan.KindLatest {
			lost = append(lost, id)
			continue
		}
		// A child whose parents are not complete waits for them, as
		// before its item was deleted: saved ACTIVE it would be read
		// before them.
		u := ShardProgress{ShardID: id, Parents: t.nodes[id].Parents, Position: pos, State: StateActive}
		switch {
		case pos.Kind == scan.KindShardEnd:
			u.State = StateCompleted
		case !t.ready(id):
			u.State = StatePendingParent
		}
		recover = append(recover, u)
	}
	if len(lost) > 0 {
		return stopError(t.stream, lost[0], "Load", ErrJournal, &MissingShardError{Stream: t.stream, Shards: lost})
	}
	s.l.log.Warn("shards missing from the fleet's table (deleted by hand?): saved again from the TransactionalSink's checkpoints", "shards", missing)
	return s.save(ctx, t, recover)
}

// keepStart makes t0 the pending T0 of the stream, unless one is pending
// already (the store's, or this Run's in memory): durably when the store
// is a [StartStore] (the first run's first write), in memory otherwise.
func (s *session) keepStart(ctx context.Context, t0 time.Time) error {
	stream := s.l.cfg.Stream
	ss, durable := s.store.(StartStore)
	if !durable {
		if s.t0.IsZero() {
			s.t0 = t0
		}
		return nil
	}
	_, had, err := ss.LoadStart(ctx, stream)
	if err != nil {
		return stopError(stream, "", "LoadStart", ErrJournal, fmt.Errorf("loading the start time: %w", err))
	}
	got, err := ss.SaveStart(ctx, stream, t0)
	if err != nil {
		return stopError(stream, "", "SaveStart", ErrJournal, fmt.Errorf("saving the start time: %w", err))
	}
	s.startedFresh = !had
	s.t0 = got
	s.l.log.Info("start time", "t0", got, "journaled", true)
	return nil
}

// startTime returns the T0 of this start-up: the pending one, if the store
// kept one (the first run's, saved with the stream's identity), or the one
// an earlier attempt of this Run took, or else Kinesis's clock when this
// Run began (s.began, by this host's monotonic clock: a later start-up
// with shards to resolve, such as a widened selection, or a fleet's whose
// init item, which held T0, was deleted by hand), journaled before it is
// used. The Run's start, not this start-up's: a start-up may begin long
// after the Run (a host that waited for a fleet's initialisation lock), and
// the records that arrived in between must not be taken for "before the
// start".
func (s *session) startTime(ctx context.Context) (time.Time, error) {
	began := s.began
	stream := s.l.cfg.Stream
	ss, durable := s.store.(StartStore)
	if durable {
		t0, ok, err := ss.LoadStart(ctx, stream)
		if err != nil {
			return time.Time{}, stopError(stream, "", "LoadStart", ErrJournal, fmt.Errorf("loading the start time: %w", err))
		}
		if ok {
			if !t0.Equal(s.t0) {
				s.l.log.Info("resolving LATEST at the start time of an earlier start-up", "t0", t0)
			}
			s.t0 = t0
			return t0, nil
		}
	}
	if !s.t0.IsZero() {
		// An earlier attempt of this start-up took T0 (and failed): a
		// retried batch resolves at the same T0, also when the store
		// cannot keep it.
		return s.t0, nil
	}
	now, err := s.resolver.Now(ctx, s.client, stream)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return time.Time{}, err
		}
		return time.Time{}, stopError(stream, "", "ListShards", ErrKinesis, fmt.Errorf("initialisation: reading Kinesis's clock: %w", err))
	}
	t0 := now.Add(-time.Since(began)).Truncate(time.Millisecond)
	if durable {
		if t0, err = ss.SaveStart(ctx, stream, t0); err != nil {
			return time.Time{}, stopError(stream, "", "SaveStart", ErrJournal, fmt.Errorf("saving the start time: %w", err))
		}
	}
	s.t0 = t0
	s.l.log.Info("start time", "t0", t0, "journaled", durable)
	return t0, nil
}

// clearStart forgets a pending T0 once nothing is left to resolve at it.
func (s *session) clearStart(ctx context.Context) error {
	s.t0 = time.Time{}
	ss, ok := s.store.(StartStore)
	if !ok {
		return nil
	}
	if err := ss.ClearStart(ctx, s.l.cfg.Stream); err != nil {
		return stopError(s.l.cfg.Stream, "", "ClearStart", ErrJournal, fmt.Errorf("clearing the start time: %w", err))
	}
	return nil
}

// startStoreParallelism bounds the concurrent Deliver calls that hand the
// starts of initialisation to a TransactionalSink.
const startStoreParallelism = 16

// storeStarts hands a [TransactionalSink] the start of every shard that it
// holds no checkpoint for (inSink), each as a Batch with no records whose
// Checkpoint is the start, so that the Sink alone knows where every shard
// starts: a lost or deleted journal then never makes the Loader resolve
// LATEST again, later. It runs after the initialisation batch is journaled
// (a crash before it is done is repaired by the next initialisation, from
// the journal) and before any shard is read.
//
// The starts are stored a generation at a time, parents before children,
// so that the Sink never holds a child's start without its parents'. A
// crash between them, with the journal or the fleet's init item lost too,
// leaves the Sink's rows a consistent cut: a child's start there is read
// as begun, and without its parent's (a SHARD_END when the parent closed
// before T0) the next start-up would read the parent from TRIM_HORIZON
// after the child and stop with a ParentAfterChildError at every start.
func (s *session) storeStarts(ctx context.Context, t *topology, inSink map[string]bool) (int, error) {
	if s.l.tx == nil {
		return 0, nil
	}
	// In a fleet's later generation, above every epoch of the earlier
	// ones: see StartEpocher.
	var epoch uint64
	if se, ok := s.m.(StartEpocher); ok {
		epoch = se.StartEpoch()
	}
	var waves [][]Batch // by depth in the lineage
	memo := map[string]int{}
	n := 0
	for _, id := range sortedKeys(t.nodes) {
		nd := t.nodes[id]
		if !nd.listed || !t.tracked(id) || inSink[id] || nd.Position.Kind == 0 || nd.Position.Kind == scan.KindLatest {
			continue
		}
		d := t.depth(id, memo)
		for len(waves) <= d {
			waves = append(waves, nil)
		}
		waves[d] = append(waves[d], Batch{Stream: t.stream, ShardID: id, Checkpoint: nd.Position, Epoch: epoch})
		n++
	}
	for _, wave := range waves {
		if err := s.storeStartWave(ctx, wave); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// storeStartWave delivers one generation of storeStarts' start batches,
// startStoreParallelism at a time.
func (s *session) storeStartWave(ctx context.Context, batches []Batch) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(startStoreParallelism)
	for _, b := range batches {
		g.Go(func() error {
			_, err := s.deliverRetrying(gctx, b, nil)
			initProgress(s.store)
			if isSinkFenced(err) {
				// No lease was given for a start batch: a refusal as
				// from a lost one is the Sink's failure, not the loss
				// of the fleet's initialisation lock.
				return &RunError{Stream: b.Stream, Shard: b.ShardID, Op: "Deliver", Kind: ErrSink,
					Err: fmt.Errorf("the sink refused the start batch (checkpoint %v, epoch %d) as delivered under a lost lease: does it hold the shard under an epoch of another lease table?: %w",
						b.Checkpoint, b.Epoch, err)}
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil && !isStuck(err) {
			return ctx.Err()
		}
		return err
	}
	return nil
}

// prune drops from the store and the topology every shard prunable
// returns, when the store is a [Pruner]. Called after a complete
// ListShards result was observed and its updates saved.
func (s *session) prune(ctx context.Context, t *topology) error {
	p, ok := s.store.(Pruner)
	if !ok {
		return nil
	}
	ids := t.prunable()
	if len(ids) == 0 {
		return nil
	}
	if err := p.Prune(ctx, t.stream, ids); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err
		}
		return &RunError{Stream: t.stream, Op: "Prune", Kind: ErrJournal, Err: fmt.Errorf("pruning %d completed shards: %w", len(ids), err)}
	}
	for _, id := range ids {
		delete(t.nodes, id)
		delete(s.rewound, id)
	}
	s.l.stats.forget(ids)
	s.l.log.Debug("pruned completed shards no longer listed", "shards", len(ids))
	return nil
}

// listShards lists the shards, retrying transient failures as
// [session.callKinesis] does; a listing that fails part-way starts again
// from its first page (a NextToken may expire while the Loader waits).
func (s *session) listShards(ctx context.Context) ([]types.Shard, error) {
	var shards []types.Shard
	err := s.callKinesis(ctx, "", "ListShards", func(ctx context.Context) (err error) {
		shards, err = listShards(ctx, s.client, s.l.cfg.Stream, s.l.cfg.CallTimeout)
		return err
	})
	return shards, err
}

// sinkCheckpoints returns, for the shards of leases just granted in a
// fleet, the checkpoints a [TransactionalSink] holds: one Checkpoints call
// per acquisition round, none without a fleet (the Sink's checkpoints were
// merged at initialisation and only this process moves them) or without
// a TransactionalSink. A shard then resumes from the furthest of its
// lease's progress and the Sink's checkpoint, so a new owner does not read
// again what the Sink already stored (a coordinator whose commits lag, as
// with a CheckpointInterval, or a host that stored a batch but died before
// its commit). It is an optimisation: a Sink that keeps the contract of
// [TransactionalSink] stores nothing twice without it. So a failure is
// logged and the leases' progress stands. SHARD_END is left out: the
// shard's loop reads to its end and commits COMPLETED, which the fleet
// needs to release its children, while the Sink stores nothing again.
func (s *session) sinkCheckpoints(ctx context.Context, leases []Lease) map[string]scan.Position {
	l := s.l
	if l.tx == nil || !s.shared || len(leases) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	defer cancel()
	cps, err := s.checkpoints(cctx, l.cfg.Stream)
	if err != nil {
		if ctx.Err() == nil { // not stopping (a call that timed out is logged)
			l.log.Warn("loading the sink's checkpoints for the leases acquired; resuming from the fleet's progress", "err", err)
		}
		return nil
	}
	out := make(map[string]scan.Position, len(leases))
	for _, ls := range leases {
		id := ls.Shard()
		pos, ok := cps[id]
		if !ok || pos.Kind == scan.KindShardEnd {
			continue
		}
		if err := pos.Validate(); err != nil || pos.Kind == scan.KindLatest {
			l.log.Warn("the sink's checkpoint is not a position; resuming from the fleet's progress", "shard", id, "checkpoint", pos, "err", err)
			continue
		}
		out[id] = pos
	}
	return out
}
