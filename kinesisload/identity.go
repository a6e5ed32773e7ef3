package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// StreamIdentity tells one Kinesis stream from another of the same name: a
// stream deleted and created again under its name keeps its ARN (Kinesis
// builds it from the region, the account and the name) but gets a new
// creation timestamp, and reuses the shard IDs from shardId-000000000000.
// Progress is journaled with the identity of the stream it was made on, so
// that it is never applied to another one.
//
// The zero StreamIdentity means "unknown": progress stored before
// identities were journaled.
type StreamIdentity struct {
	// ARN is the stream's ARN, from DescribeStreamSummary.
	ARN string `json:"arn"`
	// Created is the stream's creation timestamp, from
	// DescribeStreamSummary (milliseconds on AWS; whole seconds on some
	// emulators).
	Created time.Time `json:"created"`
}

// IsZero reports whether id is the zero StreamIdentity.
func (id StreamIdentity) IsZero() bool { return id.ARN == "" && id.Created.IsZero() }

// Equal reports whether id and o name the same stream: the same ARN and
// the same creation instant.
func (id StreamIdentity) Equal(o StreamIdentity) bool {
	return id.ARN == o.ARN && id.Created.Equal(o.Created)
}

// String returns "ARN created TIMESTAMP" (RFC 3339, UTC), or "(unknown)"
// for the zero StreamIdentity.
func (id StreamIdentity) String() string {
	if id.IsZero() {
		return "(unknown)"
	}
	return fmt.Sprintf("%s created %s", id.ARN, id.Created.UTC().Format(time.RFC3339Nano))
}

// StreamMismatchError stops [Loader.Run] when the stream's identity differs
// from the one journaled with its progress: the stored positions mean
// nothing on the new stream (its shard IDs start again at
// shardId-000000000000, so a shard the journal holds as COMPLETED would
// never be read). Nothing was read or changed. errors.Is(err,
// ErrStreamMismatch) holds.
//
// The ways out: set [Config.OnStreamRecreated] to
// [StreamRecreatedStartOver], which archives the old progress in the
// store (never deleting it) and reads the new stream as on a first run; or
// give the Loader an empty journal directory.
type StreamMismatchError struct {
	// Stream is the stream name.
	Stream string
	// Stored is the identity the progress was stored with.
	Stored StreamIdentity
	// Current is the identity of the stream Kinesis serves now.
	Current StreamIdentity
}

// Error names both identities and the way out.
func (e *StreamMismatchError) Error() string {
	what := "was deleted and created again under the same name"
	if e.Stored.ARN != e.Current.ARN {
		what = "is another stream than the one the progress belongs to (another ARN: another region or account?)"
	}
	return fmt.Sprintf("kinesisload: stream %s %s: the progress was stored for %s, but the stream is now %s; "+
		"the stored positions mean nothing on it, so nothing was read. To read it from Config.StartPosition as on a first run, "+
		"set Config.OnStreamRecreated = kinesisload.StreamRecreatedStartOver (the old progress is archived in the journal, not deleted), "+
		"or give the Loader an empty journal directory",
		e.Stream, what, e.Stored, e.Current)
}

// Unwrap returns [ErrStreamMismatch].
func (e *StreamMismatchError) Unwrap() error { return ErrStreamMismatch }

// StreamRecreated says what [Loader.Run] does when the stream's identity
// differs from the one journaled with its progress (see
// [StreamMismatchError]).
type StreamRecreated uint8

