package scan

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
)

// noSDKRetries switches the SDK's own retries off for one call, so that the
// Resolver's bounds (attempts, backoff, per-call timeout) are the real ones.
func noSDKRetries(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} }

// The windows of the probe strategy's gallops grow by this factor on each
// step, up to maxWindow (longer than the longest Kinesis retention, 365
// days). A factor of 4 rather than 2 takes half the steps to reach a distant
// last record, for one more bisection step.
const (
	growth    = 4
	maxWindow = 400 * 24 * time.Hour
	maxGallop = 40 // bounds the forward gallop
)

// grow returns the next gallop window after w.
func grow(w time.Duration) time.Duration {
	if w > maxWindow/growth {
		return maxWindow
	}
	return w * growth
}

// shardScan is the state of one shard's scan, owned by one worker.
type shardScan struct {
	cfg    *Config
	client Client
	stream string
	shard  string
	stats  Stats
	retry  func(RetryEvent)          // the request's retry hook, if any
	pacers map[string]*backoff.Pacer // by operation; see pace

	// The newest server time seen in a response, and this host's clock
	// when it was seen.
	serverAt, localAt time.Time
	haveServer        bool

	// T0 ([Request.At]), if set: only records that arrived before it
	// count.
	at     time.Time
	haveAt bool
	// hi is what search found: see there.
	hi time.Time
	// control is a position known to hold a record (the anchor), where a
	// GetShardIterator must answer: it tells an endpoint that leaves one
	// probe unanswered from one that is down. See probeIterator.
	control Position
	// ended is set when a read reached the end of the closed shard
	// without a record at or after T0 (see ShardResult.Ended).
	ended bool
}

// record is what a scan keeps of a record: never its payload.
type record struct {
	seq    string
	ts     time.Time
	haveTS bool
}

func (r *Resolver) resolveShard(ctx context.Context, req Request, shard string) (ShardResult, error) {
	s := &shardScan{cfg: &r.cfg, client: req.Client, stream: req.Stream, shard: shard, retry: req.Hooks.Retry}
	if !req.At.IsZero() {
		s.at, s.haveAt = ms(req.At), true
	}
	start := r.cfg.Now()
	var (
		pos Position
		err error
	)
	switch r.cfg.Strategy {
	case StrategyFullScan:
		pos, err = s.fullScan(ctx)
	default:
		pos, err = s.probeScan(ctx)
	}
	if err != nil {
		return ShardResult{}, err
	}
	s.stats.Duration = r.cfg.Now().Sub(start)
	return ShardResult{Shard: shard, Position: pos, Ended: s.ended, Stats: s.stats}, nil
}

// fullScan reads from TRIM_HORIZON to the tip: the seed's algorithm.
func (s *shardScan) fullScan(ctx context.Context) (Position, error) {
	last, ok, _, err := s.readToTip(ctx, TrimHorizon(), s.cfg.PageLimit, false)
	if err != nil {
		return Position{}, err
	}
	if !ok {
		return TrimHorizon(), nil
	}
	return AfterSequence(last.seq), nil
}

// probeScan finds the neighbourhood of the last record before T0 (of the
// tip, without T0) with existence probes, then reads from a record a probe
// has seen. See the package documentation for why it returns what fullScan
// returns.
func (s *shardScan) probeScan(ctx context.Context) (Position, error) {
	// The head: the first page from TRIM_HORIZON, of at most HeadLimit
	// records. At the tip (or at T0) it is the whole answer, by the full
	// scan's own rule: its last record, or TRIM_HORIZON when it holds none.
	s.stats.Probes++
	head, ok, tip, err := s.readToTip(ctx, TrimHorizon(), s.cfg.HeadLimit, true)
	if err != nil {
		return Position{}, err
	}
	switch {
	case !ok:
		return TrimHorizon(), nil
	case tip:
		return AfterSequence(head.seq), nil
	case !head.haveTS:
		// No arrival times: nothing to search on.
		return s.fullScan(ctx)
	}
	if !s.haveAt {
		anchor, err := s.search(ctx, head)
		if err != nil {
			return Position{}, err
		}
		// Read from the anchor to the tip. The anchor was seen, so this
		// read sees at least the anchor, and the last record it sees is
		// the tip.
		last, ok, _, err := s.readToTip(ctx, AtSequence(anchor.seq), s.cfg.PageLimit, false)
		if err != nil {
			return Position{}, err
		}
		if !ok {
			// The anchor expired between the probe and the read; start
			// over from the oldest retained record.
			return s.fullScan(ctx)
		}
		return AfterSequence(last.seq), nil
	}
	anchor := head
	for {
		anchor, err = s.search(ctx, anchor)
		if err != nil {
			return Position{}, err
		}
		last, ok, again, err := s.readFrom(ctx, anchor)
		switch {
		case err != nil:
			return Position{}, err
		case !ok:
			// The anchor expired between the probe and the read.
			return s.fullScan(ctx)
		case !again:
			return AfterSequence(last.seq), nil
		}
		// A record before T0 and past a time a probe found empty: that
		// answer was wrong (an unanswered probe on an endpoint that does
		// answer). Search again from that record, so a wrong answer
		// costs one page, never the rest of the history.
		anchor = last
	}
}

