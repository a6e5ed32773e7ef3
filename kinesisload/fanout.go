package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// Defaults of fanoutConfig, used where a field is zero.
const (
	// fanoutDefaultRenewal is how long a subscription is read before it is
	// renewed: Kinesis ends one after 5 minutes.
	fanoutDefaultRenewal = 4*time.Minute + 30*time.Second
	// fanoutDefaultSubscribeInterval is the least time between two
	// SubscribeToShard calls of one shard: Kinesis takes one call per
	// second per consumer and shard.
	fanoutDefaultSubscribeInterval = time.Second
	// fanoutDefaultResubscribeWait is the least time after a successful
	// SubscribeToShard before the next one for the shard: Kinesis refuses
	// it with ResourceInUseException within 5 s.
	fanoutDefaultResubscribeWait = 5 * time.Second
)

// fanoutConfig configures a fanoutReader: a reader's configuration (the
// client serves ListShards, which confirms a shard's end) and the
// subscription's.
type fanoutConfig struct {
	readerConfig
	sub         Subscriber
	consumerARN string
	// consumerGone, if set, is called when Kinesis says consumerARN does
	// not exist (deregistered by hand) while the stream does: it returns
	// the ARN of the consumer looked up, or registered, again.
	consumerGone func(ctx context.Context, arn string) (string, error)
	// renewal is how long a subscription is read before it is closed and
	// a new one started where the last one left off. Default 4 m 30 s.
	renewal time.Duration
	// subscribeInterval and resubscribeWait pace SubscribeToShard calls
	// (see the defaults above).
	subscribeInterval, resubscribeWait time.Duration
	// closedCheck is the least time between two ListShards calls that ask
	// whether a shard whose subscription only sends empty events at the
	// tip is closed (Config.ListShardsInterval). Default 30 s.
	closedCheck time.Duration
}

// fanoutReader reads one shard through enhanced fan-out subscriptions and
// hands pages to a consumer exactly like [reader]: same pages, same
// confirmed end, same retries, same buffer budget. It is used once, by
// one goroutine.
type fanoutReader struct {
	*reader
	sub                                         Subscriber
	consumerARN                                 string
	consumerGone                                func(ctx context.Context, arn string) (string, error)
	renewal, subscribeInterval, resubscribeWait time.Duration
	closedCheck                                 time.Duration
}

// newFanoutReader checks cfg and fills in its defaults.
func newFanoutReader(cfg fanoutConfig) (*fanoutReader, error) {
	rd, err := newReader(cfg.readerConfig)
	if err != nil {
		return nil, err
	}
	if cfg.sub == nil {
		return nil, fmt.Errorf("kinesisload: fan-out reader for stream %s shard %s: the Kinesis client does not implement Subscriber", cfg.stream, cfg.shard)
	}
	if cfg.consumerARN == "" {
		return nil, fmt.Errorf("kinesisload: fan-out reader for stream %s shard %s: no consumer ARN", cfg.stream, cfg.shard)
	}
	r := &fanoutReader{reader: rd, sub: cfg.sub, consumerARN: cfg.consumerARN, consumerGone: cfg.consumerGone,
		renewal: cfg.renewal, subscribeInterval: cfg.subscribeInterval, resubscribeWait: cfg.resubscribeWait, closedCheck: cfg.closedCheck}
	if r.renewal <= 0 {
		r.renewal = fanoutDefaultRenewal
	}
	if r.subscribeInterval <= 0 {
		r.subscribeInterval = fanoutDefaultSubscribeInterval
	}
	if r.resubscribeWait <= 0 {
		r.resubscribeWait = fanoutDefaultResubscribeWait
	}
	if r.closedCheck <= 0 {
		r.closedCheck = DefaultListShardsInterval
	}
	return r, nil
}

// run reads the shard from the start position through subscriptions and
// sends every event with records on out, in shard order, as pages; the
// event that ends a closed shard (no ContinuationSequenceNumber) is sent
// as the end page, with its ChildShards. Its contract is [reader.run]'s:
// it returns nil after the end page, ctx.Err() when ctx ends, and a
// [*RunError] for what no retry fixes.
//
// A subscription is read until renewal has passed (it is then closed, so
// it never reaches Kinesis's 5 minutes) or it ends by itself; the next one
// starts AFTER_SEQUENCE_NUMBER of the furthest of the last record sent and
// the last ContinuationSequenceNumber of an event whose records were sent
// (or at the start position if there is neither), so nothing is skipped
// and nothing repeated. An event is taken from the subscription only once
// the previous page was handed over and its bytes fit the buffer budget:
// a slow consumer slows the subscription down rather than letting events
// pile up. Every subscription is closed before run returns.
func (r *fanoutReader) run(ctx context.Context, out chan<- page) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st := &fanoutState{}
	for {
		from := r.resume(st)
		sub, err := r.subscribe(ctx, st, from)
		if err != nil {
			return err
		}
		next, err := r.read(ctx, st, sub, out)
		sub.Close()
		switch {
		case err != nil || next == subscriptionEnded:
			return err
		case next == subscriptionIdleClosed:
			// The shard is closed, and the subscription has not said
			// so: read the rest by polling, which confirms the end.
			return r.pollRest(ctx, st, out)
		}
		if h := r.cfg.hooks.onIteratorRenewed; h != nil {
			h(r.cfg.shard, r.resume(st))
		}
	}
}

