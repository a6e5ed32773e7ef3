package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tidemark/tidemark/scan"
)

// This file is the bounded replay (Config.StopAt): every shard is read up
// to its first record that arrived at or after the bound, or to its end,
// and then is done for the Run; Run returns nil once every shard is.

// StopAtSettle is how long after Config.StopAt, on Kinesis's clock, a
// shard read to its tip with no record at or after the bound is done: a
// record put before the bound is readable within it. (Kinesis stamps a
// record's arrival when it accepts it; the Loader reads Kinesis's clock
// from its answers, never this host's.)
const StopAtSettle = 2 * time.Second

// errReplayDone ends a session whose every shard is done (Config.StopAt):
// Run returns nil.
var errReplayDone = errors.New("kinesisload: every shard reached Config.StopAt")

// validateStopAt checks Config.StopAt against the other fields.
func (c Config) validateStopAt() error {
	if c.StopAt.IsZero() {
		return nil
	}
	if c.StartPosition.Kind == scan.KindAtTimestamp && !c.StartPosition.Timestamp.Before(c.StopAt) {
		return fmt.Errorf("%w: StopAt = %v: not after StartPosition %v: the window holds nothing", ErrInvalidConfig, c.StopAt.UTC().Format(time.RFC3339Nano), c.StartPosition)
	}
	return nil
}

// boundClock tells, once and for all sessions' shards, whether Kinesis's
// clock has passed Config.StopAt plus StopAtSettle.
type boundClock struct {
	mu     sync.Mutex
	passed bool
	// since is when the call that found it passed was made, on this
	// host's monotonic clock: a page asked for before says nothing of
	// the bound.
	since time.Time
}

// boundPassedBefore reports whether Kinesis's clock was at least StopAt +
// StopAtSettle when a call made at asked (on this host's monotonic
// clock) was made: asked of Kinesis (one ListShards, whose Date is its clock) only
// once this host's clock says so too, and never again once it is. A page
// asked for before that says nothing: a record may have arrived within
// the bound after it (the reader holds a page ahead while the Sink works).
func (s *session) boundPassedBefore(ctx context.Context, asked time.Time) bool {
	l := s.l
	at := l.cfg.StopAt.Add(StopAtSettle)
	if l.stats.clock().Before(at) {
		return false
	}
	bc := &s.bound
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if !bc.passed {
		since := time.Now()
		now, err := s.resolver.Now(ctx, s.client, l.cfg.Stream)
		if err != nil {
			return false // asked again at the next idle page
		}
		if bc.passed = !now.Before(at); bc.passed {
			bc.since = since
		}
	}
	return bc.passed && !asked.Before(bc.since)
}

// cutAtBound applies Config.StopAt to a page of shard: its records from
// the first that arrived at or after the bound are dropped (and the page
// no longer ends the shard), and done reports that the shard reached the
// bound: such a record was met, or the shard was read to its tip (an
// empty page, MillisBehindLatest 0, asked for once Kinesis's clock had
// passed the bound: boundPassedBefore) while ListShards lists it open (a closed shard is read
// to its end: some endpoints answer empty pages before it).
func (s *session) cutAtBound(ctx context.Context, shard string, p page) (page, bool) {
	stop := s.l.cfg.StopAt
	if stop.IsZero() {
		return p, false
	}
	bound := stop.Truncate(time.Millisecond)
	for i, r := range p.records {
		if r.ApproximateArrivalTimestamp != nil && !r.ApproximateArrivalTimestamp.Before(bound) {
			p.records = p.records[:i:i]
			p.end, p.children = false, nil
			return p, true
		}
	}
	if len(p.records) == 0 && !p.end && p.millisBehind == 0 && s.boundPassedBefore(ctx, p.asked) && s.listedOpen(ctx, shard) {
		return p, true
	}
	return p, false
}

// listedOpen reports whether ListShards lists shard open (false on an
// error: asked again at the next page).
func (s *session) listedOpen(ctx context.Context, shard string) bool {
	shards, err := listShards(ctx, s.client, s.l.cfg.Stream, s.l.cfg.CallTimeout)
	if err != nil {
		return false
	}
	for _, sh := range shards {
		if aws.ToString(sh.ShardId) == shard {
			return !shardClosed(sh)
		}
	}
	return false
}

// unbounded returns ids without the shards that reached the bound in this
// session: they are not read again.
func (s *session) unbounded(ids []string) []string {
	if len(s.atBound) == 0 {
		return ids
	}
	out := ids[:0:0]
	for _, id := range ids {
		if !s.atBound[id] {
			out = append(out, id)
		}
	}
	return out
}

// markBound records that shard reached the bound.
func (s *session) markBound(shard string) {
	if s.atBound == nil {
		s.atBound = map[string]bool{}
	}
	s.atBound[shard] = true
	s.l.log.Info("shard reached StopAt", "shard", shard, "stop_at", s.l.cfg.StopAt)
}

// replayOver reports whether Config.StopAt is set and every tracked shard
// is done: COMPLETED, at the bound, or waiting for a parent that is
// itself done without being COMPLETED (its records all arrived after the
// bound: a parent stopped at the bound closed after it).
func (s *session) replayOver(t *topology) bool {
	if s.l.cfg.StopAt.IsZero() {
		return false
	}
	memo := map[string]bool{}
	var done func(id string, depth int) bool
	done = func(id string, depth int) bool {
		if v, ok := memo[id]; ok {
			return v
		}
		n := t.nodes[id]
		v := false
		switch {
		case n == nil || n.State == StateCompleted || s.atBound[id]:
			v = true
		case depth > 64:
		case n.State == StateActive || n.State == StateDraining:
			// Read (or to be read) and not at the bound yet.
		default:
			// Waiting for parents: done when one of them will never
			// complete in this Run and the rest are done.
			stopped := false
			v = len(n.Parents) > 0
			for _, p := range n.Parents {
				pn := t.nodes[p]
				if pn != nil && pn.State != StateCompleted && done(p, depth+1) {
					stopped = true
				}
				if !done(p, depth+1) {
					v = false
				}
			}
			v = v && stopped
		}
		memo[id] = v
		return v
	}
	for id := range t.nodes {
		if t.tracked(id) && !done(id, 0) {
			return false
		}
	}
	return true
}

// windowsAtBound ends a windowed shard's loop (window.go) that reached
// Config.StopAt: what the shard has in windows is delivered and committed
// now, as at a graceful stop, and the shard is done.
func (c *consumer) windowsAtBound(hctx context.Context, w *windower, f *feed) (bool, error) {
	w.flush(f)
	if err := w.await(hctx, f); err != nil {
		return false, err
	}
	c.bounded = true
	return false, nil
}