// search returns a record a probe has seen, as close before T0 (before the
// tip, without T0) as the probes can tell, starting from the anchor, a
// record already seen. It sets s.hi to the earliest time a probe found no
// record at or after (before T0, with T0): the zero time when none did.
func (s *shardScan) search(ctx context.Context, anchor record) (record, error) {
	// Invariant: anchor is a record a probe has seen, and lo is a time at
	// or before which it is known that some record exists at or after lo
	// (the anchor). If haveHi, a probe at hi found no record at or after
	// hi (before T0) when it ran.
	s.control = controlAt(anchor)
	lo := ms(anchor.ts)
	var hi time.Time
	haveHi := false
	// Gallop backwards from the top (T0, or now) until a window holds a
	// record, or the window reaches the anchor. With T0 the first probe
	// is one window before it: no record at or after T0 counts.
	top, w := ms(s.now()), time.Duration(0)
	if s.haveAt {
		top, hi, haveHi, w = s.at, s.at, true, s.cfg.InitialWindow
	}
	for t := top.Add(-w); t.After(lo); t = top.Add(-w) {
		r, found, err := s.probe(ctx, AtTimestamp(t))
		if err != nil {
			return record{}, err
		}
		if found {
			anchor, lo = r, later(t, r)
			s.control = controlAt(anchor)
			break
		}
		hi, haveHi = t, true
		switch g := grow(w); {
		case w == 0:
			w = s.cfg.InitialWindow
		case g > w:
			w = g
		default:
			// Grown to maxWindow, and the anchor is further back: the
			// same probe again would find nothing again, for ever.
			w = top.Sub(lo)
		}
		if w > top.Sub(lo) {
			// The next window would reach past the anchor.
			w = top.Sub(lo)
		}
	}

	// Without T0, records at or after "now": this host's clock is behind
	// Kinesis, or records are arriving. Gallop forwards until a probe
	// finds none.
	for i, w := 0, s.cfg.InitialWindow; !haveHi && i < maxGallop; i, w = i+1, grow(w) {
		t := lo.Add(w)
		r, found, err := s.probe(ctx, AtTimestamp(t))
		if err != nil {
			return record{}, err
		}
		if !found {
			hi, haveHi = t, true
			break
		}
		anchor, lo = r, later(t, r)
		s.control = controlAt(anchor)
	}

	// Bisect on time until the window is narrow enough to read.
	for haveHi && hi.Sub(lo) > s.cfg.Resolution {
		mid := lo.Add((hi.Sub(lo) / 2).Truncate(time.Millisecond))
		r, found, err := s.probe(ctx, AtTimestamp(mid))
		if err != nil {
			return record{}, err
		}
		if !found {
			hi = mid
			continue
		}
		anchor, lo = r, later(mid, r)
		s.control = controlAt(anchor)
		if !lo.Before(hi) {
			// The record arrived after the probe at hi found nothing:
			// without T0 the tip is moving; with T0 that probe was
			// wrong. Either way, read forward from it.
			break
		}
	}
	s.hi = time.Time{}
	if haveHi {
		s.hi = hi
	}
	return anchor, nil
}

// readFrom reads from the anchor, a page at a time, to T0 or the tip, and
// returns the last record before T0 it saw (the anchor at least, unless it
// expired: then ok is false). If a page ends at a record that arrived at or
// after s.hi (and before T0), a probe's "nothing there" was wrong: readFrom
// stops at that record and reports again.
func (s *shardScan) readFrom(ctx context.Context, anchor record) (last record, ok, again bool, err error) {
	from := AtSequence(anchor.seq)
	for {
		r, seen, tip, err := s.readToTip(ctx, from, s.cfg.PageLimit, true)
		if err != nil {
			return record{}, false, false, err
		}
		if !seen {
			// onePage returns without a record only at the tip.
			return last, ok, false, nil
		}
		last, ok, from = r, true, AfterSequence(r.seq)
		if tip {
			return last, true, false, nil
		}
		if !s.hi.IsZero() && s.hi.Before(s.at) && r.haveTS && !ms(r.ts).Before(s.hi) && r.seq != anchor.seq {
			return last, true, true, nil
		}
	}
}

