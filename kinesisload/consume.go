package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// consumer is the loop of one ACTIVE shard: read pages ahead, hand each to
// the Sink, commit what the Sink accepted.
type consumer struct {
	s        *session
	lease    Lease // commits go through it, fenced by its epoch
	shard    string
	from     scan.Position
	draining bool          // the shard was DRAINING when the loop started
	hint     chan struct{} // poked when GetRecords reports child shards
	keys     hashRange     // the shard's hash key range, for the KPL decoder
	dec      *pageDecoder  // made by run
	windows  *windower     // the session's, for a MultiSink (window.go)
	bounded  bool          // run stopped at Config.StopAt (stopat.go)
}

// run reads the shard until it ends (returns true once COMPLETED is
// durable), gctx ends (returns false, nil after the in-flight batch is
// committed), or a failure (returns the error, naming the shard). The
// reader goroutine has exited when run returns.
func (c *consumer) run(gctx, hctx context.Context) (completed bool, err error) {
	l := c.s.l
	stream := l.cfg.Stream
	if c.from.Kind == scan.KindShardEnd {
		return c.completeDelivered(hctx)
	}
	rc := readerConfig{
		client:       c.s.client,
		stream:       stream,
		shard:        c.shard,
		start:        c.from,
		limit:        l.cfg.RecordsPerCall,
		idleWait:     l.cfg.IdleWait,
		tipPages:     !l.cfg.StopAt.IsZero(),
		callTimeout:  l.cfg.CallTimeout,
		confirm:      c.s.confirmIdentity,
		maxAttempts:  l.cfg.KinesisMaxAttempts,
		maxThrottles: l.cfg.KinesisMaxAttempts,
		retry:        l.retryPolicy(),
		throttle:     l.throttlePolicy(),
		hooks: readerHooks{
			onThrottle: l.retried,
			onRetry:    l.retried,
			onFetch: func(shard string, records int, bytes int64, behind int64) {
				l.stats.fetched(shard, behind)
				l.hooks.onFetched(Fetched{Stream: stream, ShardID: shard, Records: records, Bytes: bytes, MillisBehindLatest: behind})
			},
			onIteratorRenewed: func(shard string, from scan.Position) {
				l.log.Info("iterator expired; renewed", "shard", shard, "from", from)
				l.hooks.onRenewed(IteratorRenewed{Stream: stream, ShardID: shard, From: from.String()})
			},
		},
	}
	rc.buffer = l.buffered
	if l.opt.tune != nil {
		l.opt.tune(&rc)
	}
	read, err := c.newReader(gctx, rc)
	if err != nil {
		if gctx.Err() != nil {
			return false, nil // the lease lost, or a stop, while the reader was made
		}
		return false, err
	}
	l.stats.reading(c.shard, true)
	defer l.stats.reading(c.shard, false)
	c.dec = c.newDecoder()
	l.log.Info("shard started", "shard", c.shard, "from", c.from)
	rctx, stopReading := context.WithCancel(gctx)
	// Unbuffered: the reader fetches the next page while the Sink works on
	// this one, and holds it until the Sink is done: one page ahead.
	pages := make(chan page)
	readErr := make(chan error, 1)
	go func() {
		defer close(pages)
		readErr <- read(rctx, pages)
	}()
	defer func() {
		stopReading()
		for p := range pages { // let the reader exit
			l.buffered.release(p.held)
		}
	}()

	if l.windowed() {
		return c.runWindowed(gctx, hctx, pages, readErr)
	}
	for p := range pages {
		fetched := time.Now()
		p, bounded := c.s.cutAtBound(gctx, c.shard, p)
		if p.end && !c.draining {
			if err := c.s.saveShard(hctx, c.lease, ShardProgress{ShardID: c.shard, State: StateDraining}, StateActive); err != nil {
				l.buffered.release(p.held)
				return false, err
			}
			c.draining = true
		}
		if len(p.children) > 0 {
			select {
			case c.hint <- struct{}{}:
			default:
			}
		}
		err := c.deliver(hctx, p, fetched)
		l.buffered.release(p.held) // the Sink is done with the records
		if err != nil {
			return false, err
		}
		if p.end {
			l.log.Info("shard completed", "shard", c.shard)
			return true, nil
		}
		if bounded {
			c.bounded = true
			return false, nil
		}
		if gctx.Err() != nil {
			return false, nil // stop after the in-flight batch
		}
	}
	if err := <-readErr; err != nil && gctx.Err() == nil {
		return false, stopError(stream, c.shard, "GetRecords", ErrKinesis, err)
	}
	return false, nil
}

