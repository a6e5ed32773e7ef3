package kinesistest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Enhanced fan-out: registered consumers and SubscribeToShard.

// The fan-out operations of the fake, for [Fault] and [Fake.Calls].
const (
	OpRegisterStreamConsumer   Op = "RegisterStreamConsumer"
	OpDescribeStreamConsumer   Op = "DescribeStreamConsumer"
	OpDeregisterStreamConsumer Op = "DeregisterStreamConsumer"
	OpSubscribeToShard         Op = "SubscribeToShard"
	// OpSubscribeToShardEvent matches every event a subscription is about
	// to push (Shard is the subscription's shard). A [Fault] with Err
	// ends the subscription with that error instead of the event (its
	// channel closes and Err returns it); Block and Delay hold the event.
	OpSubscribeToShardEvent Op = "SubscribeToShardEvent"
)

// Fan-out limits and timings of Kinesis that are not throughput limits.
const (
	// SubscriptionTTL is how long a subscription lasts, on the fake's
	// clock: then its event channel closes and Err returns nil.
	SubscriptionTTL = 5 * time.Minute
	// HeartbeatInterval is how often, on the fake's clock, a subscription
	// with nothing to push sends an empty event with a continuation
	// sequence number (Kinesis sends one at least every 5 s).
	HeartbeatInterval = 5 * time.Second
	// MaxConsumersPerStream is how many consumers a stream may have
	// registered at once; RegisterStreamConsumer beyond it gives
	// *types.LimitExceededException.
	MaxConsumersPerStream = 20
	// subscriptionPoll is how often (real time) a subscription looks at
	// the fake's clock while it has nothing to push: a ManualClock moves
	// without telling anyone.
	subscriptionPoll = 10 * time.Millisecond
)

// fanout is the fan-out state of a Fake, guarded by Fake.mu.
type fanout struct {
	consumers map[string]*consumer // by ARN
	// changed is closed and replaced whenever a record is written, a
	// shard closed or a consumer deregistered: subscriptions wake.
	changed chan struct{}
}

type consumer struct {
	arn, name string
	streamID  uint64
	streamARN string
	created   time.Time
	gone      bool // deregistered
	shards    map[int]*consumerShard
}

// consumerShard is what the fake remembers of a consumer's subscriptions
// to one shard.
type consumerShard struct {
	lastCall time.Time // the last SubscribeToShard call
	lastOK   time.Time // the last successful one
	read     bucket    // the consumer's own read throughput on the shard
}

// notifyLocked wakes every subscription. f.mu must be held.
func (f *Fake) notifyLocked() {
	if f.fo.changed != nil {
		close(f.fo.changed)
	}
	f.fo.changed = make(chan struct{})
}

func (f *Fake) changedLocked() <-chan struct{} {
	if f.fo.changed == nil {
		f.fo.changed = make(chan struct{})
	}
	return f.fo.changed
}

func (c *consumer) status(now time.Time, activation time.Duration) types.ConsumerStatus {
	if now.Sub(c.created) >= activation {
		return types.ConsumerStatusActive
	}
	return types.ConsumerStatusCreating
}

func (c *consumer) description(now time.Time, activation time.Duration) *types.ConsumerDescription {
	return &types.ConsumerDescription{
		ConsumerARN:               aws.String(c.arn),
		ConsumerName:              aws.String(c.name),
		ConsumerCreationTimestamp: aws.Time(c.created),
		ConsumerStatus:            c.status(now, activation),
		StreamARN:                 aws.String(c.streamARN),
	}
}

func (f *Fake) errConsumerNotFound(what string) error {
	return &types.ResourceNotFoundException{Message: aws.String(fmt.Sprintf("Consumer %s under account %s not found.", what, f.cfg.account))}
}

