package kotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tidemark/tidemark/kinesisload"
)

// ScopeName is the instrumentation scope of the Meter that [New] takes from
// its MeterProvider.
const ScopeName = "github.com/tidemark/tidemark/kinesisload/kotel"

// The attribute keys of the measurements; see the package documentation
// for which instrument carries which.
const (
	// AttrStream is the Kinesis stream's name. On every instrument.
	AttrStream = attribute.Key("tidemark.stream")
	// AttrShard is the shard ID: one series per shard. Left out when an
	// event concerns no single shard (a throttled or retried ListShards).
	AttrShard = attribute.Key("tidemark.shard")
	// AttrOp is the Kinesis operation or "Deliver" (the Sink).
	AttrOp = attribute.Key("tidemark.op")
	// AttrState is a shard state, such as "ACTIVE".
	AttrState = attribute.Key("tidemark.state")
	// AttrStateFrom is the state a shard left: "NONE" for a shard the
	// Loader saw for the first time.
	AttrStateFrom = attribute.Key("tidemark.state.from")
	// AttrStateTo is the state a shard entered.
	AttrStateTo = attribute.Key("tidemark.state.to")
	// AttrReason is why a lease was acquired, lost or handed off: the
	// String of a kinesisload.AcquireReason, LostReason or HandoffReason,
	// such as "expired" or "self_fenced".
	AttrReason = attribute.Key("tidemark.lease.reason")
	// AttrWindowReason is what closed a window of batches: the String of
	// a kinesisload.WindowReason, such as "wait" or "budget".
	AttrWindowReason = attribute.Key("tidemark.window.reason")
)

// StateNone is the value of [AttrStateFrom] when a shard had no state
// before (a shard the Loader saw for the first time).
const StateNone = "NONE"

// The default histogram bucket boundaries (listed in the package
// documentation), given to the MeterProvider as advice; an SDK View
// overrides them.
var (
	defaultBatchLatencyBuckets  = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	defaultInitDurationBuckets  = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	defaultBatchAttemptsBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20}
	defaultWindowRecordsBuckets = []float64{1, 10, 100, 1000, 10000, 100000, 1000000}
	defaultWindowBytesBuckets   = []float64{1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}
	defaultWindowShardsBuckets  = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
)

var (
	// ErrNilMeterProvider is returned by New when its MeterProvider is nil.
	ErrNilMeterProvider = errors.New("kotel: nil MeterProvider")
	// ErrNilTracerProvider is returned by NewTraces when its
	// TracerProvider is nil.
	ErrNilTracerProvider = errors.New("kotel: nil TracerProvider")
	// ErrInvalidOption is wrapped by the error New or NewTraces returns
	// for an invalid option, or one of the other constructor; the message
	// names the option and the value.
	ErrInvalidOption = errors.New("kotel: invalid option")
)

// Option configures [New] or [NewTraces]. Options are made only by this
// package's With functions; each one's doc says which constructor it
// configures, and the other constructor refuses it.
type Option interface {
	apply(*config)
}

type config struct {
	extra         []attribute.KeyValue
	latencyBounds []float64
	initBounds    []float64
	emptyFetches  bool
	// metricsOnly and tracesOnly name the options given that configure
	// only New or only NewTraces.
	metricsOnly, tracesOnly []string
	errs                    []error
}