// pollRest reads the rest of a closed shard with GetRecords, from where
// the subscriptions left off.
func (r *fanoutReader) pollRest(ctx context.Context, st *fanoutState, out chan<- page) error {
	cfg := r.cfg
	cfg.start = r.resume(st)
	rd, err := newReader(cfg)
	if err != nil {
		return err
	}
	return rd.run(ctx, out)
}

// What read tells run to do next.
type subscriptionNext int

const (
	subscriptionRenew      subscriptionNext = iota // start a new subscription
	subscriptionEnded                              // the shard's end page was sent
	subscriptionIdleClosed                         // ListShards says closed; the subscription idles
)

// fanoutState is what run remembers across subscriptions.
type fanoutState struct {
	last     string    // sequence number of the last record sent on out
	cont     string    // the last continuation number whose records were sent
	lastCall time.Time // the last SubscribeToShard call
	lastOK   time.Time // the last successful one
	failures int       // failed subscriptions in a row
	checked  time.Time // the last ListShards asking whether the shard is closed
}

// resume returns where the next subscription starts.
func (r *fanoutReader) resume(st *fanoutState) scan.Position {
	switch {
	case st.last == "" && st.cont == "":
		return r.cfg.start
	case st.cont == "" || scan.CompareSequence(st.cont, st.last) < 0:
		return scan.AfterSequence(st.last)
	default:
		return scan.AfterSequence(st.cont)
	}
}

// subscribe starts a subscription at from, pacing the calls as Kinesis
// requires and retrying what is transient, as every Kinesis call of a
// consume loop is: throttling, 5xx, timeouts, and a ResourceInUseException
// (a previous subscription still counted, or the consumer not ACTIVE yet).
func (r *fanoutReader) subscribe(ctx context.Context, st *fanoutState, from scan.Position) (kinesis.SubscribeToShardEventStreamReader, error) {
	in, err := from.IteratorInput(r.cfg.stream, r.cfg.shard)
	if err != nil {
		return nil, r.errorf("SubscribeToShard", "at %s: %w", from, err)
	}
	pos := &types.StartingPosition{Type: in.ShardIteratorType, SequenceNumber: in.StartingSequenceNumber, Timestamp: in.Timestamp}
	inUse, goneTried := 0, false
	var inUseSince time.Time // the first ResourceInUseException of this call
	for {
		var es kinesis.SubscribeToShardEventStreamReader
		var cancelSub context.CancelFunc
		err := r.do(ctx, "SubscribeToShard", false, func(context.Context) error {
			// One call per second, none within 5 s of the last success:
			// every try, so do's retries after a throttle or a 5xx too.
			now := r.cfg.clock.Now()
			wait := time.Duration(0)
			if !st.lastCall.IsZero() {
				wait = max(wait, st.lastCall.Add(r.subscribeInterval).Sub(now))
			}
			if !st.lastOK.IsZero() {
				wait = max(wait, st.lastOK.Add(r.resubscribeWait).Sub(now))
			}
			if err := r.cfg.clock.Sleep(ctx, wait); err != nil {
				return err
			}
			st.lastCall = r.cfg.clock.Now()
			// The subscription outlives the call, so it gets a context of
			// its own, ended by the call's timeout only until it answers.
			sctx, cancel := context.WithCancel(ctx)
			timer := time.AfterFunc(r.cfg.callTimeout, cancel)
			got, err := r.sub.SubscribeToShard(sctx, &kinesis.SubscribeToShardInput{
				ConsumerARN: aws.String(r.consumerARN), ShardId: aws.String(r.cfg.shard), StartingPosition: pos}, noSDKRetries)
			if !timer.Stop() {
				// A timeout, retried as such: not the context.Canceled the
				// timer caused, which IsRetryable takes for the caller's.
				err = fmt.Errorf("%w: no answer within %s (%v)", context.DeadlineExceeded, r.cfg.callTimeout, err)
			}
			switch {
			case err == nil && got == nil:
				err = fmt.Errorf("%w: SubscribeToShard returned no event stream and no error", kerr.ErrOddAnswer)
			case err != nil && got != nil:
				got.Close()
			}
			if err != nil {
				cancel()
				return err
			}
			es, cancelSub = got, cancel
			return nil
		})
		if _, ok := errors.AsType[*types.ResourceInUseException](err); ok && ctx.Err() == nil {
			inUse++
			now := r.cfg.clock.Now()
			if inUseSince.IsZero() {
				inUseSince = now
			}
			// Kinesis refuses a subscription within 5 s of the last
			// successful one for the consumer and shard, whoever made it
			// (this loop before a Pause, a lost and retaken lease, the
			// host the shard was handed over from): refusals within that
			// window are expected, and do not count towards the bound.
			if m := r.cfg.maxAttempts; m > 0 && inUse >= m && now.Sub(inUseSince) >= r.resubscribeWait {
				return nil, r.errorf("SubscribeToShard", "refused %d times as in use: %w", inUse, err)
			}
			wait := r.cfg.retry.Delay(inUse)
			if h := r.cfg.hooks.onRetry; h != nil {
				h(r.cfg.shard, "SubscribeToShard", inUse, wait, err)
			}
			if err := r.cfg.clock.Sleep(ctx, wait); err != nil {
				return nil, err
			}
			continue
		}
		if _, ok := errors.AsType[*types.ResourceNotFoundException](err); ok && ctx.Err() == nil && r.consumerGone != nil && !goneTried {
			// The consumer is gone (the stream too, perhaps: then the
			// lookup fails as the stream's absence).
			goneTried = true
			arn, lerr := r.consumerGone(ctx, r.consumerARN)
			if lerr != nil {
				return nil, lerr
			}
			r.consumerARN = arn
			continue
		}
		if ia, ok := errors.AsType[*types.InvalidArgumentException](err); ok &&
			(from.Kind == scan.KindAtSequence || from.Kind == scan.KindAfterSequence) {
			return nil, r.errorf("SubscribeToShard", "Kinesis refuses to resume at %s, the stored position: the sequence number is not one of this shard's. "+
				"The progress belongs to another stream: was the stream deleted and created again under the same name "+
				"(see Config.OnStreamRecreated), or the journal or the sink's checkpoints copied from another stream? (%w)", from, ia)
		}
		if err != nil {
			return nil, err
		}
		st.lastOK = st.lastCall
		if r.cfg.confirm != nil {
			if err := r.cfg.confirm(ctx); err != nil {
				es.Close()
				cancelSub()
				return nil, err
			}
		}
		return subscription{es, cancelSub}, nil
	}
}

