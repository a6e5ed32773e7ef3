package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// Defaults of readerConfig, used where a field is zero.
const (
	readerDefaultLimit       = 10000
	readerDefaultMinInterval = 200 * time.Millisecond // 5 GetRecords calls/s per shard
	readerDefaultIdleWait    = time.Second
	readerDefaultCallTimeout = 30 * time.Second
	readerDefaultReadBytes   = 2 << 20 // 2 MiB/s read per shard
)

// Kinesis counts a shard's GetRecords calls per second where it serves
// them, after the network's delay: besides minInterval between two calls,
// any readerCallWindow+1 calls in a row are kept readerCallWindow times
// minInterval plus readerCallMargin apart, counted from when Kinesis
// served the first (estimated from its answer: backoff.NewWindowPacer), so
// that a call delayed on its way does not put six calls in Kinesis's
// second; the margin covers what the estimate cannot see (the way back).
// It costs at most a fifth of itself per call (0.6 ms in 200 ms: 0.3% of
// the rate), and less when the calls are spaced further anyway.
const (
	readerCallWindow = 5
	readerCallMargin = 3 * time.Millisecond
)

// readerDefaultRetry is the backoff between tries of a call that failed
// with a retryable error other than throttling: about 1 s, 2 s, 4 s, 8 s.
var readerDefaultRetry = backoff.Policy{Base: time.Second, Max: 30 * time.Second, Jitter: backoff.EqualJitter}

// readerDefaultThrottle is the backoff after a throttled call: about
// 0.5 s, 1 s, 2 s, ... up to 10 s.
var readerDefaultThrottle = backoff.Policy{Base: 500 * time.Millisecond, Max: 10 * time.Second, Jitter: backoff.EqualJitter}

// readerConfig configures a reader. Zero fields take the defaults above.
type readerConfig struct {
	client        scan.Client
	stream, shard string
	// start is where reading begins: TRIM_HORIZON, AT_TIMESTAMP,
	// AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER. LATEST must have been
	// resolved before a shard is read, and SHARD_END has nothing to read:
	// both are refused.
	start scan.Position
	// limit is the GetRecords Limit, 1 to 10000. Default 10000.
	limit int32
	// minInterval is the least time between two GetRecords calls of this
	// shard. Default 200 ms: Kinesis serves 5 calls per second per shard.
	minInterval time.Duration
	// readBytesPerSecond paces reads by size as well: after a page of n
	// bytes (data plus partition keys) the next call waits n divided by
	// this rate, so that a shard is not throttled for its 2 MiB/s read
	// limit. Default 2 MiB; negative switches it off.
	readBytesPerSecond int64
	// tipPages sends an empty page at the tip of an open shard too
	// (Config.StopAt decides on them: stopat.go).
	tipPages bool
	// idleWait is the wait after an empty page at the tip of an open
	// shard (MillisBehindLatest 0). Default 1 s.
	idleWait time.Duration
	// callTimeout bounds every Kinesis call. Default 30 s.
	callTimeout time.Duration
	// confirm, when set, is called after every iterator (or subscription)
	// is got, before it is read: it returns an error when the stream is no
	// longer the one the progress is of (see session.confirmIdentity).
	confirm func(context.Context) error
	// maxAttempts bounds the tries of one call that keeps failing with a
	// retryable error other than throttling (a 5xx, a timeout, a reset
	// connection), and the iterator renewals in a row that are followed by
	// another expiry (Config.KinesisMaxAttempts). Default 0: unlimited
	// while ctx lives; an outage is waited out.
	maxAttempts int
	// maxThrottles bounds the retries of one call that keeps being
	// throttled. Default 0: unlimited while ctx lives. Throttling means the
	// shard works but is over its budget (often shared with other
	// consumers); it clears by itself, and stopping the Loader for it
	// would turn load into an outage. Every throttle is reported to
	// onThrottle.
	maxThrottles int
	// retry and throttle are the backoff policies for the two kinds of
	// failure. Zero Base means the defaults above.
	retry, throttle backoff.Policy
	// clock tells time and sleeps: backoff, pacing and idle waits. Default
	// the real clock.
	clock backoff.Clock
	// buffer, shared by every reader of a Loader, bounds the bytes of the
	// pages they hold: each GetRecords call first reserves maxPage, the
	// most a page can cost, and gives back what its page did not use; the
	// page's share goes with it (page.held) and its consumer gives it back.
	// Nil means no bound.
	buffer *budget
	// maxPage is what a GetRecords call reserves from buffer. Default
	// maxPageBytes plus limit times recordOverhead.
	maxPage int64
	// hooks, any of which may be nil.
	hooks readerHooks
}