// configure applies opts for the constructor named ctor, "New" or
// "NewTraces", and refuses a nil option and an option of the other one.
func configure(ctor string, opts []Option) (config, error) {
	cfg := config{latencyBounds: defaultBatchLatencyBuckets, initBounds: defaultInitDurationBuckets}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: nil Option", ErrInvalidOption))
			continue
		}
		o.apply(&cfg)
	}
	wrong, other := cfg.tracesOnly, "NewTraces"
	if ctor == "NewTraces" {
		wrong, other = cfg.metricsOnly, "New"
	}
	for _, name := range wrong {
		cfg.errs = append(cfg.errs, fmt.Errorf("%w: %s is an option of %s, not %s", ErrInvalidOption, name, other, ctor))
	}
	if len(cfg.errs) > 0 {
		return config{}, errors.Join(cfg.errs...)
	}
	return cfg, nil
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithAttributes adds attributes to every measurement of [New]'s Metrics
// and every span of [NewTraces]'s Traces, for example to tell apart two
// Loaders of one process that read the same stream, or to set
// messaging.consumer.group.name on the spans. A key must be valid and
// must not be one of this package's own (the Attr constants); NewTraces
// also refuses the semantic-convention keys it sets itself. Default: none.
func WithAttributes(kv ...attribute.KeyValue) Option {
	kv = slices.Clone(kv)
	return optionFunc(func(c *config) {
		for _, a := range kv {
			switch {
			case !a.Valid():
				c.errs = append(c.errs, fmt.Errorf("%w: WithAttributes: attribute %q is not valid", ErrInvalidOption, string(a.Key)))
			case slices.Contains(ownKeys, a.Key):
				c.errs = append(c.errs, fmt.Errorf("%w: WithAttributes: key %q is one of kotel's own", ErrInvalidOption, string(a.Key)))
			case slices.ContainsFunc(c.extra, func(b attribute.KeyValue) bool { return b.Key == a.Key }):
				c.errs = append(c.errs, fmt.Errorf("%w: WithAttributes: key %q given twice", ErrInvalidOption, string(a.Key)))
			default:
				c.extra = append(c.extra, a)
			}
		}
	})
}

// WithBatchLatencyBuckets sets the bucket boundaries of
// tidemark.batch.latency, in seconds: finite and strictly increasing.
// Default: 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
// 60, 120, 300. An option of New only.
func WithBatchLatencyBuckets(bounds ...float64) Option {
	bounds = slices.Clone(bounds)
	return optionFunc(func(c *config) {
		c.metricsOnly = append(c.metricsOnly, "WithBatchLatencyBuckets")
		if err := checkBounds("WithBatchLatencyBuckets", bounds); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.latencyBounds = bounds
	})
}

// WithInitDurationBuckets sets the bucket boundaries of
// tidemark.init.duration, in seconds: finite and strictly increasing.
// Default: 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
// 3600. An option of New only.
func WithInitDurationBuckets(bounds ...float64) Option {
	bounds = slices.Clone(bounds)
	return optionFunc(func(c *config) {
		c.metricsOnly = append(c.metricsOnly, "WithInitDurationBuckets")
		if err := checkBounds("WithInitDurationBuckets", bounds); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.initBounds = bounds
	})
}

func checkBounds(opt string, b []float64) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: %s: no boundaries", ErrInvalidOption, opt)
	}
	for i, x := range b {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%w: %s: boundary %d is %v, not finite", ErrInvalidOption, opt, i, x)
		}
		if i > 0 && x <= b[i-1] {
			return fmt.Errorf("%w: %s: boundary %d (%v) is not above boundary %d (%v)", ErrInvalidOption, opt, i, x, i-1, b[i-1])
		}
	}
	return nil
}

var ownKeys = append([]attribute.Key{AttrStream, AttrShard, AttrOp, AttrState, AttrStateFrom, AttrStateTo, AttrReason, AttrWindowReason}, spanOwnKeys...)

// liveStates are the states tidemark.shards reports; a COMPLETED shard is
// forgotten.
var liveStates = [...]kinesisload.ShardState{
	kinesisload.StateDiscovered,
	kinesisload.StatePendingParent,
	kinesisload.StateActive,
	kinesisload.StateDraining,
}