// RegisterStreamConsumer registers a consumer of the stream named by
// StreamARN. The answer always says CREATING; the consumer is ACTIVE once
// [WithConsumerActivation] has passed on the fake's clock (default at
// once). A name already registered on the stream gives
// *types.ResourceInUseException; more than [MaxConsumersPerStream]
// *types.LimitExceededException.
func (f *Fake) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	if in == nil {
		in = &kinesis.RegisterStreamConsumerInput{}
	}
	if aws.ToString(in.StreamARN) == "" {
		return nil, errInvalidArgument("StreamARN is required")
	}
	st, err := f.begin(ctx, OpRegisterStreamConsumer, nil, in.StreamARN)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	name := aws.ToString(in.ConsumerName)
	if !streamNameExpr.MatchString(name) {
		return nil, errInvalidArgument("ConsumerName %q must be 1 to 128 characters of a-z, A-Z, 0-9, '_', '-' and '.'", name)
	}
	n := 0
	for _, c := range f.fo.consumers {
		if c.streamID != st.id {
			continue
		}
		if c.name == name {
			return nil, &types.ResourceInUseException{Message: aws.String(fmt.Sprintf("Consumer %s under account %s already exists for stream %s.", name, f.cfg.account, st.arn))}
		}
		n++
	}
	if n >= MaxConsumersPerStream {
		return nil, &types.LimitExceededException{Message: aws.String(fmt.Sprintf("Stream %s under account %s has %d consumers registered, the most allowed.", st.arn, f.cfg.account, n))}
	}
	now := f.now()
	c := &consumer{
		arn:       fmt.Sprintf("%s/consumer/%s:%d", st.arn, name, now.Unix()),
		name:      name,
		streamID:  st.id,
		streamARN: st.arn,
		created:   now,
		shards:    make(map[int]*consumerShard),
	}
	if f.fo.consumers == nil {
		f.fo.consumers = make(map[string]*consumer)
	}
	f.fo.consumers[c.arn] = c
	return &kinesis.RegisterStreamConsumerOutput{Consumer: &types.Consumer{
		ConsumerARN: aws.String(c.arn), ConsumerName: aws.String(name),
		ConsumerCreationTimestamp: aws.Time(now), ConsumerStatus: types.ConsumerStatusCreating,
	}}, nil
}

// lookupConsumer finds a consumer by ConsumerARN, or by StreamARN and
// ConsumerName. f.mu must be held.
func (f *Fake) lookupConsumer(arn, streamARN, name *string) (*consumer, error) {
	if a := aws.ToString(arn); a != "" {
		c, ok := f.fo.consumers[a]
		if !ok {
			return nil, f.errConsumerNotFound(a)
		}
		return c, nil
	}
	if aws.ToString(streamARN) == "" || aws.ToString(name) == "" {
		return nil, errInvalidArgument("ConsumerARN, or StreamARN and ConsumerName, must be provided")
	}
	st, err := f.lookupStream(nil, streamARN)
	if err != nil {
		return nil, err
	}
	for _, c := range f.fo.consumers {
		if c.streamID == st.id && c.name == *name {
			return c, nil
		}
	}
	return nil, f.errConsumerNotFound(*name)
}