// readerHooks report what a reader does. They are called synchronously
// from the reader's goroutine and must be fast.
type readerHooks struct {
	// onThrottle is called when op was throttled, before waiting wait;
	// attempt counts the throttles of this call so far, from 1.
	onThrottle func(shard, op string, attempt int, wait time.Duration, err error)
	// onRetry is called when op failed with a retryable error, before
	// waiting wait and making try number attempt+1 (attempt counts the
	// failed tries so far, from 1).
	onRetry func(shard, op string, attempt int, wait time.Duration, err error)
	// onIteratorRenewed is called after an expired iterator was replaced
	// by a new one at from.
	onIteratorRenewed func(shard string, from scan.Position)
	// onFetch is called after every GetRecords call that returned a page,
	// empty or not. bytes counts data plus partition keys.
	onFetch func(shard string, records int, bytes int64, millisBehind int64)
}

// page is one non-empty GetRecords page, or the page that ends a closed
// shard.
type page struct {
	records []types.Record
	// millisBehind is the page's MillisBehindLatest.
	millisBehind int64
	// end says the shard is closed and this page ends it (records may be
	// empty); nothing follows.
	end bool
	// children are the ChildShards of the end page: a hint to be
	// confirmed with ListShards.
	children []types.ChildShard
	// held is the page's share of the reader's buffer budget, which its
	// receiver gives back once done with the records.
	held int64
	// asked is when the call that answered the page was made (a fan-out
	// event: when it was received), on this host's monotonic clock (the
	// order of two moments, whatever WithClock says): an empty page
	// at the tip asked before Kinesis's clock passed Config.StopAt says
	// nothing of what arrived since (the reader holds a page ahead).
	asked time.Time
}

// reader reads one shard from a start position, in order, and hands the
// pages to a consumer. Make one with newReader; it is used once, by one
// goroutine.
type reader struct {
	cfg   readerConfig
	pacer *backoff.Pacer
}

// newReader checks cfg, fills in its defaults and returns a reader.
func newReader(cfg readerConfig) (*reader, error) {
	where := fmt.Sprintf("stream %s shard %s", cfg.stream, cfg.shard)
	switch {
	case cfg.client == nil:
		return nil, fmt.Errorf("kinesisload: reader for %s: no Kinesis client", where)
	case cfg.stream == "":
		return nil, fmt.Errorf("kinesisload: reader for shard %s: empty stream name", cfg.shard)
	case cfg.shard == "":
		return nil, fmt.Errorf("kinesisload: reader for stream %s: empty shard ID", cfg.stream)
	case cfg.limit < 0 || cfg.limit > readerDefaultLimit:
		return nil, fmt.Errorf("kinesisload: reader for %s: GetRecords limit %d is not between 1 and %d", where, cfg.limit, readerDefaultLimit)
	}
	switch cfg.start.Kind {
	case scan.KindLatest:
		return nil, fmt.Errorf("kinesisload: reader for %s: start position LATEST must be resolved into a concrete position before the shard is read: %w", where, scan.ErrInvalidPosition)
	case scan.KindShardEnd:
		return nil, fmt.Errorf("kinesisload: reader for %s: start position SHARD_END: the shard is complete and has nothing to read: %w", where, scan.ErrInvalidPosition)
	}
	if err := cfg.start.Validate(); err != nil {
		return nil, fmt.Errorf("kinesisload: reader for %s: start position: %w", where, err)
	}
	if cfg.limit == 0 {
		cfg.limit = readerDefaultLimit
	}
	if cfg.minInterval <= 0 {
		cfg.minInterval = readerDefaultMinInterval
	}
	if cfg.readBytesPerSecond == 0 {
		cfg.readBytesPerSecond = readerDefaultReadBytes
	}
	if cfg.idleWait <= 0 {
		cfg.idleWait = readerDefaultIdleWait
	}
	if cfg.callTimeout <= 0 {
		cfg.callTimeout = readerDefaultCallTimeout
	}
	if cfg.maxAttempts < 0 {
		cfg.maxAttempts = 0
	}
	if cfg.maxThrottles < 0 {
		cfg.maxThrottles = 0
	}
	if cfg.retry.Base <= 0 {
		cfg.retry = withRand(readerDefaultRetry, cfg.retry.Rand)
	}
	if cfg.throttle.Base <= 0 {
		cfg.throttle = withRand(readerDefaultThrottle, cfg.throttle.Rand)
	}
	if cfg.clock == nil {
		cfg.clock = backoff.System{}
	}
	if cfg.maxPage <= 0 {
		cfg.maxPage = maxPageBytes + int64(cfg.limit)*recordOverhead
	}
	pacer := backoff.NewWindowPacer(cfg.minInterval, readerCallWindow, readerCallMargin, cfg.clock)
	return &reader{cfg: cfg, pacer: pacer}, nil
}

