package scan

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
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
}

// record is what a scan keeps of a record: never its payload.
type record struct {
	seq    string
	ts     time.Time
	haveTS bool
}

func (r *Resolver) resolveShard(ctx context.Context, req Request, shard string) (ShardResult, error) {
	s := &shardScan{cfg: &r.cfg, client: req.Client, stream: req.Stream, shard: shard, retry: req.Hooks.Retry}
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
		if err != nil && errors.Is(err, errProbeUnanswered) && ctx.Err() == nil {
			// An endpoint that never answers an AT_TIMESTAMP probe
			// (kinesalite past the last record) still has a tip: find it
			// the slow way, which is always correct.
			s.stats.FellBack = true
			pos, err = s.fullScan(ctx)
		}
	}
	if err != nil {
		return ShardResult{}, err
	}
	s.stats.Duration = r.cfg.Now().Sub(start)
	return ShardResult{Shard: shard, Position: pos, Stats: s.stats}, nil
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

// probeScan finds the neighbourhood of the last record with existence
// probes, then reads from a record a probe has seen to the tip. See the
// package documentation for why it returns what fullScan returns.
func (s *shardScan) probeScan(ctx context.Context) (Position, error) {
	// The head: the first page from TRIM_HORIZON, of at most HeadLimit
	// records. At the tip it is the whole shard, and the answer is the
	// full scan's by the same rule: its last record, or TRIM_HORIZON when
	// it holds none.
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
	// Invariant: anchor is a record a probe has seen, and lo is a time at
	// or before which it is known that some record exists at or after lo
	// (the anchor). If haveHi, a probe at hi found no record at or after
	// hi when it ran.
	anchor := head
	lo := ms(head.ts)
	var hi time.Time
	haveHi := false

	// Gallop backwards from now until a window holds a record, or the
	// window reaches the oldest record.
	now := ms(s.now())
	for t, w := now, s.cfg.InitialWindow; t.After(lo); t, w = now.Add(-w), grow(w) {
		r, found, err := s.probe(ctx, AtTimestamp(t))
		if err != nil {
			return Position{}, err
		}
		if found {
			anchor, lo = r, later(t, r)
			break
		}
		hi, haveHi = t, true
		if w > now.Sub(lo) {
			// The next window would reach past the oldest record.
			w = now.Sub(lo)
		}
	}

	// Records at or after "now": this host's clock is behind Kinesis, or
	// records are arriving. Gallop forwards until a probe finds none.
	for i, w := 0, s.cfg.InitialWindow; !haveHi && i < maxGallop; i, w = i+1, grow(w) {
		t := lo.Add(w)
		r, found, err := s.probe(ctx, AtTimestamp(t))
		if err != nil {
			return Position{}, err
		}
		if !found {
			hi, haveHi = t, true
			break
		}
		anchor, lo = r, later(t, r)
	}

	// Bisect on time until the window is narrow enough to read.
	for haveHi && hi.Sub(lo) > s.cfg.Resolution {
		mid := lo.Add((hi.Sub(lo) / 2).Truncate(time.Millisecond))
		r, found, err := s.probe(ctx, AtTimestamp(mid))
		if err != nil {
			return Position{}, err
		}
		if !found {
			hi = mid
			continue
		}
		anchor, lo = r, later(mid, r)
		if !lo.Before(hi) {
			// The record arrived after the probe at hi: the tip is
			// moving, so read forward from it.
			break
		}
	}

	// Read from the anchor to the tip. The anchor was seen, so this read
	// sees at least the anchor, and the last record it sees is the tip.
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

// probe reports the first record at or after start, following empty pages
// until a record or the tip; found is false when it reached the tip without
// a record, which proves no record is at or after start.
func (s *shardScan) probe(ctx context.Context, start Position) (record, bool, error) {
	s.stats.Probes++
	r, found, _, err := s.readToTip(ctx, start, 1, true)
	if err != nil && start.Kind == KindAtTimestamp && isFutureTimestamp(err) {
		// Kinesis refuses AT_TIMESTAMP after its own clock: no record
		// can be at or after a time that has not come yet.
		return record{}, false, nil
	}
	if err != nil && start.Kind == KindAtTimestamp && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return record{}, false, fmt.Errorf("%w: %w", errProbeUnanswered, err)
	}
	return r, found, err
}

// errProbeUnanswered marks a probe whose every attempt timed out.
var errProbeUnanswered = errors.New("AT_TIMESTAMP probe never answered")

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
			// shard's end, the tip whichever strategy asked.
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
		// The tip: the end of a closed shard, or a page that is not full
		// and is not behind.
		tip = out.NextShardIterator == nil ||
			len(out.Records) < int(limit) && out.MillisBehindLatest != nil && *out.MillisBehindLatest == 0
		if n := len(out.Records); n > 0 {
			rec := &out.Records[n-1]
			if rec.SequenceNumber == nil {
				return record{}, false, false, fmt.Errorf("GetRecords returned a record without a sequence number")
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
	err = s.call(ctx, "GetShardIterator", func(ctx context.Context) (err error) {
		out, err = s.client.GetShardIterator(ctx, in, noSDKRetries)
		if err == nil && out == nil {
			err = fmt.Errorf("%w: GetShardIterator returned no output and no error", kerr.ErrOddAnswer)
		}
		return err
	})
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
	t, ok := awsmiddleware.GetServerTime(md)
	if !ok || t.IsZero() {
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
