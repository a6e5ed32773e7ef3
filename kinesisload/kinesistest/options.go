package kinesistest

import "time"

// Limits are the per-shard throughput limits the fake enforces, as real
// Kinesis does. A zero field switches that limit off. Throttled calls fail
// with *types.ProvisionedThroughputExceededException (PutRecords reports it
// per record).
type Limits struct {
	// GetRecordsPerSecond is how many GetRecords calls a shard accepts in
	// any one-second window (real Kinesis: 5).
	GetRecordsPerSecond int
	// ReadBytesPerSecond is the read throughput of a shard (real Kinesis:
	// 2 MiB/s). A call that returns more than the budget left is still
	// served, and later calls are refused until the budget has refilled, so
	// a 10 MiB read blocks the shard for about 5 s, as in Kinesis.
	ReadBytesPerSecond int64
	// WriteRecordsPerSecond is how many records a shard accepts per second
	// (real Kinesis: 1,000).
	WriteRecordsPerSecond int
	// WriteBytesPerSecond is the write throughput of a shard, counting data
	// and partition keys (real Kinesis: 1 MiB/s).
	WriteBytesPerSecond int64
	// GetShardIteratorPerSecond is how many GetShardIterator calls a shard
	// accepts in any one-second window (real Kinesis: 5). [DefaultLimits]
	// leaves it off; set it to test code that asks for iterators in a loop.
	GetShardIteratorPerSecond int
	// SubscriptionBytesPerSecond is the read throughput of one fan-out
	// consumer on one shard, its own beside every other consumer's and
	// the polling readers' (real Kinesis: 2 MiB/s).
	SubscriptionBytesPerSecond int64
	// SubscribeToShardPerSecond is how many SubscribeToShard calls a
	// consumer may make per second on one shard (real Kinesis: 1); more
	// give *types.LimitExceededException.
	SubscribeToShardPerSecond int
	// ResubscribeWindow is how long after a consumer's successful
	// SubscribeToShard on a shard another one for the same shard gives
	// *types.ResourceInUseException (real Kinesis: 5 s).
	ResubscribeWindow time.Duration
}

// DefaultLimits returns the data-plane limits of a provisioned Kinesis
// shard: 5 GetRecords calls and 2 MiB read per second, 1,000 records and
// 1 MiB written per second; for enhanced fan-out 2 MiB/s per consumer and
// shard, one SubscribeToShard call per second per consumer and shard, and
// none within 5 s of the last successful one. The GetShardIterator limit
// stays off.
func DefaultLimits() Limits {
	return Limits{
		GetRecordsPerSecond:        5,
		ReadBytesPerSecond:         2 << 20,
		WriteRecordsPerSecond:      1000,
		WriteBytesPerSecond:        1 << 20,
		SubscriptionBytesPerSecond: 2 << 20,
		SubscribeToShardPerSecond:  1,
		ResubscribeWindow:          5 * time.Second,
	}
}

// Defaults used by [New].
const (
	// DefaultRetention is how long records are kept unless [WithRetention]
	// says otherwise: 24 hours, as for a new Kinesis stream.
	DefaultRetention = 24 * time.Hour
	// DefaultShardLimit is the number of open shards an account may hold
	// unless [WithShardLimit] says otherwise.
	DefaultShardLimit = 500
	// DefaultRegion is the region in stream ARNs and error messages.
	DefaultRegion = "us-east-1"
	// DefaultAccountID is the account in stream ARNs and error messages.
	DefaultAccountID = "000000000000"
)

type config struct {
	clock      Clock
	retention  time.Duration
	limits     Limits
	shardLimit int
	region     string
	account    string
	// consumerActivation is how long a registered consumer stays
	// CREATING.
	consumerActivation time.Duration
}

// An Option configures [New]. Options are made only by this package's
// With... functions.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (o optionFunc) apply(c *config) { o(c) }

// WithClock makes the fake read time from c, typically a [ManualClock].
// Default: the real time.
func WithClock(c Clock) Option {
	return optionFunc(func(cfg *config) {
		if c != nil {
			cfg.clock = c
		}
	})
}

// WithRetention sets how long records are kept (on the fake's clock).
// Default: [DefaultRetention]. A non-positive d keeps the default.
func WithRetention(d time.Duration) Option {
	return optionFunc(func(cfg *config) {
		if d > 0 {
			cfg.retention = d
		}
	})
}

// WithLimits sets the per-shard throughput limits. Default:
// [DefaultLimits]. A zero field switches that limit off.
func WithLimits(l Limits) Option {
	return optionFunc(func(cfg *config) { cfg.limits = l })
}

// WithoutLimits switches every throughput limit off, like the emulators,
// which enforce none. The per-request limits (10,000 records and 10 MiB per
// GetRecords, 500 records per PutRecords, 1 MiB per record) still hold.
func WithoutLimits() Option {
	return WithLimits(Limits{})
}

// WithShardLimit sets how many open shards all streams of the fake may hold
// together; CreateStream and SplitShard beyond it fail with
// *types.LimitExceededException. Default: [DefaultShardLimit]. A
// non-positive n keeps the default.
func WithShardLimit(n int) Option {
	return optionFunc(func(cfg *config) {
		if n > 0 {
			cfg.shardLimit = n
		}
	})
}

// WithRegion sets the region used in stream ARNs. Default: [DefaultRegion].
func WithRegion(region string) Option {
	return optionFunc(func(cfg *config) {
		if region != "" {
			cfg.region = region
		}
	})
}

// WithAccountID sets the account used in stream ARNs and error messages.
// Default: [DefaultAccountID].
func WithAccountID(id string) Option {
	return optionFunc(func(cfg *config) {
		if id != "" {
			cfg.account = id
		}
	})
}

// WithConsumerActivation makes a registered fan-out consumer CREATING for
// d on the fake's clock before it is ACTIVE (Kinesis takes a few
// seconds). Default 0: ACTIVE at once (RegisterStreamConsumer's answer
// still says CREATING). A negative d keeps the default.
func WithConsumerActivation(d time.Duration) Option {
	return optionFunc(func(cfg *config) {
		if d >= 0 {
			cfg.consumerActivation = d
		}
	})
}