func withRand(p backoff.Policy, rand func() float64) backoff.Policy {
	p.Rand = rand
	return p
}

// run reads the shard from the start position and sends every non-empty
// page on out, in shard order. Empty pages are followed, not sent, except
// the page that ends a closed shard. The next GetRecords call is made as
// soon as a page has been handed over, so with an unbuffered out one page
// is fetched while the consumer works on the previous one; each unit of
// out's capacity holds one more page in memory.
//
// The end of a shard is believed only when it is confirmed: an answer
// without NextShardIterator that carries ChildShards, or one that ListShards
// backs by listing the shard closed. An answer that claims the end of a
// shard ListShards lists as open, or no output at all, is an odd answer:
// retried like a transient error (reported to onRetry), never taken as the
// end.
//
// run returns nil after it sent the end page of a closed shard; ctx.Err()
// when ctx ends (it never blocks on a send once ctx is done); and an error
// naming the stream and shard, wrapping the Kinesis error, for a
// non-retryable failure or when retries are exhausted.
//
// It stays within minInterval between GetRecords calls, waits idleWait
// after an empty page at the tip of an open shard, backs off with jitter
// on throttling and retryable errors, and replaces an expired iterator by
// one just after the last record it sent (or at the start position if it
// sent none), so that nothing is skipped and nothing repeated.
func (r *reader) run(ctx context.Context, out chan<- page) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	iter, err := r.iterator(ctx, r.cfg.start)
	if err != nil {
		return err
	}
	var last string // sequence number of the last record sent on out
	expired := 0    // expiries since the last page
	odd := 0        // unconfirmed shard ends in a row
	// renew replaces the iterator after an answer that claimed an end
	// ListShards does not confirm: just after the last record sent, or at
	// the start position if none was sent, after a backoff.
	renew := func(claim error) (string, error) {
		odd++
		if m := r.cfg.maxAttempts; m > 0 && odd >= m {
			return "", r.errorf("GetRecords", "%d answers in a row claimed the end of a shard that ListShards lists as open: %w", odd, claim)
		}
		wait := r.cfg.retry.Delay(odd)
		if h := r.cfg.hooks.onRetry; h != nil {
			h(r.cfg.shard, "GetRecords", odd, wait, claim)
		}
		if err := r.cfg.clock.Sleep(ctx, wait); err != nil {
			return "", err
		}
		from := r.cfg.start
		if last != "" {
			from = scan.AfterSequence(last)
		}
		return r.iterator(ctx, from)
	}
	for {
		if iter == "" {
			// GetShardIterator gave no iterator: Kinesis documents that
			// for a closed shard already read to its end. Believe it only
			// when ListShards shows the shard closed. ChildShards come
			// only with GetRecords; ListShards has them too.
			closed, err := r.closed(ctx)
			if err != nil {
				return err
			}
			if closed {
				return r.send(ctx, out, page{end: true})
			}
			if iter, err = renew(fmt.Errorf("%w: GetShardIterator returned no iterator", kerr.ErrOddAnswer)); err != nil {
				return err
			}
			continue
		}
		res, held, asked, err := r.getRecords(ctx, iter)
		if err != nil {
			if !kerr.IsExpiredIterator(err) || ctx.Err() != nil {
				return err
			}
			expired++
			if m := r.cfg.maxAttempts; m > 0 && expired > m {
				return r.errorf("GetRecords", "iterator expired %d times in a row, even right after it was renewed: %w", expired, err)
			}
			if expired > 1 {
				// Expired again right after a renewal: something is
				// wrong for now (a clock, the service); back off
				// before the next renewal.
				wait := r.cfg.retry.Delay(expired - 1)
				if h := r.cfg.hooks.onRetry; h != nil {
					h(r.cfg.shard, "GetRecords", expired-1, wait, err)
				}
				if err := r.cfg.clock.Sleep(ctx, wait); err != nil {
					return err
				}
			}
			from := r.cfg.start
			if last != "" {
				from = scan.AfterSequence(last)
			}
			if iter, err = r.iterator(ctx, from); err != nil {
				return err
			}
			if h := r.cfg.hooks.onIteratorRenewed; h != nil {
				h(r.cfg.shard, from)
			}
			continue
		}
		expired = 0
		if err := checkRecords(res.Records, last); err != nil {
			r.cfg.buffer.release(held)
			if iter, err = renew(err); err != nil {
				return err
			}
			continue
		}

		// No NextShardIterator claims the end of a closed shard. The claim
		// is confirmed by ChildShards in the answer, or by ListShards
		// showing the shard closed; an open shard's end is never believed.
		next := aws.ToString(res.NextShardIterator)
		end := false
		if next == "" {
			if end = len(res.ChildShards) > 0; !end {
				if end, err = r.closed(ctx); err != nil {
					r.cfg.buffer.release(held)
					return err
				}
			}
		}
		behind := aws.ToInt64(res.MillisBehindLatest)
		if len(res.Records) > 0 || end || r.cfg.tipPages && behind == 0 {
			p := page{records: res.Records, millisBehind: behind, end: end, held: held, asked: asked}
			if end {
				p.children = res.ChildShards
			}
			if err := r.send(ctx, out, p); err != nil {
				r.cfg.buffer.release(held)
				return err
			}
			if n := len(res.Records); n > 0 {
				last = aws.ToString(res.Records[n-1].SequenceNumber)
			}
		} else {
			r.cfg.buffer.release(held)
		}
		if end {
			return nil
		}
		if next == "" {
			if iter, err = renew(fmt.Errorf("%w: GetRecords returned no NextShardIterator and no ChildShards", kerr.ErrOddAnswer)); err != nil {
				return err
			}
			continue
		}
		odd = 0
		iter = next
		if len(res.Records) == 0 && behind == 0 {
			// At the tip of an open shard: nothing to read yet.
			if err := r.cfg.clock.Sleep(ctx, r.cfg.idleWait); err != nil {
				return err
			}
		}
	}
}

