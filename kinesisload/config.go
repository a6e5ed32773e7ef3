package kinesisload

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// Defaults of [Config]; [DefaultConfig] returns them.
const (
	DefaultListShardsInterval = 30 * time.Second
	DefaultIdleWait           = time.Second
	DefaultRecordsPerCall     = 10000
	DefaultCallTimeout        = 30 * time.Second
	// DefaultSinkRetries is the default Config.SinkRetries: a batch the
	// Sink refused with a transient error is retried without limit.
	DefaultSinkRetries    = SinkRetriesForever
	DefaultSinkBackoff    = time.Second
	DefaultMaxSinkBackoff = 30 * time.Second
	// DefaultMaxBufferedBytes is the default Config.MaxBufferedBytes:
	// 128 MiB.
	DefaultMaxBufferedBytes = 128 << 20
	// DefaultMaxConcurrentDeliveries is the default
	// Config.MaxConcurrentDeliveries.
	DefaultMaxConcurrentDeliveries = 64
	DefaultKinesisBackoff          = time.Second
	DefaultKinesisMaxBackoff       = 20 * time.Second
	// DefaultStreamWaitTimeout is the default Config.StreamWaitTimeout.
	DefaultStreamWaitTimeout = 10 * time.Minute
)

// Values of [Config.SinkRetries] besides a positive bound.
const (
	// SinkRetriesForever retries a batch the Sink refused with a
	// transient error without limit (the default, which the zero value
	// means too): the Loader then stops for the Sink only on a permanent
	// error ([Permanent]) or a panic, or when Run's context ends or the
	// Loader is closed.
	SinkRetriesForever = -1
	// SinkNoRetries stops Run at the Sink's first refusal of a batch.
	SinkNoRetries = -2
)

