package scan

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/internal/backoff"
)

// Strategy says how a [Resolver] finds the tip of a shard. The zero Strategy
// is [StrategyProbe], the default.
type Strategy uint8

const (
	// StrategyProbe finds the neighbourhood of the shard's last record with
	// AT_TIMESTAMP probes (one record each) and reads only from there to
	// the tip. Its cost grows with the logarithm of the retained history.
	// It persists exactly the positions [StrategyFullScan] would; the
	// package documentation explains why.
	StrategyProbe Strategy = iota
	// StrategyFullScan reads every retained record from TRIM_HORIZON to the
	// tip, as the seed did. Its cost grows with the retained history; it is
	// the baseline the probe strategy is measured against.
	StrategyFullScan
)

// String returns "probe" or "full-scan".
func (s Strategy) String() string {
	switch s {
	case StrategyProbe:
		return "probe"
	case StrategyFullScan:
		return "full-scan"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// Defaults used for zero [Config] fields.
const (
	DefaultWorkers       = 8
	DefaultQueueSize     = 1024
	DefaultCallTimeout   = 30 * time.Second
	DefaultRetries       = 3
	DefaultJitter        = 0.2
	DefaultPageLimit     = 10000
	DefaultHeadLimit     = 100
	DefaultInitialWindow = time.Second
	DefaultResolution    = 100 * time.Millisecond
	DefaultProbeTimeout  = time.Second
)

// DefaultBackoff returns the waits before each retry used when
// [Config.Backoff] is empty: 1 s, 2 s, then 4 s.
func DefaultBackoff() []time.Duration {
	return []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
}

// Config configures a [Resolver]. A zero Config is valid: every zero field
// takes the default named in its comment.
type Config struct {
	// Strategy selects how tips are found. Default [StrategyProbe].
	Strategy Strategy

	// Workers bounds the shard scans running at once across every batch
	// of the Resolver. Default [DefaultWorkers] (8).
	Workers int

	// QueueSize bounds the shards waiting for a worker across every batch.
	// A batch that does not fit fails at once with [ErrQueueFull], so a
	// single batch may hold at most QueueSize shards. Default
	// [DefaultQueueSize] (1024).
	QueueSize int

	// CallTimeout bounds each Kinesis call (each attempt). Default
	// [DefaultCallTimeout] (30 s).
	CallTimeout time.Duration

	// BatchTimeout, if positive, bounds a whole [Resolver.Resolve] call,
	// including the time its shards wait for a worker. It is never reset.
	// Default: none (the caller's context still applies).
	BatchTimeout time.Duration

	// Retries is how many times one call is retried after a retryable
	// error (a 5xx, a timeout, a reset connection; see kerr.IsRetryable)
	// or an expired iterator. Throttling does not count: a throttled call
	// is retried, with the same backoff, for as long as the batch's
	// context and [Config.BatchTimeout] allow. Default [DefaultRetries]
	// (3); a negative value disables retries.
	Retries int

	// CallInterval is the least time between two calls of one operation
	// (GetRecords, GetShardIterator) on one shard, so that a scan keeps
	// within the Kinesis limits of 5 calls per second per shard instead of
	// running into throttling. Default [DefaultCallInterval] (200 ms); a
	// negative value switches pacing off.
	CallInterval time.Duration

	// Backoff[i] is the wait before retry i+1; the last entry is reused
	// for later retries. Default [DefaultBackoff] (1 s, 2 s, 4 s).
	Backoff []time.Duration

	// Jitter adds up to this fraction of each backoff, drawn at random.
	// Default [DefaultJitter] (0.2); a negative value disables jitter.
	Jitter float64

	// Sleep waits for d or until ctx ends, returning ctx.Err() in that
	// case. Default: a timer. Tests replace it to run fast or to advance a
	// manual clock.
	Sleep func(ctx context.Context, d time.Duration) error

	// Now is this host's clock. It is used for probe times only when
	// Kinesis responses carry no server time (HTTP Date), and to measure
	// [Stats.Duration]. Default time.Now.
	Now func() time.Time

	// PageLimit is the Limit of each GetRecords call that reads towards
	// the tip (probes use 1). Default [DefaultPageLimit] (10000, the
	// Kinesis maximum).
	PageLimit int32

	// HeadLimit is the Limit of the probe strategy's first read, from
	// TRIM_HORIZON. A shard that holds fewer records is resolved by that
	// one call; a larger one costs at most this many records more than
	// with Limit 1. Default [DefaultHeadLimit] (100).
	HeadLimit int32

	// InitialWindow is the first window the probe strategy looks back from
	// now; it grows fourfold while it holds no record. Default
	// [DefaultInitialWindow] (1 s).
	InitialWindow time.Duration

	// Resolution is the width of the time window below which the probe
	// strategy stops bisecting and reads to the tip. At the Kinesis write
	// limit of 1 MB/s per shard, 100 ms holds at most 100 KB, one call.
	// It is rounded down to whole milliseconds, at least 1 ms. Default
	// [DefaultResolution] (100 ms).
	Resolution time.Duration

	// ProbeTimeout bounds each attempt of a probe's AT_TIMESTAMP
	// GetShardIterator, and of the control call that follows one that
	// went unanswered: when the probe is silent and the control answers,
	// the probe is taken for "no record at or after that time" (kinesalite
	// never answers such a probe); when neither answers, the attempt is
	// retried like any timeout, with twice the wait, up to CallTimeout.
	// Default [DefaultProbeTimeout] (1 s).
	ProbeTimeout time.Duration

	// Hooks are optional callbacks; see [Hooks].
	Hooks Hooks
}

// Hooks are optional callbacks a [Resolver] makes. Each must be fast and
// safe for concurrent use: they run on the workers, which wait for them.
// Nil fields are skipped.
type Hooks struct {
	// ShardResolved is called once for each shard whose position was
	// found, before the batch's outcome is known: a batch may still fail
	// afterwards and publish nothing.
	ShardResolved func(stream string, r ShardResult)

	// Retry is called before each backoff of a retried call.
	Retry func(RetryEvent)
}

// A RetryEvent describes one retry, for [Hooks.Retry].
type RetryEvent struct {
	Stream  string
	Shard   string
	Op      string        // "GetShardIterator" or "GetRecords"
	Attempt int           // the attempt that failed, from 1
	Err     error         // why it failed
	Backoff time.Duration // the wait before the next attempt
}

// withDefaults returns c with every zero field set to its default, or an
// error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Strategy > StrategyFullScan:
		return c, fmt.Errorf("%w: Strategy = %d: unknown", ErrInvalidConfig, c.Strategy)
	case c.Workers < 0:
		return c, fmt.Errorf("%w: Workers = %d: must not be negative", ErrInvalidConfig, c.Workers)
	case c.QueueSize < 0:
		return c, fmt.Errorf("%w: QueueSize = %d: must not be negative", ErrInvalidConfig, c.QueueSize)
	case c.CallTimeout < 0:
		return c, fmt.Errorf("%w: CallTimeout = %v: must not be negative", ErrInvalidConfig, c.CallTimeout)
	case c.BatchTimeout < 0:
		return c, fmt.Errorf("%w: BatchTimeout = %v: must not be negative", ErrInvalidConfig, c.BatchTimeout)
	case c.PageLimit < 0 || c.PageLimit > DefaultPageLimit:
		return c, fmt.Errorf("%w: PageLimit = %d: must be 1 to %d, or 0 for the default", ErrInvalidConfig, c.PageLimit, DefaultPageLimit)
	case c.HeadLimit < 0 || c.HeadLimit > DefaultPageLimit:
		return c, fmt.Errorf("%w: HeadLimit = %d: must be 1 to %d, or 0 for the default", ErrInvalidConfig, c.HeadLimit, DefaultPageLimit)
	case c.InitialWindow < 0:
		return c, fmt.Errorf("%w: InitialWindow = %v: must not be negative", ErrInvalidConfig, c.InitialWindow)
	case c.Resolution < 0:
		return c, fmt.Errorf("%w: Resolution = %v: must not be negative", ErrInvalidConfig, c.Resolution)
	case c.ProbeTimeout < 0:
		return c, fmt.Errorf("%w: ProbeTimeout = %v: must not be negative", ErrInvalidConfig, c.ProbeTimeout)
	case c.Jitter > 1:
		return c, fmt.Errorf("%w: Jitter = %v: must be at most 1", ErrInvalidConfig, c.Jitter)
	}
	for i, d := range c.Backoff {
		if d < 0 {
			return c, fmt.Errorf("%w: Backoff[%d] = %v: must not be negative", ErrInvalidConfig, i, d)
		}
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	switch {
	case c.Retries == 0:
		c.Retries = DefaultRetries
	case c.Retries < 0:
		c.Retries = 0
	}
	if len(c.Backoff) == 0 {
		c.Backoff = DefaultBackoff()
	}
	c.Backoff = append([]time.Duration(nil), c.Backoff...)
	switch {
	case c.Jitter == 0:
		c.Jitter = DefaultJitter
	case c.Jitter < 0:
		c.Jitter = 0
	}
	if c.Sleep == nil {
		c.Sleep = backoff.Sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.PageLimit == 0 {
		c.PageLimit = DefaultPageLimit
	}
	if c.CallInterval == 0 {
		c.CallInterval = DefaultCallInterval
	}
	if c.HeadLimit == 0 {
		c.HeadLimit = DefaultHeadLimit
	}
	if c.InitialWindow == 0 {
		c.InitialWindow = DefaultInitialWindow
	}
	if c.Resolution == 0 {
		c.Resolution = DefaultResolution
	}
	c.Resolution = max(c.Resolution.Truncate(time.Millisecond), time.Millisecond)
	c.InitialWindow = max(c.InitialWindow.Truncate(time.Millisecond), time.Millisecond)
	return c, nil
}