// subscription is a subscription's event stream whose Close also ends
// the context it was started with.
type subscription struct {
	kinesis.SubscribeToShardEventStreamReader
	cancel context.CancelFunc
}

// Close ends the stream's context and closes it.
func (s subscription) Close() error {
	s.cancel()
	return s.SubscribeToShardEventStreamReader.Close()
}

// read reads one subscription until it must be renewed, the shard ends,
// the subscription idles at the tip of a shard ListShards lists as closed
// (some implementations never send the end event), or a failure no retry
// fixes (the error).
func (r *fanoutReader) read(ctx context.Context, st *fanoutState, sub kinesis.SubscribeToShardEventStreamReader, out chan<- page) (subscriptionNext, error) {
	renew, stopTimer := r.after(ctx, r.renewal)
	defer stopTimer()
	deadline := r.cfg.clock.Now().Add(r.renewal)
	events := sub.Events()
	for {
		var ev types.SubscribeToShardEventStream
		var ok bool
		select {
		case ev, ok = <-events:
		case <-renew:
			return subscriptionRenew, nil
		case <-ctx.Done():
			return subscriptionRenew, ctx.Err()
		}
		if !ok {
			return subscriptionRenew, r.ended(ctx, st, sub.Err())
		}
		e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !isEvent {
			continue // an event type this SDK does not know: nothing to read in it
		}
		received := time.Now() // monotonic: see page.asked
		v := e.Value
		held, err := r.hold(ctx, v.Records)
		if err != nil {
			return subscriptionRenew, err
		}
		if err := checkRecords(v.Records, st.last); err != nil {
			r.cfg.buffer.release(held)
			return subscriptionRenew, r.ended(ctx, st, err)
		}
		if c := v.ContinuationSequenceNumber; c != nil && scan.ValidateSequence(*c) != nil {
			r.cfg.buffer.release(held)
			return subscriptionRenew, r.ended(ctx, st, fmt.Errorf("%w: a SubscribeToShard event's ContinuationSequenceNumber %q is not a sequence number", kerr.ErrOddAnswer, *c))
		}
		var bytes int64
		for i := range v.Records {
			bytes += int64(len(v.Records[i].Data) + len(aws.ToString(v.Records[i].PartitionKey)))
		}
		behind := aws.ToInt64(v.MillisBehindLatest)
		if h := r.cfg.hooks.onFetch; h != nil {
			h(r.cfg.shard, len(v.Records), bytes, behind)
		}
		// No continuation claims the end of a closed shard: confirmed by
		// ChildShards, or by ListShards, as in polling mode.
		end := false
		if v.ContinuationSequenceNumber == nil {
			if end = len(v.ChildShards) > 0; !end {
				if end, err = r.closed(ctx); err != nil {
					r.cfg.buffer.release(held)
					return subscriptionRenew, err
				}
			}
			if !end {
				r.cfg.buffer.release(held)
				return subscriptionRenew, r.ended(ctx, st, fmt.Errorf("%w: a SubscribeToShard event had no ContinuationSequenceNumber and no ChildShards, for a shard ListShards lists as open", kerr.ErrOddAnswer))
			}
		}
		// A good event: the subscriptions that ended with an error (or
		// with an odd event) in a row are over. Not before the checks, or
		// an odd event would reset the count it adds to, and
		// KinesisMaxAttempts never bound it.
		st.failures = 0
		if len(v.Records) > 0 || end || r.cfg.tipPages && behind == 0 {
			p := page{records: v.Records, millisBehind: behind, end: end, held: held, asked: received}
			if end {
				p.children = v.ChildShards
			}
			if err := r.send(ctx, out, p); err != nil {
				r.cfg.buffer.release(held)
				return subscriptionRenew, err
			}
			if n := len(v.Records); n > 0 {
				st.last = aws.ToString(v.Records[n-1].SequenceNumber)
			}
		} else {
			r.cfg.buffer.release(held)
		}
		if end {
			return subscriptionEnded, nil
		}
		st.cont = aws.ToString(v.ContinuationSequenceNumber)
		if now := r.cfg.clock.Now(); len(v.Records) == 0 && behind == 0 && now.Sub(st.checked) >= r.closedCheck {
			st.checked = now
			closed, err := r.closed(ctx)
			if err != nil {
				return subscriptionRenew, err
			}
			if closed {
				return subscriptionIdleClosed, nil
			}
		}
		if !r.cfg.clock.Now().Before(deadline) {
			return subscriptionRenew, nil // a slow consumer held the page past the renewal
		}
	}
}