// closed asks ListShards whether the shard is closed (has an ending
// sequence number). A shard ListShards does not list is an error.
func (r *reader) closed(ctx context.Context) (bool, error) {
	var closed, listed bool
	err := r.do(ctx, "ListShards", false, func(ctx context.Context) error {
		shards, err := listShards(ctx, r.cfg.client, r.cfg.stream, r.cfg.callTimeout)
		if err != nil {
			return err
		}
		for _, s := range shards {
			if aws.ToString(s.ShardId) == r.cfg.shard {
				listed = true
				closed = shardClosed(s)
			}
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	if !listed {
		return false, r.errorf("ListShards", "the shard is not listed, so its end cannot be confirmed")
	}
	return closed, nil
}

// send hands p to the consumer, unless ctx ends first.
func (r *reader) send(ctx context.Context, out chan<- page, p page) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case out <- p:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// iterator gets a shard iterator at from. An empty iterator and no error
// claim that the shard is closed and nothing is left to read from there
// (Kinesis documents a null ShardIterator for that case); run confirms it.
func (r *reader) iterator(ctx context.Context, from scan.Position) (string, error) {
	in, err := from.IteratorInput(r.cfg.stream, r.cfg.shard)
	if err != nil {
		return "", r.errorf("GetShardIterator", "at %s: %w", from, err)
	}
	var it string
	err = r.do(ctx, "GetShardIterator", false, func(ctx context.Context) error {
		res, err := r.cfg.client.GetShardIterator(ctx, in, noSDKRetries)
		if err != nil {
			return err
		}
		if res == nil {
			return fmt.Errorf("%w: GetShardIterator returned no output and no error", kerr.ErrOddAnswer)
		}
		it = aws.ToString(res.ShardIterator)
		return nil
	})
	if ia, ok := errors.AsType[*types.InvalidArgumentException](err); ok &&
		(from.Kind == scan.KindAtSequence || from.Kind == scan.KindAfterSequence) {
		return "", r.errorf("GetShardIterator", "Kinesis refuses to resume at %s, the stored position: the sequence number is not one of this shard's. "+
			"The progress belongs to another stream: was the stream deleted and created again under the same name "+
			"(see Config.OnStreamRecreated), or the journal or the sink's checkpoints copied from another stream? (%w)", from, ia)
	}
	if err == nil && it != "" && r.cfg.confirm != nil {
		if err := r.cfg.confirm(ctx); err != nil {
			return "", err
		}
	}
	return it, err
}

// getRecords makes one paced GetRecords call, retrying throttling and
// retryable errors. An expired iterator is returned as is, for run to
// renew. It returns the page's share of the buffer budget, which the
// caller must give back, and when the call that answered was made.
func (r *reader) getRecords(ctx context.Context, iter string) (*kinesis.GetRecordsOutput, int64, time.Time, error) {
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(r.cfg.limit)}
	var res *kinesis.GetRecordsOutput
	var held int64
	var asked time.Time
	err := r.do(ctx, "GetRecords", true, func(cctx context.Context) error {
		// An earlier attempt's reservation (its answer was odd) is given
		// back before the next is made.
		r.cfg.buffer.release(held)
		held = 0
		if r.cfg.buffer != nil {
			// Reserve the largest page before the call, so that what the
			// Loader holds never exceeds the budget; the call's own
			// timeout starts once the reservation is granted.
			n, err := r.cfg.buffer.acquire(ctx, r.cfg.maxPage)
			if err != nil {
				return err
			}
			// The call is made now, perhaps well after the pacer let it
			// through (other shards held the budget): space the next
			// call, and count this page's hold, from now.
			r.pacer.Started()
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, r.cfg.callTimeout)
			defer cancel()
			held = n
		}
		asked = time.Now()
		out, err := r.cfg.client.GetRecords(cctx, in, noSDKRetries)
		r.pacer.Answered()
		if err != nil {
			return err
		}
		if out == nil {
			return fmt.Errorf("%w: GetRecords returned no output and no error", kerr.ErrOddAnswer)
		}
		res = out
		return nil
	})
	if err != nil {
		r.cfg.buffer.release(held)
		return nil, 0, time.Time{}, err
	}
	if r.cfg.buffer != nil {
		// Give back what the page did not use; a page larger than the
		// reservation (not from Kinesis, which caps pages) is counted.
		switch cost := pageCost(res.Records); {
		case cost < held:
			r.cfg.buffer.release(held - cost)
			held = cost
		case cost > held:
			r.cfg.buffer.force(cost - held)
			held = cost
		}
	}
	var bytes int64
	for i := range res.Records {
		bytes += int64(len(res.Records[i].Data) + len(aws.ToString(res.Records[i].PartitionKey)))
	}
	if rate := r.cfg.readBytesPerSecond; rate > 0 && bytes > 0 {
		// Round up, so the shard's read budget has refilled in full.
		r.pacer.Hold(time.Duration((bytes*int64(time.Second) + rate - 1) / rate))
	}
	if h := r.cfg.hooks.onFetch; h != nil {
		h(r.cfg.shard, len(res.Records), bytes, aws.ToInt64(res.MillisBehindLatest))
	}
	return res, held, asked, nil
}

// do calls fn, with the per-call timeout, until it succeeds, fails for
// good, or ctx ends. Throttling is retried with the throttle backoff (up to
// maxThrottles times if that is set), other retryable errors with the retry
// backoff (up to maxAttempts tries in all if that is set). An expired iterator is returned
// unwrapped. paced calls wait for the pacer before every try.
func (r *reader) do(ctx context.Context, op string, paced bool, fn func(context.Context) error) error {
	attempts, throttles := 0, 0
	for {
		if paced {
			if err := r.pacer.Wait(ctx); err != nil {
				return err
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.callTimeout)
		err := fn(cctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case kerr.IsExpiredIterator(err):
			return err
		case kerr.IsThrottled(err):
			throttles++
			if m := r.cfg.maxThrottles; m > 0 && throttles > m {
				return r.errorf(op, "still throttled after %d retries: %w", m, err)
			}
			wait := r.cfg.throttle.Delay(throttles)
			if h := r.cfg.hooks.onThrottle; h != nil {
				h(r.cfg.shard, op, throttles, wait, err)
			}
			if err := r.cfg.clock.Sleep(ctx, wait); err != nil {
				return err
			}
		case kerr.IsRetryable(err):
			attempts++
			if m := r.cfg.maxAttempts; m > 0 && attempts >= m {
				return r.errorf(op, "failed %d times, giving up: %w", attempts, err)
			}
			wait := r.cfg.retry.Delay(attempts)
			if h := r.cfg.hooks.onRetry; h != nil {
				h(r.cfg.shard, op, attempts, wait, err)
			}
			if err := r.cfg.clock.Sleep(ctx, wait); err != nil {
				return err
			}
		default:
			return r.errorf(op, "%w", err)
		}
	}
}

// errorf returns a [*RunError] of class [ErrKinesis] naming the stream,
// the shard and op.
func (r *reader) errorf(op, format string, args ...any) error {
	return &RunError{Stream: r.cfg.stream, Shard: r.cfg.shard, Op: op, Kind: ErrKinesis, Err: fmt.Errorf(format, args...)}
}