// completeDelivered commits COMPLETED for a shard whose end the Sink
// holds already (a TransactionalSink stored the last batch, then its
// host lost the lease before it committed COMPLETED): nothing is left to
// read, and its children wait for that commit.
func (c *consumer) completeDelivered(ctx context.Context) (bool, error) {
	if !c.draining {
		if err := c.s.saveShard(ctx, c.lease, ShardProgress{ShardID: c.shard, State: StateDraining}, StateActive); err != nil {
			return false, err
		}
		c.draining = true
	}
	if err := c.s.saveShard(ctx, c.lease, ShardProgress{ShardID: c.shard, State: StateCompleted, Position: scan.ShardEnd()}, StateDraining); err != nil {
		return false, err
	}
	c.s.l.log.Info("shard completed", "shard", c.shard, "by", "the Sink's checkpoint")
	return true, nil
}

// deliver hands one page to the Sink with bounded retries and commits its
// checkpoint once the Sink accepted it.
func (c *consumer) deliver(ctx context.Context, p page, fetched time.Time) error {
	l := c.s.l
	b := Batch{Stream: l.cfg.Stream, ShardID: c.shard, MillisBehindLatest: p.millisBehind, Epoch: c.lease.Epoch()}
	var bytes int64
	b.Records, bytes = c.dec.decode(p.records)
	// The page's cost, held until Deliver returns, counted one Record per
	// Kinesis record; the user records of aggregates cost more (Data
	// aliases the page, but each has its Record and keys). That is
	// already in memory: count it without waiting, as the reader does for
	// a page larger than its reservation.
	extra := decodedCost(len(p.records), b.Records)
	l.buffered.force(extra)
	defer l.buffered.release(extra)
	update := ShardProgress{ShardID: c.shard}
	switch {
	case p.end:
		b.Checkpoint = scan.ShardEnd()
		update.State, update.Position = StateCompleted, scan.ShardEnd()
	case len(p.records) > 0:
		b.Checkpoint = scan.AfterSequence(lastSequence(p.records))
		update.Position = b.Checkpoint
	default:
		return nil
	}
	attempts := 0
	if len(b.Records) > 0 || l.tx != nil {
		var err error
		if attempts, err = c.s.deliverRetrying(ctx, b, c.lease); err != nil {
			return err
		}
	}
	from := StateActive
	if c.draining {
		from = StateDraining
	}
	if err := c.s.saveShard(ctx, c.lease, update, from); err != nil {
		return err
	}
	if len(b.Records) > 0 {
		l.hooks.onDelivered(BatchDelivered{Stream: b.Stream, ShardID: b.ShardID, Records: len(b.Records), Bytes: bytes,
			MillisBehindLatest: p.millisBehind, Latency: time.Since(fetched), Attempts: attempts})
	}
	return nil
}