// probe reports the first record at or after start (and before T0),
// following empty pages until a record or the tip; found is false when it
// reached the tip (or T0) without a record, which proves no record is at or
// after start (and before T0).
func (s *shardScan) probe(ctx context.Context, start Position) (record, bool, error) {
	s.stats.Probes++
	r, found, _, err := s.readToTip(ctx, start, 1, true)
	if err != nil && start.Kind == KindAtTimestamp && isFutureTimestamp(err) {
		// Kinesis refuses AT_TIMESTAMP after its own clock: no record
		// can be at or after a time that has not come yet.
		return record{}, false, nil
	}
	if err != nil && errors.Is(err, errUnanswered) {
		// The endpoint answers, but not this probe: it has no record at
		// or after start (kinesalite). If that was wrong, readFrom sees
		// it and the search starts over.
		s.stats.Unanswered++
		return record{}, false, nil
	}
	return r, found, err
}

// readToTip reads the shard from start until the tip: a page with
// MillisBehindLatest == 0 that is not full, or the end of a closed shard.
// Empty pages before it are followed. It returns the last record seen and
// whether there was one. With onePage set, it stops at the first page that
// holds records, and reports whether that page was at the tip. Only one page
// is held at a time.
func (s *shardScan) readToTip(ctx context.Context, start Position, limit int32, onePage bool) (last record, seen, tip bool, err error) {
	expired := 0
	iter, err := s.iterator(ctx, start)
	if err != nil {
		return record{}, false, false, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return record{}, false, false, err
		}
		if iter == "" {
			// No iterator from start or from the renewal: a closed
			// shard's end, the tip whichever strategy asked. Every read
			// starts before the first record at or after T0 (a time
			// before T0, or a record before it), so no such record
			// exists.
			s.ended = true
			return last, seen, true, nil
		}
		out, err := s.getRecords(ctx, iter, limit)
		if err != nil {
			if !kerr.IsExpiredIterator(err) || expired >= s.cfg.Retries {
				return record{}, false, false, err
			}
			// Re-acquire after the last record seen, or at the start.
			expired++
			s.stats.Retries++
			s.retryHook("GetRecords", expired, err, 0)
			resume := start
			if seen {
				resume = AfterSequence(last.seq)
			}
			if iter, err = s.iterator(ctx, resume); err != nil {
				return record{}, false, false, err
			}
			continue
		}
		expired = 0
		for i := range out.Records {
			rec := &out.Records[i]
			s.stats.Records++
			s.stats.Bytes += int64(len(rec.Data)) + int64(len(aws.ToString(rec.PartitionKey)))
		}
		// With T0, the first record that arrived at or after it ends the
		// read as the tip would: it and every later record are after the
		// start.
		recs := s.beforeAt(out.Records)
		// The tip: T0, the end of a closed shard, or a page that is not
		// full and is not behind.
		atT0 := len(recs) < len(out.Records)
		if !atT0 && out.NextShardIterator == nil {
			s.ended = true // as for an empty iterator above
		}
		tip = atT0 || out.NextShardIterator == nil ||
			len(out.Records) < int(limit) && out.MillisBehindLatest != nil && *out.MillisBehindLatest == 0
		if n := len(recs); n > 0 {
			rec := &recs[n-1]
			if rec.SequenceNumber == nil {
				return record{}, false, false, fmt.Errorf("%w: GetRecords returned a record without a sequence number", kerr.ErrOddAnswer)
			}
			if err := ValidateSequence(*rec.SequenceNumber); err != nil {
				return record{}, false, false, fmt.Errorf("%w: GetRecords returned a record with a sequence number that is not one: %w", kerr.ErrOddAnswer, err)
			}
			last = record{seq: *rec.SequenceNumber}
			if rec.ApproximateArrivalTimestamp != nil {
				last.ts, last.haveTS = *rec.ApproximateArrivalTimestamp, true
			}
			seen = true
			if onePage {
				return last, true, tip, nil
			}
		}
		if tip {
			return last, seen, true, nil
		}
		iter = *out.NextShardIterator
	}
}

func (s *shardScan) iterator(ctx context.Context, p Position) (string, error) {
	in, err := p.IteratorInput(s.stream, s.shard)
	if err != nil {
		return "", err
	}
	var out *kinesis.GetShardIteratorOutput
	if p.Kind == KindAtTimestamp && s.control.Kind != 0 {
		out, err = s.probeIterator(ctx, in)
	} else {
		err = s.call(ctx, "GetShardIterator", func(ctx context.Context) (err error) {
			out, err = s.client.GetShardIterator(ctx, in, noSDKRetries)
			if err == nil && out == nil {
				err = fmt.Errorf("%w: GetShardIterator returned no output and no error", kerr.ErrOddAnswer)
			}
			return err
		})
	}
	if err != nil {
		return "", fmt.Errorf("GetShardIterator %s: %w", p, err)
	}
	s.observe(out.ResultMetadata)
	// A null iterator: the shard is closed and nothing is left to read
	// from p (closed during the scan); readToTip takes it as the tip.
	return aws.ToString(out.ShardIterator), nil
}

