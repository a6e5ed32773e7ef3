package kinesisload

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/backoff"
	"github.com/tidemark/tidemark/internal/kerr"
)

// noSDKRetries switches the SDK's own retries off for one call: the
// Loader's retry layer (Config.KinesisMaxAttempts, KinesisBackoff,
// KinesisMaxBackoff) is the only one, so that its bounds and its hooks are
// the truth, and an outage is not retried three times on every try.
func noSDKRetries(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} }

// retryPolicy returns the backoff after a transient Kinesis failure.
func (l *Loader) retryPolicy() backoff.Policy {
	return backoff.Policy{Base: l.cfg.KinesisBackoff, Max: l.cfg.KinesisMaxBackoff, Jitter: backoff.EqualJitter}
}

// throttlePolicy returns the backoff after a throttled Kinesis call: half
// the retry policy's.
func (l *Loader) throttlePolicy() backoff.Policy {
	return backoff.Policy{Base: max(l.cfg.KinesisBackoff/2, time.Millisecond), Max: max(l.cfg.KinesisMaxBackoff/2, time.Millisecond), Jitter: backoff.EqualJitter}
}

// retried reports one retry of op to the log and the hooks. attempt counts
// the failed tries so far, from 1.
func (l *Loader) retried(shard, op string, attempt int, wait time.Duration, err error) {
	stream := l.cfg.Stream
	throttled := kerr.IsThrottled(err)
	if throttled {
		l.log.Debug("throttled; retrying", "shard", shard, "op", op, "attempt", attempt, "wait", wait, "err", err)
	} else {
		l.log.Warn("retrying", "shard", shard, "op", op, "attempt", attempt, "wait", wait, "err", err)
	}
	l.stats.retried(shard, err)
	l.hooks.onRetry(Retry{Stream: stream, ShardID: shard, Op: op, Attempt: attempt, Backoff: wait, Err: err})
	if throttled {
		l.hooks.onThrottled(Throttled{Stream: stream, ShardID: shard, Op: op, Attempt: attempt, Backoff: wait, Err: err})
	}
}