// deliverRetrying hands b to the Sink, retrying a transient refusal with
// backoff (without limit, or up to a positive Config.SinkRetries), and
// returns how many calls it took. A permanent refusal ([ErrPermanent], a
// panic) stops at once; one that wraps [ErrLeaseLost] is not retried: see
// [sinkFenced]. Before every attempt of a batch delivered under a lease
// (ls, nil for a start batch) it checks the lease's fence
// ([LeaseChecker]).
func (s *session) deliverRetrying(ctx context.Context, b Batch, ls Lease) (attempts int, err error) {
	l := s.l
	policy := l.sinkPolicy()
	for {
		attempts++
		// One of MaxConcurrentDeliveries; not held while backing off.
		slot, err := l.deliveries.acquire(ctx, 1)
		if err != nil {
			return attempts, err
		}
		if ls != nil {
			// Checked after the wait for a slot: a host that woke from a
			// pause past its lease delivers nothing more under it.
			if err := checkLease(ls); err != nil {
				l.deliveries.release(slot)
				return attempts, err
			}
		}
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if ls == nil {
			// A start batch, during initialisation: in a fleet, under
			// the initialisation lock, which a call that never returns
			// would hold. A timeout is retried as any refusal.
			dctx, cancel = context.WithTimeout(ctx, l.cfg.CallTimeout)
		}
		if ls == nil {
			// Not in a consume loop, whose stuck Deliver drain gives up
			// on: given up here after a hard stop.
			err = s.abandonable(b.ShardID, "Deliver", func() error { return deliverSafely(dctx, l.cfg.Sink, b) })
		} else {
			err = deliverSafely(dctx, l.cfg.Sink, b)
		}
		cancel()
		l.deliveries.release(slot)
		if err == nil {
			return attempts, nil
		}
		if isStuck(err) {
			return attempts, err
		}
		if errors.Is(err, ErrLeaseLost) {
			// The Sink holds the shard under a newer epoch: no retry
			// can succeed (see fence.go).
			return attempts, sinkFenced(b, err)
		}
		if ctx.Err() != nil {
			return attempts, ctx.Err()
		}
		if permanent(err) || l.sinkRetriesExhausted(attempts) {
			return attempts, sinkGaveUp(b.Stream, b.ShardID, fmt.Sprintf("the batch of %d records ending at %v", len(b.Records), b.Checkpoint), attempts, err)
		}
		wait := policy.Delay(attempts)
		l.retried(b.ShardID, "Deliver", attempts, wait, err)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return attempts, err
		}
	}
}

// sinkPolicy is the backoff between two tries of the Sink.
func (l *Loader) sinkPolicy() backoff.Policy {
	return backoff.Policy{Base: l.cfg.SinkBackoff, Max: l.cfg.SinkMaxBackoff, Jitter: backoff.EqualJitter}
}

// sinkRetriesExhausted reports whether a batch the Sink refused attempts
// times may not be tried again (Config.SinkRetries).
func (l *Loader) sinkRetriesExhausted(attempts int) bool {
	switch n := l.cfg.SinkRetries; {
	case n == SinkNoRetries:
		return true
	case n > 0:
		return attempts > n
	}
	return false
}

// permanent reports whether a Sink's error is one no retry can fix: it
// wraps [ErrPermanent], or is a panic.
func permanent(err error) bool {
	_, panicked := errors.AsType[*PanicError](err)
	return panicked || errors.Is(err, ErrPermanent)
}

// sinkGaveUp is the stop of Run after the Sink refused what (a batch, or
// a window of batches) attempts times, the last with err: permanently, or
// more often than Config.SinkRetries allows.
func sinkGaveUp(stream, shard, what string, attempts int, err error) error {
	how := fmt.Sprintf("%d times", attempts)
	if permanent(err) {
		how = "with a permanent error"
		if attempts > 1 {
			how += fmt.Sprintf(" (try %d)", attempts)
		}
	}
	return &RunError{Stream: stream, Shard: shard, Op: "Deliver", Kind: ErrSink,
		Err: fmt.Errorf("the sink refused %s %s: %w", what, how, err)}
}

// deliverSafely calls the Sink and turns a panic into an error, so that a
// bad Sink stops the Loader with the shard named instead of crashing the
// host process in one of the Loader's goroutines.
func deliverSafely(ctx context.Context, sink Sink, b Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError("the sink", r)
		}
	}()
	return sink.Deliver(ctx, b)
}

func lastSequence(rs []types.Record) string {
	return aws.ToString(rs[len(rs)-1].SequenceNumber)
}