func (s *shardScan) getRecords(ctx context.Context, iter string, limit int32) (*kinesis.GetRecordsOutput, error) {
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(limit)}
	var out *kinesis.GetRecordsOutput
	err := s.call(ctx, "GetRecords", func(ctx context.Context) (err error) {
		out, err = s.client.GetRecords(ctx, in, noSDKRetries)
		if err == nil && out == nil {
			err = fmt.Errorf("%w: GetRecords returned no output and no error", kerr.ErrOddAnswer)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("GetRecords: %w", err)
	}
	s.observe(out.ResultMetadata)
	return out, nil
}

// call makes one paced Kinesis call with its own timeout, retrying
// retryable errors with backoff. Throttling does not count against
// Config.Retries: it is retried while ctx (the batch deadline) allows,
// since it means the shard works and is busy. It never retries once ctx
// has ended.
func (s *shardScan) call(ctx context.Context, op string, f func(context.Context) error) error {
	failures, throttles := 0, 0
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.pace(ctx, op); err != nil {
			return err
		}
		s.stats.Calls++
		err := s.attempt(ctx, f)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		n := 0
		if kerr.IsThrottled(err) {
			throttles++
			n = throttles
		} else {
			failures++
			n = failures
		}
		if failures > s.cfg.Retries || !kerr.IsRetryable(err) {
			if attempt > 1 {
				return fmt.Errorf("after %d attempts: %w", attempt, err)
			}
			return err
		}
		d := s.backoff(n)
		s.stats.Retries++
		s.retryHook(op, attempt, err, d)
		if serr := s.cfg.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("waiting to retry after %v: %w", err, serr)
		}
	}
}

// attempt makes one call under its own timeout.
func (s *shardScan) attempt(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	return f(ctx)
}

// backoff returns the wait after the given failed attempt (from 1).
func (s *shardScan) backoff(attempt int) time.Duration {
	b := s.cfg.Backoff
	d := b[min(attempt-1, len(b)-1)]
	if s.cfg.Jitter > 0 && d > 0 {
		d += time.Duration(rand.Float64() * s.cfg.Jitter * float64(d))
	}
	return d
}

func (s *shardScan) retryHook(op string, attempt int, err error, d time.Duration) {
	for _, h := range []func(RetryEvent){s.cfg.Hooks.Retry, s.retry} {
		if h != nil {
			h(RetryEvent{Stream: s.stream, Shard: s.shard, Op: op, Attempt: attempt, Err: err, Backoff: d})
		}
	}
}

// observe records the server time of a real response (its HTTP Date). The
// Date has whole seconds: when this host's clock is within that second, the
// clocks agree and this host's, which is finer, is kept.
func (s *shardScan) observe(md middleware.Metadata) {
	t, ok := ServerTime(md)
	if !ok {
		return
	}
	local := s.cfg.Now()
	if d := local.Sub(t); d >= 0 && d < time.Second {
		t = local
	}
	s.serverAt, s.localAt, s.haveServer = t, local, true
}

// now estimates Kinesis's clock: the last server time seen plus the time
// elapsed here since, or this host's clock when no response carried one.
func (s *shardScan) now() time.Time {
	if s.haveServer {
		return s.serverAt.Add(s.cfg.Now().Sub(s.localAt))
	}
	return s.cfg.Now()
}

// isFutureTimestamp reports whether err is Kinesis refusing an AT_TIMESTAMP
// iterator because the time is after its own clock: "The timestampInMillis
// parameter cannot be greater than the currentTimestampInMillis" from AWS,
// "Timestamp cannot be in the future" from kinesis-mock.
func isFutureTimestamp(err error) bool {
	var e *types.InvalidArgumentException
	if !errors.As(err, &e) {
		return false
	}
	m := strings.ToLower(e.ErrorMessage())
	return strings.Contains(m, "timestamp") && (strings.Contains(m, "greater than") || strings.Contains(m, "future"))
}

// ms truncates t to the millisecond, the precision of Kinesis arrival times.
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond).Round(0) }

// later returns the later of a probe time t and the arrival time of the
// record the probe found.
func later(t time.Time, r record) time.Time {
	if r.haveTS && ms(r.ts).After(t) {
		return ms(r.ts)
	}
	return t
}