const (
	// StreamRecreatedStop stops Run with a [*StreamMismatchError]. The
	// default.
	StreamRecreatedStop StreamRecreated = iota
	// StreamRecreatedStartOver archives the old stream's progress in the
	// store under its identity (the [PositionStore]'s StartOver; a
	// [JournalStore] keeps it, see [JournalStore.Archives]) and reads the
	// new stream as on a first run: every shard from
	// [Config.StartPosition] or its start in [Config.Shards], as they mean
	// relative to the first Run's T0. The new stream arrived wholly after
	// T0, so LATEST means its beginning (it is resolved at
	// [StartOverT0]): what it received before the Loader noticed it is
	// delivered too. When this happens while Run reads, Run stops reading
	// the old stream and starts over by itself.
	//
	// A [TransactionalSink]'s checkpoints are keyed by stream name and
	// shard ID too, so they would apply the old stream's positions to the
	// new one: while the Sink holds checkpoints for the stream, Run stops
	// with an error wrapping [ErrStreamMismatch] that says so, archives
	// nothing, and starts over once they are removed from the Sink's
	// store.
	//
	// In a fleet ([WithCoordinator]; kinesisload/dynamo, coordtest) the
	// first host that meets the new stream moves every host at once, with
	// the store's StartOver (see [Membership.Store]): one conditional
	// write moves the fleet's progress to a new generation and keeps the
	// old one as the archive. Every host's leases of the old stream are
	// lost ([LostStartedOver]: nothing more is committed under them), its
	// session ends, and its next one initialises the new stream through
	// the fleet's initialisation lock, as on a first run: LATEST is
	// resolved once for the fleet on the new stream, at [StartOverT0],
	// and is durable before any host reads it. No host reads the new stream with the old
	// progress, and Run goes on. The fleet moves only forward: a host that
	// sees a stream created no later than the one the fleet reads stops
	// with a [*RunError] of class [ErrJournal] (op "StartOver") wrapping
	// [ErrStreamMismatch], and nothing moves.
	StreamRecreatedStartOver
)

// String returns the constant's name.
func (r StreamRecreated) String() string {
	switch r {
	case StreamRecreatedStop:
		return "StreamRecreatedStop"
	case StreamRecreatedStartOver:
		return "StreamRecreatedStartOver"
	}
	return fmt.Sprintf("StreamRecreated(%d)", uint8(r))
}

// describeIdentity asks Kinesis for the stream's identity, retrying
// transient failures like every call of the Loader (see callKinesis).
func (s *session) describeIdentity(ctx context.Context) (StreamIdentity, error) {
	id, _, err := s.describeIdentityAt(ctx)
	return id, err
}

// describeIdentityAt is describeIdentity that also returns Kinesis's clock
// when this Run began ([session.began]), read from the answer (see
// kinesisClockAt).
func (s *session) describeIdentityAt(ctx context.Context) (StreamIdentity, time.Time, error) {
	var id StreamIdentity
	var at time.Time
	err := s.callKinesis(ctx, "", "DescribeStreamSummary", func(ctx context.Context) error {
		var err error
		var md middleware.Metadata
		id, _, md, err = describeStreamMeta(ctx, s.client, s.l.cfg.Stream, s.l.cfg.CallTimeout)
		if err == nil {
			at = kinesisClockAt(md, s.began, s.beganWall)
			if _, ok := scan.ServerTime(md); !ok {
				s.clockSlack = scan.HostClockBound
			}
		}
		return err
	})
	return id, at, err
}

// kinesisClockAt returns Kinesis's clock at the moment then (a reading of
// this host's monotonic clock before the call whose answer's metadata is
// md), to the millisecond: the answer's server time (its HTTP Date, whole
// seconds floored, stamped before the answer arrived) minus the time
// elapsed here since then. It is never later than Kinesis's clock at then,
// and at most a second plus the time since then earlier. When the answer
// carries no server time, it is this host's wall clock at then (wall, see
// [WithClock]) minus [scan.HostClockBound], as [scan.Resolver.Now] does.
func kinesisClockAt(md middleware.Metadata, then, wall time.Time) time.Time {
	if at, ok := scan.ServerTime(md); ok {
		return at.Add(-max(time.Since(then), 0)).UTC().Truncate(time.Millisecond)
	}
	return wall.Add(-scan.HostClockBound).UTC().Truncate(time.Millisecond)
}

// describeStream makes one DescribeStreamSummary call.
func describeStream(ctx context.Context, c scan.Client, stream string, timeout time.Duration) (StreamIdentity, error) {
	id, _, _, err := describeStreamMeta(ctx, c, stream, timeout)
	return id, err
}