// DescribeStreamConsumer describes a consumer named by ConsumerARN, or by
// StreamARN and ConsumerName. An unknown one gives
// *types.ResourceNotFoundException.
func (f *Fake) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	if in == nil {
		in = &kinesis.DescribeStreamConsumerInput{}
	}
	if err := f.enter(ctx, OpDescribeStreamConsumer, f.requestStream(nil, in.StreamARN)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupConsumer(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err != nil {
		return nil, err
	}
	return &kinesis.DescribeStreamConsumerOutput{ConsumerDescription: c.description(f.now(), f.cfg.consumerActivation)}, nil
}

// DeregisterStreamConsumer removes a consumer at once (Kinesis shows it
// DELETING for a while); its subscriptions end with
// *types.ResourceNotFoundException. An unknown one gives
// *types.ResourceNotFoundException.
func (f *Fake) DeregisterStreamConsumer(ctx context.Context, in *kinesis.DeregisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error) {
	if in == nil {
		in = &kinesis.DeregisterStreamConsumerInput{}
	}
	if err := f.enter(ctx, OpDeregisterStreamConsumer, f.requestStream(nil, in.StreamARN)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.lookupConsumer(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err != nil {
		return nil, err
	}
	c.gone = true
	delete(f.fo.consumers, c.arn)
	f.notifyLocked()
	return &kinesis.DeregisterStreamConsumerOutput{}, nil
}

// SubscribeToShard starts a subscription of a registered, ACTIVE consumer
// to a shard at StartingPosition (the types of GetShardIterator). Its
// events carry the records as they arrive, at most
// [Limits.SubscriptionBytesPerSecond] per consumer and shard, each with
// its ContinuationSequenceNumber and MillisBehindLatest; an empty event
// with a continuation number comes every [HeartbeatInterval] when there
// is nothing to push. At the end of a closed shard the last event has no
// ContinuationSequenceNumber and lists the ChildShards, and the channel
// closes. A subscription ends after [SubscriptionTTL] on the fake's clock
// (Err nil), when ctx ends or Close is called, and with an error when its
// consumer is deregistered or its stream deleted.
//
// Each subscription runs one goroutine, which has exited when Close
// returns (or soon after ctx ends). It hands over one event at a time: the
// next is made only once the previous one was taken, so a slow reader
// holds no more than one event.
//
// Errors: an unknown consumer, stream or shard gives
// *types.ResourceNotFoundException; a consumer still CREATING, or a call
// within [Limits.ResubscribeWindow] of the consumer's last successful
// subscription to the shard, *types.ResourceInUseException; more than
// [Limits.SubscribeToShardPerSecond] calls per second for the consumer
// and shard *types.LimitExceededException; a bad starting position
// *types.InvalidArgumentException.
func (f *Fake) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, _ ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	if in == nil {
		in = &kinesis.SubscribeToShardInput{}
	}
	arn := aws.ToString(in.ConsumerARN)
	shardID := aws.ToString(in.ShardId)
	stream := ""
	if i := strings.Index(arn, "/consumer/"); i > 0 {
		stream = f.requestStream(nil, aws.String(arn[:i]))
	}
	if err := f.enter(ctx, OpSubscribeToShard, stream, shardID); err != nil {
		return nil, err
	}
	switch {
	case arn == "":
		return nil, errInvalidArgument("ConsumerARN is required")
	case shardID == "":
		return nil, errInvalidArgument("ShardId is required")
	case in.StartingPosition == nil:
		return nil, errInvalidArgument("StartingPosition is required")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	c, err := f.lookupConsumer(in.ConsumerARN, nil, nil)
	if err != nil {
		return nil, err
	}
	st, ok := f.byID[c.streamID]
	if !ok {
		return nil, f.errConsumerNotFound(arn)
	}
	s, err := f.lookupShard(st, shardID, now)
	if err != nil {
		return nil, err
	}
	if c.status(now, f.cfg.consumerActivation) != types.ConsumerStatusActive {
		return nil, &types.ResourceInUseException{Message: aws.String(fmt.Sprintf("Consumer %s under account %s is not ACTIVE.", arn, f.cfg.account))}
	}
	cs := c.shards[s.index]
	if cs == nil {
		cs = &consumerShard{}
		c.shards[s.index] = cs
	}
	l := f.cfg.limits
	if n := l.SubscribeToShardPerSecond; n > 0 && !cs.lastCall.IsZero() && now.Sub(cs.lastCall) < time.Second/time.Duration(n) {
		cs.lastCall = now
		s.stats.SubscribeRefused++
		return nil, &types.LimitExceededException{Message: aws.String(fmt.Sprintf("Rate exceeded for consumer %s and shard %s in stream %s under account %s.", arn, s.id, st.name, f.cfg.account))}
	}
	cs.lastCall = now
	if w := l.ResubscribeWindow; w > 0 && !cs.lastOK.IsZero() && now.Sub(cs.lastOK) < w {
		s.stats.SubscribeRefused++
		return nil, &types.ResourceInUseException{Message: aws.String(fmt.Sprintf("Another active subscription exists for consumer %s and shard %s in stream %s under account %s.", arn, s.id, st.name, f.cfg.account))}
	}
	p := in.StartingPosition
	from, err := f.startOf(st, s, p.Type, p.SequenceNumber, p.Timestamp, now, "SubscribeToShard")
	if err != nil {
		return nil, err
	}
	cs.lastOK = now
	s.stats.SubscribeCalls++
	sctx, cancel := context.WithCancel(ctx)
	sub := &subscription{
		f: f, ctx: sctx, cancel: cancel, c: c, cs: cs, streamID: st.id, stream: st.name, shard: s.index,
		from: from, started: now,
		ch:   make(chan types.SubscribeToShardEventStream),
		done: make(chan struct{}),
	}
	go sub.run()
	return sub, nil
}

// subscription is one SubscribeToShard stream of the fake.
type subscription struct {
	f        *Fake
	ctx      context.Context
	cancel   context.CancelFunc
	c        *consumer
	cs       *consumerShard
	streamID uint64
	stream   string
	shard    int

	// Owned by run.
	from      uint64    // the next sequence counter to push
	started   time.Time // on the fake's clock
	lastEvent time.Time // on the fake's clock; zero: none yet

	ch   chan types.SubscribeToShardEventStream
	done chan struct{}

	mu  sync.Mutex
	err error
}

var _ kinesis.SubscribeToShardEventStreamReader = (*subscription)(nil)

// Events returns the subscription's events; the channel is closed when the
// subscription ends.
func (s *subscription) Events() <-chan types.SubscribeToShardEventStream { return s.ch }

// Close ends the subscription and waits for its goroutine. It may be
// called more than once, concurrently.
func (s *subscription) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// Err returns why the subscription ended: nil while it runs, after it
// expired, or after Close or the end of its context.
func (s *subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *subscription) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *subscription) run() {
	defer close(s.done)
	defer close(s.ch)
	defer s.cancel()
	tick := time.NewTicker(subscriptionPoll)
	defer tick.Stop()
	for {
		ev, last, wake, err := s.next()
		switch {
		case err != nil:
			s.fail(err)
			return
		case ev == nil && last: // expired
			return
		case ev == nil:
			select {
			case <-wake:
			case <-tick.C:
			case <-s.ctx.Done():
				return
			}
			continue
		}
		if err := s.f.enter(s.ctx, OpSubscribeToShardEvent, s.stream, shardID(s.shard)); err != nil {
			if s.ctx.Err() == nil {
				s.fail(err)
			}
			return
		}
		if !s.push(ev, tick.C) {
			return
		}
		if last {
			return
		}
	}
}

// push hands ev to the reader. It gives up, and reports false, when the
// subscription's context ends or, as in Kinesis, it expires while the
// reader does not take the event.
func (s *subscription) push(ev *types.SubscribeToShardEvent, tick <-chan time.Time) bool {
	for {
		select {
		case s.ch <- &types.SubscribeToShardEventStreamMemberSubscribeToShardEvent{Value: *ev}:
			return true
		case <-s.ctx.Done():
			return false
		case <-tick:
			if s.expired() {
				return false
			}
		}
	}
}

// expired reports, and counts, the end of the subscription's time.
func (s *subscription) expired() bool {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now().Sub(s.started) < SubscriptionTTL {
		return false
	}
	if st, ok := f.byID[s.streamID]; ok && s.shard < len(st.shards) {
		st.shards[s.shard].stats.SubscriptionsExpired++
	}
	return true
}

// next makes the subscription's next event. It returns nil and a channel
// to wait on when there is nothing to push yet; last says the event ends
// the subscription (nil event: it expired).
func (s *subscription) next() (ev *types.SubscribeToShardEvent, last bool, wake <-chan struct{}, err error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	wake = f.changedLocked()
	st, ok := f.byID[s.streamID]
	if !ok {
		return nil, false, nil, f.errStreamNotFound(s.stream)
	}
	if s.c.gone {
		return nil, false, nil, f.errConsumerNotFound(s.c.arn)
	}
	sh, err := f.lookupShard(st, shardID(s.shard), now)
	if err != nil {
		return nil, false, nil, err
	}
	if now.Sub(s.started) >= SubscriptionTTL {
		sh.stats.SubscriptionsExpired++
		return nil, true, nil, nil
	}
	first := sort.Search(len(sh.records), func(i int) bool { return sh.records[i].seq >= s.from })
	end := first
	if first < len(sh.records) {
		budget, full := int64(maxGetRecordsBytes), true
		if r := f.cfg.limits.SubscriptionBytesPerSecond; r > 0 {
			s.cs.read.refill(now, float64(r))
			budget = min(budget, int64(s.cs.read.level))
			full = s.cs.read.level >= float64(r)
		}
		var bytes int64
		for end < len(sh.records) && end-first < maxGetRecordsLimit {
			n := int64(sh.records[end].size())
			// A record larger than the whole rate goes alone, once the
			// bucket is full.
			if bytes+n > budget && !(end == first && full) {
				break
			}
			bytes += n
			end++
		}
		if end == first {
			return nil, false, wake, nil // over the consumer's 2 MiB/s: wait
		}
		if r := f.cfg.limits.SubscriptionBytesPerSecond; r > 0 {
			s.cs.read.level -= float64(bytes)
		}
		sh.stats.RecordsPushed += int64(end - first)
		sh.stats.BytesPushed += bytes
	}
	atEnd := end == len(sh.records) && !sh.open()
	if end == first && !atEnd && !s.lastEvent.IsZero() && now.Sub(s.lastEvent) < HeartbeatInterval {
		return nil, false, wake, nil
	}
	ev = &types.SubscribeToShardEvent{Records: make([]types.Record, 0, end-first)}
	for i := first; i < end; i++ {
		r := &sh.records[i]
		ev.Records = append(ev.Records, types.Record{
			Data:                        append([]byte(nil), r.data...),
			PartitionKey:                aws.String(r.key),
			SequenceNumber:              aws.String(seqString(r.seq, sh.index)),
			ApproximateArrivalTimestamp: aws.Time(r.arrival),
		})
	}
	if end > first {
		s.from = sh.records[end-1].seq + 1
	}
	var behind int64
	if end < len(sh.records) {
		behind = max(now.Sub(sh.records[end].arrival).Milliseconds(), 1)
	}
	ev.MillisBehindLatest = aws.Int64(behind)
	s.lastEvent = now
	sh.stats.EventsSent++
	if atEnd {
		ev.ChildShards = f.childShards(st, sh)
		return ev, true, nil, nil
	}
	// Resuming after the continuation number goes on at s.from: the last
	// record pushed, or just before the next one to come.
	ev.ContinuationSequenceNumber = aws.String(seqString(max(s.from, sh.startSeq+1)-1, sh.index))
	return ev, false, nil, nil
}