// saveShard commits one shard's update under its lease and reports a state change to the
// hooks. Consume loops call it concurrently; the topology is not touched
// (the scheduler applies completions itself).
//
// Once the session is sealed (Run gave up on stuck loops and returned)
// it saves nothing: a Deliver that returns late is never committed.
func (s *session) saveShard(ctx context.Context, ls Lease, u ShardProgress, from ShardState) error {
	s.commit.RLock()
	defer s.commit.RUnlock()
	if s.sealed {
		return fmt.Errorf("kinesisload: stream %s, shard %s: not saved: Run has returned: %w", s.l.cfg.Stream, u.ShardID, ErrStuck)
	}
	if err := checkLease(ls); err != nil {
		return err
	}
	if err := ls.Commit(ctx, u); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, ErrLeaseLost) {
			return err
		}
		return &RunError{Stream: s.l.cfg.Stream, Shard: u.ShardID, Op: "Save", Kind: ErrJournal, Err: fmt.Errorf("saving progress: %w", err)}
	}
	s.l.stats.saved([]ShardProgress{u})
	if u.State != 0 && u.State != from {
		s.l.hooks.onState(ShardStateChanged{Stream: s.l.cfg.Stream, ShardID: u.ShardID, From: from, To: u.State})
	}
	return nil
}

// newDecoder returns the page decoder of this loop: Config.Decoder, or the
// KPL de-aggregator with the shard's hash key range, reporting to the
// hooks.
func (c *consumer) newDecoder() *pageDecoder {
	l := c.s.l
	stream := l.cfg.Stream
	d := &pageDecoder{dec: l.cfg.Decoder}
	// Logged at most once a minute per shard: a producer may do either
	// for every record. Stats and the hooks count every one.
	failedLog := newLogEvery(l.log, "records delivered as read: they could not be decoded", l.stats.clock)
	d.failed = func(r Record, err error) {
		l.stats.decodeFailed(c.shard)
		failedLog.add(1, "shard", c.shard, "seq", r.SequenceNumber, "err", err)
		l.hooks.onDecodeFailed(DecodeFailed{Stream: stream, ShardID: c.shard, SequenceNumber: r.SequenceNumber, Err: err})
	}
	if d.dec == nil {
		keys := c.keys
		outsideLog := newLogEvery(l.log, "user records outside the shard's hash key range delivered", l.stats.clock)
		d.dec = &kplDecoder{keys: keys, outside: func(r Record, n int, first Record, key hashKey, ok bool) {
			e := HashKeyOutOfRange{Stream: stream, ShardID: c.shard, SequenceNumber: r.SequenceNumber, Records: n,
				SubSequenceNumber: first.SubSequenceNumber, StartingHashKey: keys.start.String(), EndingHashKey: keys.end.String()}
			if ok {
				e.HashKey = key.String()
			}
			l.stats.outOfRange(c.shard, n)
			outsideLog.add(n, "shard", c.shard, "seq", r.SequenceNumber, "first", first.SubSequenceNumber, "hash_key", e.HashKey)
			l.hooks.onOutOfRange(e)
		}}
	}
	return d
}

// leaseAcquired records that this host starts reading a shard under ls,
// from pos (where the fleet left it, or the Sink if further).
func (s *session) leaseAcquired(ls Lease, pos scan.Position) time.Time {
	now := time.Now()
	id := ls.Shard()
	if pos.Kind == 0 {
		pos = s.l.stats.position(id)
	} else {
		// Where the lease resumes, which may be past what this host's
		// Stats last saw (another host's commits, the Sink's
		// checkpoint), or behind it (a rewind): a handoff before the
		// first commit reports it.
		s.l.stats.resumed(id, pos)
	}
	s.l.hooks.onLeaseAcquired(LeaseAcquired{Stream: s.l.cfg.Stream, ShardID: id, Epoch: ls.Epoch(), Reason: ls.Acquired(), Position: pos})
	s.l.stats.leaseAcquired(id, ls.Epoch(), ls.Acquired(), now)
	s.l.hooks.obs.add(ls)
	return now
}