// Metrics records the Loader's hook events as OpenTelemetry measurements.
// It implements every kinesisload Hook interface: give it to
// [kinesisload.WithHooks]. One Metrics may serve Loaders of different
// streams (told apart by [AttrStream]); Loaders of one stream need a
// Metrics each, told apart by [WithAttributes], since the gauges keep one
// value per stream and shard. Its methods are safe for concurrent use.
type Metrics struct {
	extra []attribute.KeyValue

	recordsDelivered metric.Int64Counter
	bytesDelivered   metric.Int64Counter
	batchLatency     metric.Float64Histogram
	batchAttempts    metric.Int64Histogram
	pages            metric.Int64Counter
	recordsFetched   metric.Int64Counter
	bytesFetched     metric.Int64Counter
	behind           metric.Int64ObservableGauge
	throttles        metric.Int64Counter
	retries          metric.Int64Counter
	renewals         metric.Int64Counter
	stateChanges     metric.Int64Counter
	shards           metric.Int64ObservableGauge
	initDuration     metric.Float64Histogram
	initResolved     metric.Int64Counter
	initReused       metric.Int64Counter
	initProgress     metric.Float64Gauge
	initCalls        metric.Int64Counter
	initBytes        metric.Int64Counter
	decodeFailures   metric.Int64Counter
	outOfRange       metric.Int64Counter
	leasesAcquired   metric.Int64Counter
	leasesLost       metric.Int64Counter
	leasesHandedOff  metric.Int64Counter
	leasesHeld       metric.Int64ObservableGauge
	leaseEpoch       metric.Int64ObservableGauge
	windows          metric.Int64Counter
	windowRecords    metric.Int64Histogram
	windowBytes      metric.Int64Histogram
	windowShards     metric.Int64Histogram
	windowAge        metric.Float64Histogram
	windowWait       metric.Int64ObservableGauge

	reg       metric.Registration
	closeOnce sync.Once
	closeErr  error

	streams sync.Map // string -> *streamEntry
	shardsM sync.Map // shardKey -> *shardEntry
}

// streamEntry caches a stream's attribute sets.
type streamEntry struct {
	opt    metric.MeasurementOption
	add    []metric.AddOption                        // {opt}, so that Add allocates no slice
	record []metric.RecordOption                     // {opt}
	states [len(liveStates)]metric.MeasurementOption // stream, state
	// live is set once a shard of the stream reported a state: from then
	// on tidemark.shards reports every live state of the stream, 0 too.
	live atomic.Bool
	// leased is set once a lease of the stream was acquired: from then on
	// tidemark.leases.held reports the stream, 0 too.
	leased atomic.Bool
	// windowed is set once a window of the stream was delivered: from
	// then on every batch's wait in its window is kept for
	// tidemark.shard.window_wait, 0 too.
	windowed atomic.Bool
	// reasons caches the attribute sets of tidemark.windows, by reason.
	reasons sync.Map // kinesisload.WindowReason -> []metric.AddOption
}

type shardKey struct{ stream, shard string }

// shardEntry caches a shard's attribute set and holds what the observable
// gauges report for it.
type shardEntry struct {
	stream *streamEntry
	opt    metric.MeasurementOption
	add    []metric.AddOption // {opt}, so that Add allocates no slice
	behind atomic.Int64
	seen   atomic.Bool   // behind holds a value
	state  atomic.Uint32 // a kinesisload.ShardState; 0: none reported
	held   atomic.Bool   // this host holds the shard's lease
	epoch  atomic.Uint64 // the lease's epoch, while held
	wait   atomic.Int64  // the last batch's wait in its window, in ms
	waited atomic.Bool   // wait holds a value
}

// Interface checks: Metrics implements every hook.
var (
	_ kinesisload.HookBatchDelivered    = (*Metrics)(nil)
	_ kinesisload.HookWindowDelivered   = (*Metrics)(nil)
	_ kinesisload.HookShardState        = (*Metrics)(nil)
	_ kinesisload.HookInitResolved      = (*Metrics)(nil)
	_ kinesisload.HookInitProgress      = (*Metrics)(nil)
	_ kinesisload.HookFetched           = (*Metrics)(nil)
	_ kinesisload.HookThrottled         = (*Metrics)(nil)
	_ kinesisload.HookRetry             = (*Metrics)(nil)
	_ kinesisload.HookIteratorRenewed   = (*Metrics)(nil)
	_ kinesisload.HookDecodeFailed      = (*Metrics)(nil)
	_ kinesisload.HookHashKeyOutOfRange = (*Metrics)(nil)
	_ kinesisload.HookLeaseAcquired     = (*Metrics)(nil)
	_ kinesisload.HookLeaseLost         = (*Metrics)(nil)
	_ kinesisload.HookLeaseHandedOff    = (*Metrics)(nil)
)