// ended decides what a subscription that ended means: nothing (nil: it
// expired or was closed, so a new one is started), a transient failure
// (backed off, then a new one), or a failure no retry fixes.
func (r *fanoutReader) ended(ctx context.Context, st *fanoutState, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The consumer (or the stream) gone: the next subscription finds out
	// which (see subscribe). Counted and backed off as any failure, so
	// that KinesisMaxAttempts bounds it.
	_, gone := errors.AsType[*types.ResourceNotFoundException](err)
	gone = gone && r.consumerGone != nil
	_, inUse := errors.AsType[*types.ResourceInUseException](err)
	// An error the service did not send (no API error code) ended the
	// subscription's connection: an HTTP/2 GOAWAY as a server drains it,
	// a stream reset. The subscription was made; a new one is too.
	_, fromService := errors.AsType[smithy.APIError](err)
	if !gone && !inUse && fromService && !kerr.IsRetryable(err) && !kerr.IsThrottled(err) && !errors.Is(err, kerr.ErrOddAnswer) {
		return r.errorf("SubscribeToShard", "the subscription ended: %w", err)
	}
	st.failures++
	if m := r.cfg.maxAttempts; m > 0 && st.failures >= m {
		return r.errorf("SubscribeToShard", "%d subscriptions in a row ended with an error: %w", st.failures, err)
	}
	p := r.cfg.retry
	if kerr.IsThrottled(err) {
		p = r.cfg.throttle
	}
	wait := p.Delay(st.failures)
	if h := r.cfg.hooks.onRetry; h != nil {
		h(r.cfg.shard, "SubscribeToShard", st.failures, wait, err)
	}
	return r.cfg.clock.Sleep(ctx, wait)
}

// hold counts the records of an event against the buffer budget, waiting
// until they fit: the next event is not taken before. It returns what it
// took, for the page's receiver to give back.
func (r *fanoutReader) hold(ctx context.Context, rs []types.Record) (int64, error) {
	if r.cfg.buffer == nil || len(rs) == 0 {
		return 0, nil
	}
	cost := pageCost(rs)
	n, err := r.cfg.buffer.acquire(ctx, cost)
	if err != nil {
		return 0, err
	}
	if cost > n {
		// Larger than the whole budget: it got the budget alone.
		r.cfg.buffer.force(cost - n)
	}
	return cost, nil
}

// after returns a channel closed once d has passed on the reader's clock,
// and a function that stops the wait; the goroutine has exited when it
// returns.
func (r *fanoutReader) after(ctx context.Context, d time.Duration) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		if r.cfg.clock.Sleep(wctx, d) == nil {
			close(ch)
		}
	}()
	return ch, func() {
		cancel()
		<-exited
	}
}