// Config configures a [Loader]. Stream and Sink are required, and so is
// Dir unless [WithStore] gives a store or [WithCoordinator] a coordinator.
// Every other zero field means its default, so a literal that sets only
// these behaves as [DefaultConfig] with them set.
type Config struct {
	// Stream is the name of the Kinesis stream to load (1 to 128 of
	// a-z, A-Z, 0-9, "_", "-" and ".", as Kinesis allows). Required.
	Stream string
	// Sink receives the records. Required. If it also implements
	// [TransactionalSink], delivery is exactly once.
	Sink Sink
	// Dir is the directory of the default [PositionStore], a file
	// journal. Required unless [WithStore] or [WithCoordinator] is given;
	// refused with WithCoordinator.
	Dir string
	// StartPosition is where a shard with no stored progress starts when
	// the Loader first runs on the stream. Default LATEST: the stream as
	// it stood at T0, when the first Run began, resolved for every shard
	// (open or closed) into just after its last record before T0 and
	// journaled before any record is read; a closed shard with no record
	// at or after T0 is complete at once. A child whose parent is read
	// (because the parent has records after T0, or started before them)
	// starts at TRIM_HORIZON instead, so that its records follow its
	// parent's without a gap; so do shards born later (children of a
	// split or merge). SHARD_END is not allowed, and Run refuses an
	// AT_TIMESTAMP later than Kinesis's clock (Kinesis refuses iterators
	// at a future time).
	StartPosition scan.Position
	// Shards optionally restricts loading to these shards, each with its
	// own start position (zero Position means StartPosition). Children of
	// a selected shard are followed. Progress stored for shards no longer
	// selected is kept, and ignored. Nil means every shard; an empty map
	// is refused, and so, by Run, is a shard the stream does not have.
	//
	// SHARD_END marks a closed shard complete without reading it, whatever
	// its stored progress: its remaining records are skipped on purpose and
	// its children are read. Run refuses it for an open shard. It is one way
	// out of a [ParentAfterChildError].
	Shards map[string]scan.Position
	// OutOfOrderShards names shards whose records the Loader may deliver
	// after records of their children: the other way out of a
	// [ParentAfterChildError], when a wider selection (or a lost opt-in)
	// tracks a parent whose child was already read. Such a parent is read
	// from its start; its children that were read already wait until it is
	// COMPLETED and then go on. Default none: Run refuses to deliver a
	// parent after its child.
	OutOfOrderShards []string
	// ListShardsInterval is how often the Loader lists the shards to find
	// new ones. Default 30 s. A ChildShards hint from GetRecords makes it
	// list sooner.
	ListShardsInterval time.Duration
	// IdleWait is how long a shard's loop waits after an empty page at
	// the tip of an open shard. Default 1 s; at least 200 ms, since
	// Kinesis allows 5 GetRecords calls per second per shard.
	IdleWait time.Duration
	// RecordsPerCall is the GetRecords Limit, 1 to 10000. Default 10000.
	RecordsPerCall int32
	// CallTimeout bounds each Kinesis call of the consume loops and of
	// ListShards. Default 30 s.
	CallTimeout time.Duration
	// SinkRetries is how many times a batch the Sink refused with a
	// transient error is retried before the Loader stops with [ErrSink]
	// naming the shard. Default (0, or [SinkRetriesForever]): without
	// limit, backing off (SinkBackoff to SinkMaxBackoff), each retry
	// reported to [HookRetry] and [Loader.Stats], so that an outage of
	// the destination is waited out. A positive value bounds the
	// retries; [SinkNoRetries] stops at the first refusal. A permanent
	// error ([Permanent]) or a panic stops Run at once, whatever this
	// says (see [Sink]).
	SinkRetries int
	// SinkBackoff is the first wait before retrying the Sink; it doubles
	// on each retry up to SinkMaxBackoff, with jitter. Default 1 s.
	SinkBackoff time.Duration
	// ResolveStrategy is how the Loader's own [scan.Resolver] finds the
	// tips that LATEST resolves to: [scan.StrategyProbe] (the zero value,
	// the default: AT_TIMESTAMP probes, cost growing with the logarithm of
	// the retained history) or [scan.StrategyFullScan] (reads every
	// retained record). Both give the same positions. With [WithResolver]
	// the given Resolver's strategy applies, and New refuses a different
	// non-zero value here.
	ResolveStrategy scan.Strategy
	// MaxBufferedBytes bounds the memory of the records the Loader holds
	// across all its shards: pages fetched ahead and pages in the Sink.
	// A record counts its data, partition key and sequence number plus
	// 192 bytes; while the Sink holds a batch, each user record of a KPL
	// aggregate beyond the first counts 192 bytes more, plus its keys
	// (its Data is the aggregate's, counted already). Before each GetRecords call a shard reserves the largest
	// page Kinesis can return (10 MiB, plus 192 bytes per record of
	// RecordsPerCall) and gives back what its page did not use; the page's
	// share is given back when Deliver returns (a Sink that keeps
	// Record.Data keeps memory this bound does not count). Shards wait for
	// the budget in turn, so none starves; a budget smaller than one
	// reservation still works, one page at a time. The Go heap holds up to
	// about twice what is counted before the garbage collector runs
	// (GOGC=100). Default 128 MiB: a thousand busy shards with a slow Sink
	// stay under 512 MiB of RSS, and a shard still reads its 2 MiB/s while
	// the Sink keeps up (see BENCHMARKS.md).
	MaxBufferedBytes int64
	// MaxConcurrentDeliveries bounds the Deliver calls in progress at
	// once across all shards (one shard never has more than one). A
	// batch waits its turn, in order; a batch waiting to be retried does
	// not hold a place. Default 64.
	MaxConcurrentDeliveries int
	// MaxBatchRecords, MaxBatchBytes and MaxBatchWait size the batches
	// for the destination. By default (all 0) every GetRecords page (or
	// fan-out event) of a shard is one Deliver. With any of them set, a
	// shard's pages accumulate in a window, delivered as one batch with
	// one checkpoint (after its last record) and committed once, while
	// the shard is read on at its full rate. A window closes once it
	// holds MaxBatchRecords records (user records, after KPL
	// de-aggregation) or MaxBatchBytes bytes (data and partition keys),
	// or once MaxBatchWait has passed since its oldest record was read,
	// whichever comes first; also when the shard's last records are in
	// it, when the Loader or the shard stops (the window is delivered
	// and committed first, as an in-flight batch is), and when the pages
	// it holds are needed for reading to go on within MaxBufferedBytes,
	// which windows count like every page held ([HookWindowDelivered]
	// says which). A window holds whole pages, so it may pass a bound by
	// less than a page (RecordsPerCall bounds a page); an aggregate is
	// never split. With MaxBatchWait 0 a window closes as soon as it
	// holds a page, and the pages read while the shard's previous window
	// is delivered make the next one (up to the bounds): batches grow
	// with the load and wait for nothing. A record waits at most about
	// MaxBatchWait plus one poll (Config.IdleWait at the tip) between
	// its arrival and its Deliver, while the Sink keeps up. With a
	// [MultiSink] the window spans every shard the Loader reads.
	MaxBatchRecords int
	MaxBatchBytes   int64
	MaxBatchWait    time.Duration
	// OnStreamRecreated says what Run does when the stream was deleted and
	// created again under its name since its progress was stored (its
	// ARN or creation timestamp differs from the journaled ones; checked
	// on every Run and after every ListShards). Default
	// [StreamRecreatedStop]: Run stops with a [*StreamMismatchError].
	// [StreamRecreatedStartOver] archives the old progress and reads the
	// new stream as on a first run.
	OnStreamRecreated StreamRecreated
	// StreamWaitTimeout bounds how long Run waits, with OnStreamRecreated
	// = [StreamRecreatedStartOver], for a stream that is gone, DELETING
	// or CREATING (deleted and being created again under its name: on
	// AWS each takes seconds to minutes) to be ACTIVE again; it then
	// checks the stream's identity and starts over. The wait is logged
	// and shown in Stats (WaitingForStream). A stream still not back when
	// it ends stops Run with the error that began the wait, of class
	// [ErrKinesis]. Default 10 minutes. Without start-over, such a stream
	// stops Run at once.
	StreamWaitTimeout time.Duration
	// SinkMaxBackoff caps the wait between two tries of the Sink.
	// Default 30 s.
	SinkMaxBackoff time.Duration
	// KinesisMaxAttempts bounds how many times one Kinesis call (and one
	// initialisation) is tried after transient failures (throttling, 5xx,
	// timeouts, connection errors, expired iterators) before the Loader
	// stops with [ErrKinesis]. Default 0: without limit, so that an outage
	// of any length is waited out and the Loader catches up after it.
	KinesisMaxAttempts int
	// KinesisBackoff is the first wait after a transient Kinesis failure;
	// it doubles on each retry up to KinesisMaxBackoff, with jitter
	// (between half and all of it). A throttled call waits half as long.
	// Default 1 s.
	KinesisBackoff time.Duration
	// KinesisMaxBackoff caps the wait between two tries of a Kinesis
	// call, and so bounds how long after an outage ends the Loader reads
	// again. Default 20 s; at least KinesisBackoff.
	KinesisMaxBackoff time.Duration
	// Decoder turns each Kinesis record into the user records the Sink
	// receives. Default nil: KPL de-aggregation (a record aggregated by
	// the Kinesis Producer Library is delivered as its user records,
	// anything else as read; see the package docs, "KPL aggregation").
	// [RawDecoder] turns de-aggregation off.
	Decoder Decoder
	// ReadMode is how shards are read: [ReadPolling] (GetRecords, the
	// default) or [ReadFanOut] (enhanced fan-out, SubscribeToShard, with
	// ConsumerName). Resolving LATEST reads with GetRecords in both modes.
	ReadMode ReadMode
	// ConsumerName is the stream consumer that [ReadFanOut] reads with,
	// registered by the Loader if the stream has none of that name and
	// reused otherwise (never deregistered: see [DeregisterConsumer]).
	// Required with ReadFanOut, refused with ReadPolling; 1 to 128
	// characters of a-z, A-Z, 0-9, '_', '-' and '.'. Default "".
	ConsumerName string
	// StopAt, if set, bounds the Run to a window of the stream: a
	// bounded replay (a backfill, an hour reprocessed under a journal of
	// its own, a test). Each shard is read until its first record that
	// arrived (ApproximateArrivalTimestamp, to the millisecond) at or
	// after StopAt, which is not delivered, or until its end; it is then
	// done for this Run. A shard read to its tip with no such record is
	// done once Kinesis's clock (read from its answers) is StopAtSettle
	// past StopAt. Children of shards that closed before the bound are
	// followed (the parents are COMPLETED); children of a shard that
	// reached the bound are done unread (their records arrived after
	// it). Run returns nil once every shard is done; a later Run with the
	// same journal finds them done again, reading nothing more. Every
	// record that arrived before StopAt and at or after each shard's
	// start is delivered (at least once, as always), none at or after
	// it. Refused with [WithCoordinator]: a replay runs on one host,
	// with its journal (Config.Dir) or store. With StartPosition
	// AT_TIMESTAMP, it must be later. Default: zero, no bound.
	StopAt time.Time
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		StartPosition:      scan.Latest(),
		ListShardsInterval: DefaultListShardsInterval,
		IdleWait:           DefaultIdleWait,
		RecordsPerCall:     DefaultRecordsPerCall,
		CallTimeout:        DefaultCallTimeout,
		SinkRetries:        DefaultSinkRetries,
		SinkBackoff:        DefaultSinkBackoff,

		MaxBufferedBytes:        DefaultMaxBufferedBytes,
		MaxConcurrentDeliveries: DefaultMaxConcurrentDeliveries,
		SinkMaxBackoff:          DefaultMaxSinkBackoff,
		KinesisBackoff:          DefaultKinesisBackoff,
		KinesisMaxBackoff:       DefaultKinesisMaxBackoff,
		StreamWaitTimeout:       DefaultStreamWaitTimeout,
	}
}