// leaseLost records that the shard's loop stopped because ls was lost;
// err is what the loop returned.
func (s *session) leaseLost(ls Lease, err error, since time.Time) {
	s.l.hooks.obs.remove(ls)
	lost, ok := errors.AsType[*LeaseLostError](err)
	if !ok {
		lost, _ = errors.AsType[*LeaseLostError](ls.Err())
	}
	e := LeaseLost{Stream: s.l.cfg.Stream, ShardID: ls.Shard(), Epoch: ls.Epoch(), Held: time.Since(since)}
	if lost != nil && lost.Why == LostReleased {
		// Given up by Leave while the loop was stuck: not a loss.
		s.l.stats.leaseEnded(e.ShardID, endUncounted)
		return
	}
	if lost != nil {
		e.Reason, e.Err = lost.Why, lost
	} else if err != nil && !errors.Is(err, context.Canceled) {
		e.Err = err
	}
	s.l.log.Warn("lease lost: stopped reading the shard", "shard", e.ShardID, "epoch", e.Epoch, "reason", e.Reason, "err", e.Err)
	s.l.hooks.onLeaseLost(e)
	s.l.stats.leaseLost(e.ShardID, e.Reason)
}

// leaseReleased records that ls was released after its shard's loop
// returned (without losing it); completed says the shard ended, which is
// no handoff: nobody reads it after.
func (s *session) leaseReleased(gctx context.Context, ls Lease, completed bool, since time.Time) {
	s.l.hooks.obs.remove(ls)
	id := ls.Shard()
	if completed {
		s.l.stats.leaseEnded(id, endUncounted)
		return
	}
	why := HandoffStop
	select {
	case <-ls.Handoff():
		why = HandoffRebalance
	default:
	}
	if gctx.Err() != nil {
		s.l.mu.Lock()
		switch {
		case s.l.closed:
			why = HandoffClose
		case s.l.paused:
			why = HandoffPause
		case why != HandoffRebalance:
			why = HandoffStop
		}
		s.l.mu.Unlock()
	}
	s.l.hooks.onLeaseHandedOff(LeaseHandedOff{Stream: s.l.cfg.Stream, ShardID: id, Epoch: ls.Epoch(), Reason: why,
		Position: s.l.stats.position(id), Held: time.Since(since)})
	s.l.stats.leaseEnded(id, endHandedOff)
}

// releaseFenced gives up the lease of a shard the Sink fenced. The
// coordinator may not know the lease is lost yet: Release, conditional on
// the lease's owner and epoch, then writes nothing (another host owns the
// shard), or frees a shard the fleet's table still gives this host, so
// that no host holds it without reading it. Its failure is not one of the
// Loader: the coordinator finds the loss on its own.
func (s *session) releaseFenced(hctx context.Context, ls Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), s.l.cfg.CallTimeout)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		s.l.log.Debug("releasing a lease the sink fenced", "shard", ls.Shard(), "epoch", ls.Epoch(), "err", err)
	}
}

// callKinesis makes one Kinesis call of the Loader (not of a consume loop,
// which has its own paced loop in the reader), retrying transient failures with backoff: without limit by default, up
// to Config.KinesisMaxAttempts tries when that is set. An error that no
// retry fixes, or exhausted attempts, comes back as a [*RunError] of class
// [ErrKinesis]; the end of ctx as ctx.Err(). fn applies the per-call
// timeout (Config.CallTimeout) to each call it makes, and passes
// noSDKRetries.
func (s *session) callKinesis(ctx context.Context, shard, op string, fn func(ctx context.Context) error) error {
	l := s.l
	retry, throttle := l.retryPolicy(), l.throttlePolicy()
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !kerr.IsRetryable(err):
			return &RunError{Stream: l.cfg.Stream, Shard: shard, Op: op, Kind: ErrKinesis, Err: err}
		case l.cfg.KinesisMaxAttempts > 0 && attempt >= l.cfg.KinesisMaxAttempts:
			return &RunError{Stream: l.cfg.Stream, Shard: shard, Op: op, Kind: ErrKinesis,
				Err: fmt.Errorf("failed %d times, giving up (KinesisMaxAttempts): %w", attempt, err)}
		}
		p := retry
		if kerr.IsThrottled(err) {
			p = throttle
		}
		wait := p.Delay(attempt)
		l.retried(shard, op, attempt, wait, err)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}
