package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// Subscriber holds the Kinesis calls of enhanced fan-out ([ReadFanOut]):
// the consumer registration and SubscribeToShard. The in-memory Kinesis
// of [github.com/tidemark/tidemark/kinesisload/kinesistest] satisfies it
// as is; a *kinesis.Client through [NewSubscriber] (the Loader wraps a
// *kinesis.Client given to [WithClient] itself).
//
// SubscribeToShard returns the subscription's events, as the SDK's
// [kinesis.SubscribeToShardEventStreamReader]: Events yields
// *types.SubscribeToShardEventStreamMemberSubscribeToShardEvent values (and
// possibly others, which the Loader ignores) and is closed when the
// subscription ends; Err then tells why (nil: it expired or ended
// normally); Close ends it early and may be called more than once and
// concurrently. Ending ctx ends the subscription too. The variadic options
// are the SDK's per-call options.
//
// Implementations must be safe for concurrent use.
type Subscriber interface {
	RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error)
	DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error)
	DeregisterStreamConsumer(ctx context.Context, in *kinesis.DeregisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error)
	SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error)
}

// NewSubscriber adapts c to [Subscriber]: its SubscribeToShard returns the
// event stream of the SDK's answer (GetStream().Reader).
func NewSubscriber(c *kinesis.Client) Subscriber {
	return sdkSubscriber{c}
}

type sdkSubscriber struct {
	*kinesis.Client
}

// SubscribeToShard calls the SDK and returns the answer's event stream.
// An answer without one is an error, and a subscription whose caller's
// ctx ends is closed by the SDK.
//
// Every call gets a protocol of its own (the client's default one,
// awsjson 1.1): the SDK's event-stream codec keeps a decoding buffer in
// the protocol, which every subscription of a client would otherwise
// share, so that concurrent subscriptions race on it (seen with
// aws-sdk-go-v2/service/kinesis v1.56.13 and smithy-go v1.28.9 under the
// race detector: one stream's payload can be overwritten by another's).
func (s sdkSubscriber) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	optFns = append(optFns, func(o *kinesis.Options) { o.Protocol = awsjson.New11(schemas.Kinesis_20131202) })
	out, err := s.Client.SubscribeToShard(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	es := out.GetStream()
	if es == nil || es.Reader == nil {
		return nil, fmt.Errorf("SubscribeToShard answered without an event stream")
	}
	return es.Reader, nil
}

// subscriberOf returns the Subscriber of a Loader's client: the client
// itself when it implements Subscriber, a *kinesis.Client adapted by
// NewSubscriber, or nil.
func subscriberOf(c any) Subscriber {
	switch c := c.(type) {
	case Subscriber:
		return c
	case *kinesis.Client:
		return NewSubscriber(c)
	}
	return nil
}

// consumerNameExpr is what Kinesis accepts as a consumer name.
var consumerNameExpr = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// consumerPoll is the wait between two DescribeStreamConsumer calls while
// a consumer is CREATING (Kinesis takes a few seconds).
const consumerPoll = time.Second

// RegisterConsumer returns the ARN of the stream's consumer named name, an
// ACTIVE one: it registers the consumer if the stream has none of that
// name (RegisterStreamConsumer), reuses it if it exists
// (DescribeStreamConsumer), and waits while it is CREATING. The Loader
// calls it in [ReadFanOut] mode; a user may call it to register ahead of
// time. A consumer that is DELETING, or a failed call, is an error naming
// the stream and the consumer (no call is retried; the Loader retries
// transient failures as for every Kinesis call).
func RegisterConsumer(ctx context.Context, c Subscriber, streamARN, name string) (string, error) {
	for {
		arn, ok, err := registerConsumer(ctx, c, streamARN, name, 0)
		switch {
		case err != nil:
			return "", fmt.Errorf("kinesisload: registering consumer %s of stream %s: %w", name, streamARN, err)
		case ok:
			return arn, nil
		}
		t := time.NewTimer(consumerPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		}
	}
}

// registerConsumer is RegisterConsumer, with the per-call timeout (0:
// none). ok says the consumer is ACTIVE; a consumer CREATING gives its ARN
// and ok false, for the caller to wait and ask again.
func registerConsumer(ctx context.Context, c Subscriber, streamARN, name string, timeout time.Duration) (arn string, ok bool, err error) {
	call := func(fn func(ctx context.Context) error) error {
		if timeout <= 0 {
			return fn(ctx)
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return fn(cctx)
	}
	var d *types.ConsumerDescription
	err = call(func(ctx context.Context) error {
		out, err := c.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)}, noSDKRetries)
		if err == nil && out != nil {
			d = out.ConsumerDescription
		}
		return err
	})
	if _, notFound := errors.AsType[*types.ResourceNotFoundException](err); notFound {
		err = call(func(ctx context.Context) error {
			out, err := c.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)}, noSDKRetries)
			if err == nil && out != nil && out.Consumer != nil {
				cs := out.Consumer
				d = &types.ConsumerDescription{ConsumerARN: cs.ConsumerARN, ConsumerName: cs.ConsumerName, ConsumerStatus: cs.ConsumerStatus}
			}
			return err
		})
		if _, inUse := errors.AsType[*types.ResourceInUseException](err); inUse {
			// Registered meanwhile by another host: ask again.
			return "", false, nil
		}
		if err == nil && d != nil && d.ConsumerStatus != types.ConsumerStatusActive {
			// Ask once more at once: some implementations (the
			// in-memory Kinesis by default) are ACTIVE right away.
			err = call(func(ctx context.Context) error {
				out, err := c.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: d.ConsumerARN}, noSDKRetries)
				if err == nil && out != nil && out.ConsumerDescription != nil {
					d = out.ConsumerDescription
				}
				return err
			})
		}
	}
	if err != nil {
		return "", false, err
	}
	if d == nil || aws.ToString(d.ConsumerARN) == "" {
		return "", false, fmt.Errorf("consumer %s of stream %s: the answer has no consumer ARN", name, streamARN)
	}
	switch d.ConsumerStatus {
	case types.ConsumerStatusActive:
		return aws.ToString(d.ConsumerARN), true, nil
	case types.ConsumerStatusDeleting:
		return "", false, fmt.Errorf("consumer %s of stream %s is DELETING; register it again once it is gone, or choose another ConsumerName", name, streamARN)
	}
	return aws.ToString(d.ConsumerARN), false, nil
}

// DeregisterConsumer deregisters the stream's consumer named name. The
// Loader never does: a registered consumer costs money by the hour, but
// whether it outlives a Loader is the user's decision (another run, or
// another host of a fleet, may still read with it). Subscriptions of the
// consumer end. A consumer that does not exist is not an error.
func DeregisterConsumer(ctx context.Context, c Subscriber, streamARN, name string) error {
	_, err := c.DeregisterStreamConsumer(ctx, &kinesis.DeregisterStreamConsumerInput{StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)})
	if _, notFound := errors.AsType[*types.ResourceNotFoundException](err); notFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kinesisload: deregistering consumer %s of stream %s: %w", name, streamARN, err)
	}
	return nil
}
