package kinesisload

import (
	"context"
	"fmt"

	"github.com/tidemark/tidemark/internal/backoff"
)

// ReadMode says how a [Loader] reads its shards ([Config.ReadMode]).
type ReadMode int

const (
	// ReadPolling reads with GetRecords, sharing each shard's 5 calls and
	// 2 MiB per second with every other polling reader of the stream. The
	// default.
	ReadPolling ReadMode = iota
	// ReadFanOut reads with enhanced fan-out: the Loader registers (or
	// reuses) the stream consumer [Config.ConsumerName] and subscribes to
	// each shard it reads (SubscribeToShard), with 2 MiB per second per
	// shard of its own and records pushed as they arrive. The guarantee is
	// the same as polling's. The consumer is never deregistered by the
	// Loader: see [DeregisterConsumer].
	ReadFanOut
)

// String returns "polling" or "fan-out".
func (m ReadMode) String() string {
	switch m {
	case ReadPolling:
		return "polling"
	case ReadFanOut:
		return "fan-out"
	}
	return fmt.Sprintf("ReadMode(%d)", int(m))
}

// fanoutSession is a session's fan-out state: the consumer's ARN, found
// once by the first shard that needs it.
type fanoutSession struct {
	// lock is held (a value in it) while one shard's loop looks the
	// consumer up; the others wait for it, or for their context to end
	// (a loop whose lease is lost does not wait out a registration).
	lock chan struct{}
	sub  Subscriber
	arn  string
	// stream is the ARN of the stream arn is a consumer of: a stream
	// re-created under the name (a start-over within one Run) has
	// consumers of its own.
	stream string
}

// consumerARN returns the ARN of the ACTIVE consumer Config.ConsumerName,
// registering it if the stream has none of that name and waiting while it
// is CREATING. Transient failures are retried as for every Kinesis call of
// the Loader; what no retry fixes is a [*RunError] of class [ErrKinesis].
func (s *session) consumerARN(ctx context.Context) (Subscriber, string, error) {
	f := &s.fanout
	select {
	case f.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	defer func() { <-f.lock }()
	if f.arn != "" && (s.identity.ARN == "" || f.stream == s.identity.ARN) {
		return f.sub, f.arn, nil
	}
	f.arn = ""
	l := s.l
	stream, name := l.cfg.Stream, l.cfg.ConsumerName
	sub := subscriberOf(s.client)
	if sub == nil {
		return nil, "", &RunError{Stream: stream, Op: "RegisterStreamConsumer", Kind: ErrInvalidConfig,
			Err: fmt.Errorf("%w: ReadMode = fan-out: the Kinesis client (%T) does not implement kinesisload.Subscriber; give a *kinesis.Client or a Subscriber to WithClient", ErrInvalidConfig, s.client)}
	}
	streamARN := s.identity.ARN
	if streamARN == "" {
		// A host of a fleet that did not initialise: ask.
		id, err := s.describeIdentity(ctx)
		if err != nil {
			return nil, "", err
		}
		streamARN = id.ARN
	}
	for attempt := 1; ; attempt++ {
		var arn string
		var active bool
		err := s.callKinesis(ctx, "", "RegisterStreamConsumer", func(ctx context.Context) (err error) {
			arn, active, err = registerConsumer(ctx, sub, streamARN, name, l.cfg.CallTimeout)
			return err
		})
		if err != nil {
			return nil, "", err
		}
		if active {
			l.log.Info("fan-out consumer ACTIVE", "consumer", name, "arn", arn)
			f.sub, f.arn, f.stream = sub, arn, streamARN
			return sub, arn, nil
		}
		if attempt == 1 {
			l.log.Info("waiting for the fan-out consumer to become ACTIVE", "consumer", name)
		}
		if err := backoff.Sleep(ctx, consumerPoll); err != nil {
			return nil, "", err
		}
	}
}

// consumerGone forgets the consumer arn, which Kinesis says does not
// exist (deregistered by hand, or its stream deleted), unless another
// shard's loop looked it up again already, and returns the consumer's ARN
// as consumerARN looks it up (registering it again), once it checked
// that the stream is still the session's.
func (s *session) consumerGone(ctx context.Context, arn string) (string, error) {
	// The stream may be gone, or re-created under the name (its ARN is the
	// same): then this session's positions are not the new stream's, and
	// the error says so (the Run starts over, or stops), rather than
	// registering a consumer on the new stream and reading it with them.
	if err := s.checkIdentity(ctx); err != nil {
		return "", err
	}
	f := &s.fanout
	select {
	case f.lock <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if f.arn == arn {
		s.l.log.Warn("the fan-out consumer is gone; looking it up again", "consumer", s.l.cfg.ConsumerName, "arn", arn)
		f.arn = ""
	}
	<-f.lock
	_, got, err := s.consumerARN(ctx)
	return got, err
}

// newReader returns the run function of this loop's reader: a polling
// [reader], or in [ReadFanOut] mode a [fanoutReader] on the session's
// consumer.
func (c *consumer) newReader(ctx context.Context, rc readerConfig) (func(context.Context, chan<- page) error, error) {
	l := c.s.l
	if l.cfg.ReadMode != ReadFanOut {
		rd, err := newReader(rc)
		if err != nil {
			return nil, stopError(l.cfg.Stream, c.shard, "GetShardIterator", ErrKinesis, err)
		}
		return rd.run, nil
	}
	sub, arn, err := c.s.consumerARN(ctx)
	if err != nil {
		return nil, err
	}
	fc := fanoutConfig{readerConfig: rc, sub: sub, consumerARN: arn, closedCheck: l.cfg.ListShardsInterval, consumerGone: c.s.consumerGone}
	if l.opt.tuneFanOut != nil {
		l.opt.tuneFanOut(&fc)
	}
	rd, err := newFanoutReader(fc)
	if err != nil {
		return nil, stopError(l.cfg.Stream, c.shard, "SubscribeToShard", ErrKinesis, err)
	}
	return rd.run, nil
}