// New creates the instruments (see the package documentation) on a Meter
// named [ScopeName] from mp, and registers the callback of the observable
// gauges; [Metrics.Close] unregisters it. The error wraps
// [ErrNilMeterProvider], [ErrInvalidOption], or the MeterProvider's error
// for the instrument it names.
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		return nil, ErrNilMeterProvider
	}
	cfg, err := configure("New", opts)
	if err != nil {
		return nil, err
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{extra: cfg.extra}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			errs = append(errs, fmt.Errorf("kotel: instrument %s: %w", name, err))
		}
		return c
	}
	m.recordsDelivered = counter("tidemark.records.delivered", "{record}", "Records the Sink accepted and whose checkpoint is durable.")
	m.bytesDelivered = counter("tidemark.bytes.delivered", "By", "Payload bytes of the records counted by tidemark.records.delivered.")
	m.pages = counter("tidemark.getrecords.pages", "{page}", "GetRecords pages read by the consume loops, empty ones included.")
	m.recordsFetched = counter("tidemark.records.fetched", "{record}", "Records read by GetRecords, before delivery.")
	m.bytesFetched = counter("tidemark.bytes.fetched", "By", "Payload bytes of the records counted by tidemark.records.fetched.")
	m.throttles = counter("tidemark.throttles", "{throttle}", "Kinesis calls refused for exceeding a limit; each is retried after a backoff.")
	m.retries = counter("tidemark.retries", "{retry}", "Failed Kinesis calls and Sink deliveries that are tried again.")
	m.renewals = counter("tidemark.iterator.renewals", "{renewal}", "Expired shard iterators replaced by one after the last record read.")
	m.stateChanges = counter("tidemark.shard.state_changes", "{change}", "Durable changes of a shard's state.")
	m.initResolved = counter("tidemark.init.resolved", "{shard}", "LATEST positions resolved by scanning during initialisation.")
	m.initReused = counter("tidemark.init.reused", "{shard}", "Shards whose initialisation kept a position stored by an earlier run.")
	m.initCalls = counter("tidemark.init.calls", "{call}", "Kinesis calls spent resolving LATEST positions.")
	m.initBytes = counter("tidemark.init.bytes", "By", "Record bytes read while resolving LATEST positions.")
	m.decodeFailures = counter("tidemark.kpl.decode_failures", "{record}", "Kinesis records that looked KPL-aggregated but failed a check, delivered as one plain record each.")
	m.outOfRange = counter("tidemark.kpl.out_of_range", "{record}", "User records of KPL aggregates whose hash key is outside their shard's range; delivered like the others.")
	m.leasesAcquired = counter("tidemark.leases.acquired", "{lease}", "Shard leases this host was granted and started reading under, by reason.")
	m.leasesLost = counter("tidemark.leases.lost", "{lease}", "Shard leases this host lost (the shard stopped at once; its uncommitted batch may be delivered again elsewhere), by reason.")
	m.leasesHandedOff = counter("tidemark.leases.handed_off", "{lease}", "Shard leases this host gave up on a planned move after committing its batch in flight, by reason.")
	m.windows = counter("tidemark.windows", "{window}", "Windows of batches delivered and committed, by what closed them.")
	intHist := func(name, unit, desc string, bounds []float64) metric.Int64Histogram {
		h, err := meter.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		if err != nil {
			errs = append(errs, fmt.Errorf("kotel: instrument %s: %w", name, err))
		}
		return h
	}
	m.windowRecords = intHist("tidemark.window.records", "{record}", "Records of each window delivered.", defaultWindowRecordsBuckets)
	m.windowBytes = intHist("tidemark.window.bytes", "By", "Payload bytes (data and partition keys) of each window delivered.", defaultWindowBytesBuckets)
	m.windowShards = intHist("tidemark.window.shards", "{shard}", "Shards with a batch in each window delivered: 1 unless the Sink is a MultiSink.", defaultWindowShardsBuckets)
	if m.windowAge, err = meter.Float64Histogram("tidemark.window.age", metric.WithUnit("s"),
		metric.WithDescription("How long each window's oldest record had waited in it when it closed."),
		metric.WithExplicitBucketBoundaries(cfg.latencyBounds...)); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.window.age: %w", err))
	}
	if m.windowWait, err = meter.Int64ObservableGauge("tidemark.shard.window_wait", metric.WithUnit("ms"),
		metric.WithDescription("How long the oldest record of the shard's last batch waited in its window.")); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.shard.window_wait: %w", err))
	}

	if m.batchLatency, err = meter.Float64Histogram("tidemark.batch.latency", metric.WithUnit("s"),
		metric.WithDescription("Time from the GetRecords call that returned a batch to the durable commit of its checkpoint."),
		metric.WithExplicitBucketBoundaries(cfg.latencyBounds...)); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.batch.latency: %w", err))
	}
	if m.batchAttempts, err = meter.Int64Histogram("tidemark.batch.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Sink calls a delivered batch took: 1 unless the Sink refused it."),
		metric.WithExplicitBucketBoundaries(defaultBatchAttemptsBuckets...)); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.batch.attempts: %w", err))
	}
	if m.initDuration, err = meter.Float64Histogram("tidemark.init.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an initialisation took, from loading the stored progress to journaling the resolved batch."),
		metric.WithExplicitBucketBoundaries(cfg.initBounds...)); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.init.duration: %w", err))
	}
	if m.initProgress, err = meter.Float64Gauge("tidemark.init.progress", metric.WithUnit("1"),
		metric.WithDescription("Fraction of the shards of the pending initialisation whose LATEST is resolved; 1 once journaled.")); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.init.progress: %w", err))
	}
	if m.behind, err = meter.Int64ObservableGauge("tidemark.shard.millis_behind_latest", metric.WithUnit("ms"),
		metric.WithDescription("How far the shard's last GetRecords page was behind the shard's tip.")); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.shard.millis_behind_latest: %w", err))
	}
	if m.shards, err = meter.Int64ObservableGauge("tidemark.shards", metric.WithUnit("{shard}"),
		metric.WithDescription("Shards not yet COMPLETED, by the last state the Loader reported for them.")); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.shards: %w", err))
	}
	if m.leasesHeld, err = meter.Int64ObservableGauge("tidemark.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Shard leases this host holds now.")); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.leases.held: %w", err))
	}
	if m.leaseEpoch, err = meter.Int64ObservableGauge("tidemark.lease.epoch", metric.WithUnit("{epoch}"),
		metric.WithDescription("The fencing epoch of each shard lease this host holds.")); err != nil {
		errs = append(errs, fmt.Errorf("kotel: instrument tidemark.lease.epoch: %w", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if m.reg, err = meter.RegisterCallback(m.observe, m.behind, m.shards, m.leasesHeld, m.leaseEpoch, m.windowWait); err != nil {
		return nil, fmt.Errorf("kotel: registering the callback of the observable gauges: %w", err)
	}
	return m, nil
}

// Close unregisters the callback of the observable gauges
// (tidemark.shard.millis_behind_latest, tidemark.shards,
// tidemark.leases.held and tidemark.lease.epoch), which then stop
// reporting. The synchronous instruments go on counting if hooks are
// still called. Close is idempotent and returns the first call's error.
func (m *Metrics) Close() error {
	m.closeOnce.Do(func() {
		if m.reg != nil {
			m.closeErr = m.reg.Unregister()
		}
	})
	return m.closeErr
}

// observe is the callback of the observable gauges.
func (m *Metrics) observe(_ context.Context, o metric.Observer) error {
	counts := map[*streamEntry]*[len(liveStates)]int64{}
	held := map[*streamEntry]int64{}
	m.streams.Range(func(_, v any) bool {
		s := v.(*streamEntry)
		if s.live.Load() {
			counts[s] = new([len(liveStates)]int64)
		}
		if s.leased.Load() {
			held[s] = 0
		}
		return true
	})
	m.shardsM.Range(func(_, v any) bool {
		e := v.(*shardEntry)
		if e.seen.Load() {
			o.ObserveInt64(m.behind, e.behind.Load(), e.opt)
		}
		if e.waited.Load() {
			o.ObserveInt64(m.windowWait, e.wait.Load(), e.opt)
		}
		if e.held.Load() {
			o.ObserveInt64(m.leaseEpoch, int64(min(e.epoch.Load(), math.MaxInt64)), e.opt)
			if _, ok := held[e.stream]; ok {
				held[e.stream]++
			}
		}
		st := kinesisload.ShardState(e.state.Load())
		if i := slices.Index(liveStates[:], st); i >= 0 {
			if c := counts[e.stream]; c != nil {
				c[i]++
			}
		}
		return true
	})
	for s, c := range counts {
		for i, n := range c {
			o.ObserveInt64(m.shards, n, s.states[i])
		}
	}
	for s, n := range held {
		o.ObserveInt64(m.leasesHeld, n, s.opt)
	}
	return nil
}

// set returns the attribute set of kv and the extra attributes.
func (m *Metrics) set(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(kv, m.extra...)...))
}