// Validate reports the first invalid field, by name and value. A zero
// duration, StartPosition or RecordsPerCall means its default (see
// [DefaultConfig]), so Validate is also correct on a Config that did not
// start from DefaultConfig; SinkRetries 0 means its default (no limit)
// and KinesisMaxAttempts 0 no limit.
func (c Config) Validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, field, v, why)
	}
	switch {
	case c.Stream == "":
		return bad("Stream", `""`, "a stream name is required")
	case len(c.Stream) > 128:
		return bad("Stream", c.Stream, "longer than 128 characters")
	case !streamNameExpr.MatchString(c.Stream):
		return bad("Stream", fmt.Sprintf("%q", c.Stream), "a Kinesis stream name is a-z, A-Z, 0-9, '_', '-' and '.' only")
	case c.Sink == nil:
		return bad("Sink", nil, "a Sink is required")
	case c.ListShardsInterval < 0:
		return bad("ListShardsInterval", c.ListShardsInterval, "must not be negative")
	case c.IdleWait < 0 || (c.IdleWait > 0 && c.IdleWait < 200*time.Millisecond):
		return bad("IdleWait", c.IdleWait, "must be at least 200ms (5 GetRecords calls per second per shard)")
	case c.RecordsPerCall < 0 || c.RecordsPerCall > 10000:
		return bad("RecordsPerCall", c.RecordsPerCall, "must be 1 to 10000")
	case c.CallTimeout < 0:
		return bad("CallTimeout", c.CallTimeout, "must not be negative")
	case c.SinkRetries < SinkNoRetries:
		return bad("SinkRetries", c.SinkRetries, "must be positive, 0 (the default: without limit), SinkRetriesForever (-1) or SinkNoRetries (-2)")
	case c.SinkBackoff < 0:
		return bad("SinkBackoff", c.SinkBackoff, "must not be negative")
	case c.ResolveStrategy > scan.StrategyFullScan:
		return bad("ResolveStrategy", c.ResolveStrategy, "unknown strategy")
	case c.MaxBufferedBytes < 0:
		return bad("MaxBufferedBytes", c.MaxBufferedBytes, "must not be negative (0 means the default)")
	case c.MaxBatchRecords < 0:
		return bad("MaxBatchRecords", c.MaxBatchRecords, "must not be negative (0 means no bound)")
	case c.MaxBatchBytes < 0:
		return bad("MaxBatchBytes", c.MaxBatchBytes, "must not be negative (0 means no bound)")
	case c.MaxBatchWait < 0:
		return bad("MaxBatchWait", c.MaxBatchWait, "must not be negative (0 means no wait)")
	case c.MaxConcurrentDeliveries < 0:
		return bad("MaxConcurrentDeliveries", c.MaxConcurrentDeliveries, "must not be negative (0 means the default)")
	case c.OnStreamRecreated > StreamRecreatedStartOver:
		return bad("OnStreamRecreated", c.OnStreamRecreated, "must be StreamRecreatedStop or StreamRecreatedStartOver")
	case c.StreamWaitTimeout < 0:
		return bad("StreamWaitTimeout", c.StreamWaitTimeout, "must not be negative (0 means the default)")
	case c.SinkMaxBackoff < 0:
		return bad("SinkMaxBackoff", c.SinkMaxBackoff, "must not be negative")
	case c.SinkMaxBackoff > 0 && c.SinkMaxBackoff < c.SinkBackoff:
		return bad("SinkMaxBackoff", c.SinkMaxBackoff, fmt.Sprintf("must be at least SinkBackoff (%v)", c.SinkBackoff))
	case c.KinesisMaxAttempts < 0:
		return bad("KinesisMaxAttempts", c.KinesisMaxAttempts, "must not be negative (0 means without limit)")
	case c.KinesisBackoff < 0:
		return bad("KinesisBackoff", c.KinesisBackoff, "must not be negative")
	case c.KinesisMaxBackoff < 0:
		return bad("KinesisMaxBackoff", c.KinesisMaxBackoff, "must not be negative")
	case c.KinesisMaxBackoff > 0 && c.KinesisMaxBackoff < c.KinesisBackoff:
		return bad("KinesisMaxBackoff", c.KinesisMaxBackoff, fmt.Sprintf("must be at least KinesisBackoff (%v)", c.KinesisBackoff))
	case c.ReadMode != ReadPolling && c.ReadMode != ReadFanOut:
		return bad("ReadMode", c.ReadMode, "must be ReadPolling or ReadFanOut")
	case c.ReadMode == ReadFanOut && c.ConsumerName == "":
		return bad("ConsumerName", `""`, "ReadMode fan-out needs a consumer name")
	case c.ReadMode == ReadFanOut && !consumerNameExpr.MatchString(c.ConsumerName):
		return bad("ConsumerName", c.ConsumerName, "must be 1 to 128 characters of a-z, A-Z, 0-9, '_', '-' and '.'")
	case c.ReadMode == ReadPolling && c.ConsumerName != "":
		return bad("ConsumerName", c.ConsumerName, "used only with ReadMode fan-out")
	}
	if c.StartPosition.Kind != 0 {
		if err := c.StartPosition.Validate(); err != nil {
			return bad("StartPosition", c.StartPosition, err.Error())
		}
		if c.StartPosition.Kind == scan.KindShardEnd {
			return bad("StartPosition", c.StartPosition, "SHARD_END is not a start")
		}
	}
	if c.Shards != nil && len(c.Shards) == 0 {
		return bad("Shards", "map[]", "an empty selection reads nothing; use nil for every shard")
	}
	for id, p := range c.Shards {
		if id == "" {
			return bad("Shards", `""`, "empty shard ID")
		}
		if p.Kind == 0 {
			continue
		}
		if err := p.Validate(); err != nil {
			return bad("Shards["+id+"]", p, err.Error())
		}
	}
	for i, id := range c.OutOfOrderShards {
		if id == "" {
			return bad(fmt.Sprintf("OutOfOrderShards[%d]", i), `""`, "empty shard ID")
		}
	}
	return c.validateStopAt()
}