// describeStreamMeta is describeStream that also returns the stream's
// status and the answer's metadata.
func describeStreamMeta(ctx context.Context, c scan.Client, stream string, timeout time.Duration) (StreamIdentity, types.StreamStatus, middleware.Metadata, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.DescribeStreamSummary(cctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)}, noSDKRetries)
	if err != nil {
		return StreamIdentity{}, "", middleware.Metadata{}, err
	}
	if out == nil || out.StreamDescriptionSummary == nil ||
		aws.ToString(out.StreamDescriptionSummary.StreamARN) == "" || out.StreamDescriptionSummary.StreamCreationTimestamp == nil {
		return StreamIdentity{}, "", middleware.Metadata{}, fmt.Errorf("%w: DescribeStreamSummary returned no StreamARN or no StreamCreationTimestamp, which identify the stream", kerr.ErrOddAnswer)
	}
	d := out.StreamDescriptionSummary
	if d.StreamStatus == types.StreamStatusDeleting {
		return StreamIdentity{}, d.StreamStatus, middleware.Metadata{}, fmt.Errorf("%w: stream %s has status DELETING", ErrStreamDeleted, stream)
	}
	return StreamIdentity{ARN: *d.StreamARN, Created: d.StreamCreationTimestamp.UTC()}, d.StreamStatus, out.ResultMetadata, nil
}

// streamAbsent reports whether err says the stream is gone or not ACTIVE:
// Kinesis's ResourceNotFoundException, a stream DELETING
// ([ErrStreamDeleted]), or a ResourceInUseException (a stream CREATING or
// DELETING refuses calls with it). With start-over configured, Run waits
// for such a stream (see awaitStream).
func streamAbsent(err error) bool {
	return streamGone(err) || streamInUse(err)
}

// streamGone reports whether err says the stream is gone
// (ResourceNotFoundException) or being deleted ([ErrStreamDeleted]).
func streamGone(err error) bool {
	return errorIsNotFound(err) || errors.Is(err, ErrStreamDeleted)
}