// shardAttrs returns the attributes of stream and, unless it is empty,
// shard, followed by kv.
func shardAttrs(stream, shard string, kv ...attribute.KeyValue) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 2+len(kv))
	a = append(a, AttrStream.String(stream))
	if shard != "" {
		a = append(a, AttrShard.String(shard))
	}
	return append(a, kv...)
}

// stream returns the cached entry of a stream.
func (m *Metrics) stream(name string) *streamEntry {
	if v, ok := m.streams.Load(name); ok {
		return v.(*streamEntry)
	}
	opt := m.set(AttrStream.String(name))
	s := &streamEntry{opt: opt, add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
	for i, st := range liveStates {
		s.states[i] = m.set(AttrStream.String(name), AttrState.String(st.String()))
	}
	v, _ := m.streams.LoadOrStore(name, s)
	return v.(*streamEntry)
}

// shard returns the cached entry of a shard.
func (m *Metrics) shard(stream, shard string) *shardEntry {
	k := shardKey{stream, shard}
	if v, ok := m.shardsM.Load(k); ok {
		return v.(*shardEntry)
	}
	opt := m.set(shardAttrs(stream, shard)...)
	e := &shardEntry{stream: m.stream(stream), opt: opt, add: []metric.AddOption{opt}}
	v, _ := m.shardsM.LoadOrStore(k, e)
	return v.(*shardEntry)
}

// OnBatchDelivered implements [kinesisload.HookBatchDelivered]: it counts
// tidemark.records.delivered and tidemark.bytes.delivered, records
// tidemark.batch.latency and tidemark.batch.attempts, and with windows
// keeps the batch's wait for tidemark.shard.window_wait.
func (m *Metrics) OnBatchDelivered(e kinesisload.BatchDelivered) {
	ctx := context.Background()
	sh := m.shard(e.Stream, e.ShardID)
	m.recordsDelivered.Add(ctx, int64(e.Records), sh.add...)
	m.bytesDelivered.Add(ctx, e.Bytes, sh.add...)
	m.batchLatency.Record(ctx, e.Latency.Seconds(), sh.stream.record...)
	m.batchAttempts.Record(ctx, int64(e.Attempts), sh.stream.record...)
	if e.Waited > 0 || sh.stream.windowed.Load() {
		sh.wait.Store(e.Waited.Milliseconds())
		sh.waited.Store(true)
	}
}

// OnWindowDelivered implements [kinesisload.HookWindowDelivered]: it
// counts tidemark.windows by what closed the window, and records
// tidemark.window.records, tidemark.window.bytes, tidemark.window.shards
// and tidemark.window.age.
func (m *Metrics) OnWindowDelivered(e kinesisload.WindowDelivered) {
	ctx := context.Background()
	s := m.stream(e.Stream)
	s.windowed.Store(true)
	add, ok := s.reasons.Load(e.Reason)
	if !ok {
		add, _ = s.reasons.LoadOrStore(e.Reason, []metric.AddOption{m.set(AttrStream.String(e.Stream), AttrWindowReason.String(e.Reason.String()))})
	}
	m.windows.Add(ctx, 1, add.([]metric.AddOption)...)
	m.windowRecords.Record(ctx, int64(e.Records), s.record...)
	m.windowBytes.Record(ctx, e.Bytes, s.record...)
	m.windowShards.Record(ctx, int64(e.Shards), s.record...)
	m.windowAge.Record(ctx, e.Age.Seconds(), s.record...)
}

// OnFetched implements [kinesisload.HookFetched]: it counts
// tidemark.getrecords.pages, tidemark.records.fetched and
// tidemark.bytes.fetched, and keeps the page's MillisBehindLatest for
// tidemark.shard.millis_behind_latest.
func (m *Metrics) OnFetched(e kinesisload.Fetched) {
	ctx := context.Background()
	sh := m.shard(e.Stream, e.ShardID)
	m.pages.Add(ctx, 1, sh.add...)
	// Empty pages too: a shard's series then exist, at 0, from its first
	// page on.
	m.recordsFetched.Add(ctx, int64(e.Records), sh.add...)
	m.bytesFetched.Add(ctx, e.Bytes, sh.add...)
	sh.behind.Store(e.MillisBehindLatest)
	sh.seen.Store(true)
}

// OnShardState implements [kinesisload.HookShardState]: it counts
// tidemark.shard.state_changes and keeps the shard's state for
// tidemark.shards. A shard that reaches COMPLETED is forgotten: it leaves
// tidemark.shards and tidemark.shard.millis_behind_latest.
func (m *Metrics) OnShardState(e kinesisload.ShardStateChanged) {
	from := StateNone
	if e.From != 0 {
		from = e.From.String()
	}
	m.stateChanges.Add(context.Background(), 1,
		m.set(AttrStream.String(e.Stream), AttrStateFrom.String(from), AttrStateTo.String(e.To.String())))
	m.stream(e.Stream).live.Store(true)
	if e.To == kinesisload.StateCompleted {
		m.shardsM.Delete(shardKey{e.Stream, e.ShardID})
		return
	}
	m.shard(e.Stream, e.ShardID).state.Store(uint32(e.To))
}

// OnInitResolved implements [kinesisload.HookInitResolved]: it records
// tidemark.init.duration, counts tidemark.init.resolved and
// tidemark.init.reused, and sets tidemark.init.progress to 1.
func (m *Metrics) OnInitResolved(e kinesisload.InitResolved) {
	ctx := context.Background()
	s := m.stream(e.Stream)
	m.initDuration.Record(ctx, e.Duration.Seconds(), s.opt)
	m.initResolved.Add(ctx, int64(e.Resolved), s.opt)
	m.initReused.Add(ctx, int64(e.Reused), s.opt)
	m.initProgress.Record(ctx, 1, s.opt)
}

// OnInitProgress implements [kinesisload.HookInitProgress]: it sets
// tidemark.init.progress to Done/Total and counts tidemark.init.calls and
// tidemark.init.bytes. Resolver workers call it concurrently, so for a
// moment the gauge may show a Done that another worker already passed;
// [Metrics.OnInitResolved] sets it to 1 at the end.
func (m *Metrics) OnInitProgress(e kinesisload.InitProgress) {
	ctx := context.Background()
	s := m.stream(e.Stream)
	if e.Total > 0 {
		m.initProgress.Record(ctx, float64(e.Done)/float64(e.Total), s.opt)
	}
	m.initCalls.Add(ctx, int64(e.Calls), s.opt)
	m.initBytes.Add(ctx, e.Bytes, s.opt)
}

// OnThrottled implements [kinesisload.HookThrottled]: it counts
// tidemark.throttles.
func (m *Metrics) OnThrottled(e kinesisload.Throttled) {
	m.throttles.Add(context.Background(), 1, m.set(shardAttrs(e.Stream, e.ShardID, AttrOp.String(e.Op))...))
}

// OnRetry implements [kinesisload.HookRetry]: it counts tidemark.retries.
func (m *Metrics) OnRetry(e kinesisload.Retry) {
	m.retries.Add(context.Background(), 1, m.set(shardAttrs(e.Stream, e.ShardID, AttrOp.String(e.Op))...))
}

// OnIteratorRenewed implements [kinesisload.HookIteratorRenewed]: it
// counts tidemark.iterator.renewals.
func (m *Metrics) OnIteratorRenewed(e kinesisload.IteratorRenewed) {
	m.renewals.Add(context.Background(), 1, m.shard(e.Stream, e.ShardID).add...)
}

// OnDecodeFailed implements [kinesisload.HookDecodeFailed]: it counts
// tidemark.kpl.decode_failures.
func (m *Metrics) OnDecodeFailed(e kinesisload.DecodeFailed) {
	m.decodeFailures.Add(context.Background(), 1, m.shard(e.Stream, e.ShardID).add...)
}

// OnHashKeyOutOfRange implements [kinesisload.HookHashKeyOutOfRange]: it
// counts the event's user records in tidemark.kpl.out_of_range.
func (m *Metrics) OnHashKeyOutOfRange(e kinesisload.HashKeyOutOfRange) {
	m.outOfRange.Add(context.Background(), int64(e.Records), m.shard(e.Stream, e.ShardID).add...)
}

// OnLeaseAcquired implements [kinesisload.HookLeaseAcquired]: it counts
// tidemark.leases.acquired and adds the lease, with its epoch, to
// tidemark.leases.held and tidemark.lease.epoch.
func (m *Metrics) OnLeaseAcquired(e kinesisload.LeaseAcquired) {
	m.leasesAcquired.Add(context.Background(), 1, m.set(shardAttrs(e.Stream, e.ShardID, AttrReason.String(e.Reason.String()))...))
	sh := m.shard(e.Stream, e.ShardID)
	sh.epoch.Store(e.Epoch)
	sh.held.Store(true)
	sh.stream.leased.Store(true)
}

// OnLeaseLost implements [kinesisload.HookLeaseLost]: it counts
// tidemark.leases.lost and removes the lease from tidemark.leases.held and
// tidemark.lease.epoch.
func (m *Metrics) OnLeaseLost(e kinesisload.LeaseLost) {
	m.leasesLost.Add(context.Background(), 1, m.set(shardAttrs(e.Stream, e.ShardID, AttrReason.String(e.Reason.String()))...))
	m.dropLease(e.Stream, e.ShardID)
}

// OnLeaseHandedOff implements [kinesisload.HookLeaseHandedOff]: it counts
// tidemark.leases.handed_off and removes the lease from
// tidemark.leases.held and tidemark.lease.epoch.
func (m *Metrics) OnLeaseHandedOff(e kinesisload.LeaseHandedOff) {
	m.leasesHandedOff.Add(context.Background(), 1, m.set(shardAttrs(e.Stream, e.ShardID, AttrReason.String(e.Reason.String()))...))
	m.dropLease(e.Stream, e.ShardID)
}

// dropLease marks a shard's lease as no longer held.
func (m *Metrics) dropLease(stream, shard string) {
	if v, ok := m.shardsM.Load(shardKey{stream, shard}); ok {
		v.(*shardEntry).held.Store(false)
	}
}