// streamNameExpr is what Kinesis allows in a stream name.
var streamNameExpr = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// withDefaults fills zero fields with their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.StartPosition.Kind == 0 {
		c.StartPosition = d.StartPosition
	}
	if c.ListShardsInterval == 0 {
		c.ListShardsInterval = d.ListShardsInterval
	}
	if c.IdleWait == 0 {
		c.IdleWait = d.IdleWait
	}
	if c.RecordsPerCall == 0 {
		c.RecordsPerCall = d.RecordsPerCall
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.SinkRetries == 0 {
		c.SinkRetries = d.SinkRetries
	}
	if c.SinkBackoff == 0 {
		c.SinkBackoff = d.SinkBackoff
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = d.MaxBufferedBytes
	}
	if c.MaxConcurrentDeliveries == 0 {
		c.MaxConcurrentDeliveries = d.MaxConcurrentDeliveries
	}
	if c.SinkMaxBackoff == 0 {
		c.SinkMaxBackoff = max(d.SinkMaxBackoff, c.SinkBackoff)
	}
	if c.KinesisBackoff == 0 {
		c.KinesisBackoff = d.KinesisBackoff
	}
	if c.KinesisMaxBackoff == 0 {
		c.KinesisMaxBackoff = max(d.KinesisMaxBackoff, c.KinesisBackoff)
	}
	if c.StreamWaitTimeout == 0 {
		c.StreamWaitTimeout = d.StreamWaitTimeout
	}
	return c
}