// awaitStream waits, with start-over configured, until the stream is
// ACTIVE (or UPDATING) again after cause said it was gone or not ACTIVE,
// for at most Config.StreamWaitTimeout, and reports whether the next
// session should start: the stream is back and is not the session's (it
// was re-created: the next session starts over on it). It returns cause
// when the stream came back as the same stream (cause was not about its
// re-creation) or is still not back when the wait ends, and ctx.Err()
// when ctx ends first. The wait is logged and shown in Stats.
func (s *session) awaitStream(ctx context.Context, cause error) error {
	l := s.l
	since := l.stats.clock()
	l.stats.waitingForStream(since)
	defer l.stats.waitingForStream(time.Time{})
	l.log.Warn("the stream is gone, DELETING or CREATING; waiting for it to be ACTIVE again, then starting over if it was re-created",
		"err", cause, "timeout", l.cfg.StreamWaitTimeout)
	deadline := time.Now().Add(l.cfg.StreamWaitTimeout)
	for attempt := 1; ; attempt++ {
		id, status, _, err := describeStreamMeta(ctx, s.client, l.cfg.Stream, l.cfg.CallTimeout)
		switch {
		case err == nil && (status == types.StreamStatusActive || status == types.StreamStatusUpdating):
			if id.Equal(s.identity) {
				l.log.Warn("the stream is ACTIVE and was not re-created", "identity", id.String())
				return cause
			}
			l.log.Info("the stream is ACTIVE again", "identity", id.String(), "waited", time.Since(since))
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !streamAbsent(err) && !kerr.IsRetryable(err):
			return fmt.Errorf("kinesisload: stream %s: waiting for the stream: %w", l.cfg.Stream, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kinesisload: stream %s: not ACTIVE again after waiting %v (Config.StreamWaitTimeout): %w", l.cfg.Stream, l.cfg.StreamWaitTimeout, cause)
		}
		if err := backoff.Sleep(ctx, l.retryPolicy().Delay(attempt)); err != nil {
			return err
		}
	}
}

// streamInUse reports whether err is Kinesis's ResourceInUseException,
// which a stream CREATING or DELETING answers to reads.
func streamInUse(err error) bool {
	_, ok := errors.AsType[*types.ResourceInUseException](err)
	return ok
}

// explainInUse returns err (a call refused with a ResourceInUseException)
// wrapping too the reason the stream gives when it is being deleted
// ([ErrStreamDeleted]) or is gone (ResourceNotFoundException): "not
// currently ACTIVE" alone does not say that the stream is going.
func (s *session) explainInUse(ctx context.Context, err error) error {
	_, derr := describeStream(ctx, s.client, s.l.cfg.Stream, s.l.cfg.CallTimeout)
	if derr == nil || ctx.Err() != nil || !streamGone(derr) {
		return err
	}
	return s.withStreamState(err, derr)
}

// withStreamState returns err, a stop, wrapping too derr, what
// DescribeStreamSummary said of the stream (gone or going): still the
// stop's *RunError when err is one.
func (s *session) withStreamState(err, derr error) error {
	if re, ok := errors.AsType[*RunError](err); ok {
		explained := *re
		explained.Err = fmt.Errorf("%w (DescribeStreamSummary: %w)", re.Err, derr)
		return &explained
	}
	return stopError(s.l.cfg.Stream, "", "DescribeStreamSummary", ErrKinesis, fmt.Errorf("%w (%w)", derr, err))
}

// explainVanished returns, instead of err (a lineage violation: tracked
// shards missing from a listing), the reason the stream itself gives when
// it is being deleted or is gone; otherwise err.
func (s *session) explainVanished(ctx context.Context, err error) error {
	if _, derr := describeStream(ctx, s.client, s.l.cfg.Stream, s.l.cfg.CallTimeout); derr != nil && ctx.Err() == nil && streamGone(derr) {
		return stopError(s.l.cfg.Stream, "", "DescribeStreamSummary", ErrKinesis, derr)
	}
	return err
}

// errorIsNotFound reports whether err is Kinesis's ResourceNotFoundException.
func errorIsNotFound(err error) bool {
	_, ok := errors.AsType[*types.ResourceNotFoundException](err)
	return ok
}

// establishIdentity checks, at the start of a session, that the stream is
// the one the stored progress was made on, and sets s.identity. With no
// identity stored (a first run, or progress stored before identities were
// journaled) it journals the current one before anything else is stored.
// On a mismatch it returns a [*StreamMismatchError], or starts over when
// Config.OnStreamRecreated says so.
func (s *session) establishIdentity(ctx context.Context) error {
	l, stream := s.l, s.l.cfg.Stream
	cur, began, err := s.describeIdentityAt(ctx)
	if err != nil {
		return err
	}
	if err := s.checkFutureStart(began); err != nil {
		return err
	}
	stored, err := s.store.Identity(ctx, stream)
	if err != nil {
		return fmt.Errorf("kinesisload: stream %s: loading the stream's identity: %w", stream, err)
	}
	if !stored.IsZero() && !stored.Equal(cur) && !cur.Created.After(stored.Created) {
		// The stream this Run described is no later than the one the
		// progress was stored for: the answer may be older than the
		// store's (a store that kept Run waiting, while the stream was
		// re-created again). Ask again before taking the stream for
		// another (found by the simulation, seed 3130153: a fleet host
		// stopped, refused a start-over to a stream two re-creations old).
		if cur, _, err = s.describeIdentityAt(ctx); err != nil {
			return err
		}
	}
	switch {
	case stored.Equal(cur):
	case stored.IsZero():
		// A first run: T0, the moment this Run began on Kinesis's clock,
		// is its first durable write, made from Kinesis's first answer.
		// A start-up that dies at any later point resolves at it when it
		// runs again, so nothing that arrived since this Run began is
		// taken for "before the start".
		if err := s.keepStart(ctx, began); err != nil {
			return err
		}
		l.log.Info("journaling the stream's identity", "identity", cur.String())
		if err := s.store.SetIdentity(ctx, stream, cur); err != nil {
			return fmt.Errorf("kinesisload: stream %s: saving the stream's identity: %w", stream, err)
		}
	case l.cfg.OnStreamRecreated != StreamRecreatedStartOver:
		return stopError(stream, "", "DescribeStreamSummary", ErrStreamMismatch, &StreamMismatchError{Stream: stream, Stored: stored, Current: cur})
	default:
		if l.tx != nil {
			cps, err := s.checkpoints(ctx, stream)
			if isStuck(err) {
				return err
			}
			if err != nil {
				return fmt.Errorf("kinesisload: stream %s: loading the sink's checkpoints: %w", stream, err)
			}
			if len(cps) > 0 {
				return fmt.Errorf("%w: stream %s was deleted and created again (it was %s, it is now %s), "+
					"and Config.OnStreamRecreated says start over, but the TransactionalSink still holds checkpoints for %d shards of the old stream "+
					"(such as %s), which would apply to the new stream's shards of the same IDs; nothing was archived or read. "+
					"Stop every host that loads the stream, remove the stream's checkpoints from the sink's store (keep its records if you like), then run again "+
					"(a host still running could store a late batch of the old stream without the checkpoints that would refuse it)",
					ErrStreamMismatch, stream, stored, cur, len(cps), sortedKeys(cps)[0])
			}
		}
		l.log.Warn("the stream was deleted and created again: archiving its old progress and starting over",
			"old", stored.String(), "new", cur.String())
		if err := s.store.StartOver(ctx, stream, cur); err != nil {
			// Classed as the store's failure, and wrapping
			// ErrStreamMismatch, the reason it was asked (a store that
			// cannot start over, such as a fleet's, stops every host).
			return stopError(stream, "", "StartOver", ErrJournal, fmt.Errorf("%w: stream %s was deleted and created again (it was %s, it is now %s): "+
				"starting over: %w", ErrStreamMismatch, stream, stored, cur, err))
		}
		if _, durable := s.store.(StartStore); !durable {
			// A StartStore's StartOver left StartOverT0 pending; with
			// another store this Run keeps it in memory.
			s.t0 = StartOverT0(cur)
		}
	}
	s.identity = cur
	return nil
}

// checkFutureStart refuses an AT_TIMESTAMP start (Config.StartPosition or
// a Config.Shards position) later than Kinesis's clock now (began, its
// clock when Run began, plus the time since, a second for the Date's
// floor, and the host clock's bound when the answer had no Date): Kinesis
// refuses an iterator at a time in the future, so every read of the shard
// would fail.
func (s *session) checkFutureStart(began time.Time) error {
	cfg := s.l.cfg
	now := began.Add(time.Since(s.began) + time.Second + s.clockSlack)
	check := func(field string, p scan.Position) error {
		if p.Kind != scan.KindAtTimestamp || !p.Timestamp.After(now) {
			return nil
		}
		return &RunError{Stream: cfg.Stream, Op: "Validate", Kind: ErrInvalidConfig, Err: fmt.Errorf(
			"%w: %s = %v: later than Kinesis's clock now (%v), and Kinesis refuses an iterator at a time in the future; start the Loader at that time instead",
			ErrInvalidConfig, field, p, now.UTC().Truncate(time.Second))}
	}
	if err := check("StartPosition", cfg.StartPosition); err != nil {
		return err
	}
	for _, id := range sortedKeys(cfg.Shards) {
		if err := check("Shards["+id+"]", cfg.Shards[id]); err != nil {
			return err
		}
	}
	return nil
}

// checkIdentity asks Kinesis for the stream's identity and returns a
// [*StreamMismatchError] when it is not the session's.
func (s *session) checkIdentity(ctx context.Context) error {
	cur, err := s.describeIdentity(ctx)
	if err != nil {
		return err
	}
	if !cur.Equal(s.identity) {
		return stopError(s.l.cfg.Stream, "", "DescribeStreamSummary", ErrStreamMismatch, &StreamMismatchError{Stream: s.l.cfg.Stream, Stored: s.identity, Current: cur})
	}
	return nil
}

// identityGate coalesces the identity checks that readers ask for after
// they get a fresh iterator or subscription: one DescribeStreamSummary
// answers every reader that asked before it began.
type identityGate struct {
	mu       sync.Mutex
	started  uint64        // checks begun
	ok       uint64        // the latest check begun that found the stream the session's
	inflight chan struct{} // closed when the check in flight ends (nil: none)
	mismatch error         // once a check found another stream
}

// confirmIdentity returns once a check of the stream's identity that began
// after the call found the stream the session's; a [*StreamMismatchError]
// (through a RunError) when it found another. A reader calls it after it
// gets an iterator (or a subscription), before it reads with it: an
// iterator got while the stream was deleted and created again under its
// name reads the new stream, whose records must not be delivered, nor
// their positions committed, as the old stream's (its shards have the same
// IDs). The checks after ListShards alone come too late for that.
// Iterators are got when a shard starts and when one expires (after five
// minutes without a read) or fails: the readers of a start-up share a few
// checks, and a Run that reads on makes none.
func (s *session) confirmIdentity(ctx context.Context) error {
	g := &s.gate
	g.mu.Lock()
	want := g.started + 1 // a check that begins from now on
	for {
		switch {
		case g.mismatch != nil:
			err := g.mismatch
			g.mu.Unlock()
			return err
		case g.ok >= want:
			g.mu.Unlock()
			return nil
		case g.inflight != nil:
			ch := g.inflight
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			g.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		g.inflight = ch
		g.started++
		n := g.started
		g.mu.Unlock()
		err := s.checkIdentity(ctx)
		g.mu.Lock()
		g.inflight = nil
		close(ch)
		switch {
		case err == nil:
			g.ok = max(g.ok, n)
		case errors.Is(err, ErrStreamMismatch):
			g.mismatch = err
		default:
			g.mu.Unlock()
			return err
		}
	}
}

// explainAttempts bounds the DescribeStreamSummary calls of explain
// without start-over configured: it runs when the Loader stops anyway, and
// must not hold the stop for an outage.
const explainAttempts = 5

// explain returns a [*StreamMismatchError] instead of err, a consume loop's
// failure, when the stream was re-created under the loop (its iterators
// then fail, or its stored sequence numbers are refused); otherwise err.
// It asks DescribeStreamSummary, only when the Loader stops anyway,
// retrying a throttle or a transient failure a few times (a stop named
// for the stored position, not the re-creation, was a documented stop
// missed: found by the simulation, seed 4068644, with DescribeStreamSummary
// throttled at the moment).
func (s *session) explain(ctx context.Context, err error) error {
	return s.explainWithin(ctx, err, true)
}

// explainWithin is explain; patient says whether, with start-over
// configured, it asks for as long as Run would wait for the stream, or
// explainAttempts times only, as when the session is stopped anyway (a
// Pause or Close must not wait StreamWaitTimeout for an answer).
func (s *session) explainWithin(ctx context.Context, err error, patient bool) error {
	if ctx.Err() != nil {
		return err
	}
	// With start-over configured the answer decides between starting
	// over and stopping: ask for as long as Run would wait for the
	// stream (a DescribeStreamSummary failing for 21 s stopped Run for a
	// re-created stream it was configured to start over on: seed
	// 90014580).
	startOver := s.l.cfg.OnStreamRecreated == StreamRecreatedStartOver
	deadline := time.Now().Add(s.l.cfg.StreamWaitTimeout)
	if !patient {
		deadline = time.Now()
	}
	var cur StreamIdentity
	var derr error
	for attempt := 1; ; attempt++ {
		cur, derr = describeStream(ctx, s.client, s.l.cfg.Stream, s.l.cfg.CallTimeout)
		last := attempt >= explainAttempts && (!startOver || time.Now().After(deadline))
		if derr == nil || !kerr.IsRetryable(derr) || last {
			break
		}
		if backoff.Sleep(ctx, s.l.throttlePolicy().Delay(attempt)) != nil {
			return err
		}
	}
	if derr != nil && startOver && streamAbsent(derr) {
		// Gone or going: Run waits for it (awaitStream), then checks
		// whether it was re-created.
		return s.withStreamState(err, derr)
	}
	if derr != nil || cur.Equal(s.identity) {
		return err
	}
	s.l.log.Warn("a shard failed because the stream was re-created", "err", err)
	return stopError(s.l.cfg.Stream, "", "DescribeStreamSummary", ErrStreamMismatch, &StreamMismatchError{Stream: s.l.cfg.Stream, Stored: s.identity, Current: cur})
}

// listShardsChecked lists the shards, then checks that the stream is still
// the session's, so that the shards of a stream re-created meanwhile are
// never taken for the old stream's.
func (s *session) listShardsChecked(ctx context.Context) ([]types.Shard, error) {
	shards, err := s.listShards(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkIdentity(ctx); err != nil {
		return nil, err
	}
	return shards, nil
}