// Option configures a [Loader] beyond its [Config]. Options are made only
// by this package's With functions.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	client   scan.Client
	store    PositionStore
	coord    Coordinator
	resolver *scan.Resolver
	logger   *slog.Logger
	hooks    []Hook
	// tune adjusts every reader's configuration; tests use it to pace
	// reads faster than Kinesis allows. tuneFanOut does the same for the
	// fan-out readers, after tune.
	tune       func(*readerConfig)
	tuneFanOut func(*fanoutConfig)
	// clock is the host's wall clock (WithClock). Default time.Now.
	clock func() time.Time
}

// WithClock sets this host's wall clock, for simulations and tests that
// step or skew it: the time of [Stats] (LastReadAt, ReadAge), of the logs
// that repeat at most once an interval, and the moment Run began, from
// which T0 is taken (only when Kinesis's answer carries no Date; see
// [scan.HostClockBound]), and when to ask Kinesis whether Config.StopAt
// has passed (its answer decides). No other decision reads the host's
// wall clock: leases and timeouts use durations, and positions
// Kinesis's clock.
// Readings should keep Go's monotonic clock (derive them from time.Now).
// Default time.Now.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(o *options) { o.clock = now })
}

// WithClient sets the Kinesis client. Anything that satisfies [scan.Client]
// will do; a *kinesis.Client as is. Default: a client from the standard AWS
// configuration (environment, shared files, instance role), loaded when Run
// starts.
func WithClient(c scan.Client) Option {
	return optionFunc(func(o *options) { o.client = c })
}

// WithStore sets the [PositionStore]. Default: a [JournalStore] on a file
// journal in Config.Dir, opened by Run and closed when Run returns.
func WithStore(s PositionStore) Option {
	return optionFunc(func(o *options) { o.store = s })
}

// WithCoordinator makes the Loader one host of a fleet that shares the
// stream through c (see [Coordinator]): it reads only the shards whose
// leases c grants it, initialises the stream once for the whole fleet, and
// commits every position under the lease's fencing epoch. c keeps the
// progress, so Config.Dir and [WithStore] are refused with it. Default: the
// single process, [NewStoreCoordinator] over the journal in Config.Dir (or
// the store of WithStore), which reads every shard.
func WithCoordinator(c Coordinator) Option {
	return optionFunc(func(o *options) { o.coord = c })
}

// WithResolver sets the [scan.Resolver] that resolves LATEST positions;
// its own strategy applies (see Config.ResolveStrategy).
// Share one Resolver between every Loader of a process so that its worker
// budget bounds them all; its QueueSize must then hold the largest batch
// (the open LATEST shards of a stream), or initialisation fails with
// [scan.ErrQueueFull]. Default: a Resolver of this Loader's own, with
// [scan.Config] defaults but a queue large enough for any stream.
func WithResolver(r *scan.Resolver) Option {
	return optionFunc(func(o *options) { o.resolver = r })
}

// WithLogger sets the logger. Default: [slog.Default].
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}

// WithHooks adds hooks; see [Hook]. Default: none.
func WithHooks(hs ...Hook) Option {
	return optionFunc(func(o *options) { o.hooks = append(o.hooks, hs...) })
}
