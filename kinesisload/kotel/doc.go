// Package kotel records a kinesisload.Loader's hook events as OpenTelemetry
// metrics and spans.
//
// It is a module of its own, so that tidemark itself does not depend on
// OpenTelemetry, and it uses only the OpenTelemetry metric and trace APIs:
// give [New] the MeterProvider and [NewTraces] the TracerProvider of
// whichever SDK or bridge the program uses, and the [Metrics] and [Traces]
// they return to [kinesisload.WithHooks] (either one works alone):
//
//	m, err := kotel.New(otel.GetMeterProvider())
//	if err != nil { ... }
//	defer m.Close()
//	tr, err := kotel.NewTraces(otel.GetTracerProvider())
//	if err != nil { ... }
//	loader, err := kinesisload.New(cfg, kinesisload.WithHooks(m, tr))
//
// Every hook method is fast, never blocks, and is safe for concurrent use,
// as the Loader requires: one of Metrics makes a few atomic adds (the
// attribute set of each shard is built once and cached), one of Traces
// records at most one span.
//
// # Instruments
//
// All instruments come from one Meter named [ScopeName]. Attributes:
// S is tidemark.stream, H is tidemark.shard, O is tidemark.op (the Kinesis
// operation, such as "GetRecords", "ListShards", or "Deliver" for the
// Sink), State is tidemark.state, From and To are tidemark.state.from and
// tidemark.state.to (a shard state such as "ACTIVE"), Reason is
// tidemark.lease.reason (why a lease came or went, such as "expired"),
// Window is tidemark.window.reason (what closed a window, such as
// "wait"); every measurement also has the attributes given with
// [WithAttributes].
//
//	name                                 kind                  unit        attributes  fed by
//	tidemark.records.delivered           Int64Counter          {record}    S H         OnBatchDelivered
//	tidemark.bytes.delivered             Int64Counter          By          S H         OnBatchDelivered
//	tidemark.batch.latency               Float64Histogram      s           S           OnBatchDelivered
//	tidemark.batch.attempts              Int64Histogram        {attempt}   S           OnBatchDelivered
//	tidemark.getrecords.pages            Int64Counter          {page}      S H         OnFetched
//	tidemark.records.fetched             Int64Counter          {record}    S H         OnFetched
//	tidemark.bytes.fetched               Int64Counter          By          S H         OnFetched
//	tidemark.shard.millis_behind_latest  Int64ObservableGauge  ms          S H         OnFetched
//	tidemark.throttles                   Int64Counter          {throttle}  S H O       OnThrottled
//	tidemark.retries                     Int64Counter          {retry}     S H O       OnRetry
//	tidemark.iterator.renewals           Int64Counter          {renewal}   S H         OnIteratorRenewed
//	tidemark.shard.state_changes         Int64Counter          {change}    S From To   OnShardState
//	tidemark.shards                      Int64ObservableGauge  {shard}     S State     OnShardState
//	tidemark.init.duration               Float64Histogram      s           S           OnInitResolved
//	tidemark.init.resolved               Int64Counter          {shard}     S           OnInitResolved
//	tidemark.init.reused                 Int64Counter          {shard}     S           OnInitResolved
//	tidemark.init.progress               Float64Gauge          1           S           OnInitProgress, OnInitResolved
//	tidemark.init.calls                  Int64Counter          {call}      S           OnInitProgress
//	tidemark.init.bytes                  Int64Counter          By          S           OnInitProgress
//	tidemark.kpl.decode_failures         Int64Counter          {record}    S H         OnDecodeFailed
//	tidemark.kpl.out_of_range            Int64Counter          {record}    S H         OnHashKeyOutOfRange
//	tidemark.leases.acquired             Int64Counter          {lease}     S H Reason  OnLeaseAcquired
//	tidemark.leases.lost                 Int64Counter          {lease}     S H Reason  OnLeaseLost
//	tidemark.leases.handed_off           Int64Counter          {lease}     S H Reason  OnLeaseHandedOff
//	tidemark.leases.held                 Int64ObservableGauge  {lease}     S           OnLeaseAcquired, OnLeaseLost, OnLeaseHandedOff
//	tidemark.lease.epoch                 Int64ObservableGauge  {epoch}     S H         OnLeaseAcquired
//	tidemark.windows                     Int64Counter          {window}    S Window    OnWindowDelivered
//	tidemark.window.records              Int64Histogram        {record}    S           OnWindowDelivered
//	tidemark.window.bytes                Int64Histogram        By          S           OnWindowDelivered
//	tidemark.window.shards               Int64Histogram        {shard}     S           OnWindowDelivered
//	tidemark.window.age                  Float64Histogram      s           S           OnWindowDelivered
//	tidemark.shard.window_wait           Int64ObservableGauge  ms          S H         OnBatchDelivered
//
// What they mean:
//
//   - tidemark.records.delivered and tidemark.bytes.delivered count the
//     records (and their payload bytes) of every batch the Sink accepted and
//     whose checkpoint is durable. A record delivered again after a crash
//     counts again.
//   - tidemark.batch.latency is the time from the GetRecords call that
//     returned a batch to the durable commit of its checkpoint. Default
//     buckets: 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
//     60, 120, 300 ([WithBatchLatencyBuckets]).
//   - tidemark.batch.attempts is how many times the Sink was called for each
//     delivered batch: 1 unless it refused the batch. Buckets: 1, 2, 3, 4, 5,
//     6, 8, 10, 15, 20.
//   - tidemark.getrecords.pages counts every GetRecords page of the consume
//     loops, empty ones too; tidemark.records.fetched and
//     tidemark.bytes.fetched count what they held (the Loader reads one page
//     ahead of the Sink). A shard's series exist from its first page on, at
//     0 while it is idle.
//   - tidemark.shard.millis_behind_latest is the MillisBehindLatest of the
//     shard's last page: 0 at the tip. A shard appears after its first page
//     and disappears once it is COMPLETED.
//   - tidemark.throttles counts calls Kinesis refused for exceeding a limit;
//     tidemark.retries counts failed calls and deliveries tried again (a
//     throttled call is counted by both). Neither has tidemark.shard when
//     the call concerns no single shard (ListShards).
//   - tidemark.iterator.renewals counts expired shard iterators replaced.
//   - tidemark.shard.state_changes counts durable state changes, by the
//     states left and entered (DISCOVERED, PENDING_PARENT, ACTIVE, DRAINING,
//     COMPLETED; the state left is NONE for a shard the Loader saw for the
//     first time). The COMPLETED series with tidemark.state.to counts
//     finished shards.
//   - tidemark.shards counts the shards not yet COMPLETED by the last state
//     the Loader reported for them, one series per live state of every
//     stream that reported a state (0 included). A shard restored from an
//     earlier run's progress is counted from its first state change in
//     this process on: the Loader reports changes, not the states it
//     loads.
//   - tidemark.init.duration is how long each initialisation took, and
//     tidemark.init.resolved and tidemark.init.reused how many shards it
//     resolved by scanning or kept from an earlier run. Default buckets:
//     0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600
//     ([WithInitDurationBuckets]).
//   - tidemark.init.progress is the fraction (0 to 1) of the pending
//     initialisation's shards whose LATEST is resolved, and 1 once the
//     batch is journaled; tidemark.init.calls and tidemark.init.bytes are
//     what resolving cost, in Kinesis calls and record bytes read.
//   - tidemark.kpl.decode_failures counts Kinesis records that started
//     like a KPL aggregate but failed a check (each was delivered as one
//     plain record); tidemark.kpl.out_of_range counts user records of
//     aggregates whose hash key lies outside their shard's range (delivered
//     all the same). Both are 0 for a stream without KPL aggregation.
//   - tidemark.leases.acquired, tidemark.leases.lost and
//     tidemark.leases.handed_off count this host's lease events by reason:
//     acquired as initial, unowned, expired (an unplanned move), handoff
//     or reclaimed; lost as commit_refused, self_fenced, expired (each
//     may re-deliver the batch that was in flight) or sink_fenced (a
//     TransactionalSink refused a batch that another host had overtaken);
//     handed off as rebalance, close, pause or stop (planned: nothing
//     delivered twice, except after a hard stop). With the default
//     coordinator (one process) every shard is acquired as initial at each
//     start and handed off as close or pause; nothing is lost.
//   - tidemark.leases.held is how many leases this host holds (reported
//     from the first lease of the stream on, 0 included), and
//     tidemark.lease.epoch the fencing epoch of each one; a lease leaves
//     the gauge when it is lost or handed off, or its shard COMPLETED.
//   - tidemark.windows counts the windows of batches delivered and
//     committed (kinesisload.Config.MaxBatchWait and its bounds, or a
//     MultiSink) by what closed them: records, bytes, wait, budget (the
//     memory bound needed their pages: raise MaxBufferedBytes if it is
//     frequent), shard_end or stop. tidemark.window.records,
//     tidemark.window.bytes and tidemark.window.shards are the sizes of
//     each (default buckets: records 1 to 1,000,000 by tens; bytes 1 KiB,
//     16 KiB, 256 KiB, 1, 4, 16, 64 and 256 MiB; shards 1 to 4,096 by
//     doubling), and tidemark.window.age how long its oldest record had
//     waited in it when it closed (the buckets of tidemark.batch.latency,
//     [WithBatchLatencyBuckets]).
//     Without windows none of them has a data point.
//   - tidemark.shard.window_wait is, per shard, how long the oldest
//     record of its last batch waited in its window: the lag windows add
//     (kinesisload.Stats shows what waits in the open windows now). A
//     shard appears with its first batch in a window.
//
// # Cardinality
//
// tidemark.shard makes one series per shard of every instrument that has
// it, and every split or merge adds shards: a stream of N open shards has
// about 8·N shard series, plus up to 2·N per operation that was throttled
// or retried, per lease reason seen, and for KPL failures. Counters keep the series of a COMPLETED shard (an SDK with
// cumulative temporality exports them until the process ends); the
// observable gauge drops it. The histograms and the init and state
// instruments are per stream only. For a stream of thousands of shards,
// drop the attribute with an SDK View, for example
//
//	sdkmetric.NewView(
//		sdkmetric.Instrument{Name: "tidemark.*"},
//		sdkmetric.Stream{AttributeFilter: attribute.NewDenyKeysFilter(kotel.AttrShard)},
//	)
//
// and, for tidemark.shard.millis_behind_latest, aggregate the per-shard
// series (the maximum is how far behind the stream is) rather than
// dropping the attribute, which would keep one arbitrary shard's value.
//
// # Spans
//
// [Traces] records spans on one Tracer named [ScopeName], following the
// OpenTelemetry semantic conventions for messaging spans (v1.43.0, whose
// schema URL the Tracer has). A hook reports an event after the fact,
// with its duration where it has one: each span is recorded when its hook
// is called, started that far back (a hook without a duration makes a
// span of no length). Every span is a root span, as the hooks carry no
// context and Kinesis records carry no trace context to link to, so a
// sampler decides on each span alone.
//
//	name                     kind      status  fed by
//	process {stream}         CONSUMER  Unset   OnBatchDelivered
//	process {stream}         CONSUMER  Error   OnRetry, for Op "Deliver"
//	window {stream}          INTERNAL  Unset   OnWindowDelivered
//	fetch {stream}           INTERNAL  Unset   OnFetched, for a page with records (any page with WithEmptyFetchSpans)
//	initialise {stream}      INTERNAL  Unset   OnInitResolved
//	initialise {stream}      INTERNAL  Error   OnRetry, for Op "Initialise"
//	lease acquired {stream}  INTERNAL  Unset   OnLeaseAcquired
//	lease held {stream}      INTERNAL  Unset   OnLeaseHandedOff
//	lease held {stream}      INTERNAL  Error   OnLeaseLost
//
// Every span has messaging.system "aws_kinesis" ([MessagingSystem]: the
// conventions list no value for Kinesis and allow a custom one),
// messaging.destination.name (the stream), and the attributes given with
// [WithAttributes] (messaging.consumer.group.name, for one, is the
// program's to set); every span but initialise has
// messaging.destination.partition.id (the shard). Besides:
//
//   - process (Unset): a batch the Sink accepted and whose checkpoint is
//     durable. messaging.operation.name and messaging.operation.type
//     "process", messaging.batch.message_count (the records delivered),
//     tidemark.bytes (their payload bytes), tidemark.millis_behind_latest
//     and tidemark.attempts (the Sink calls it took: 1 unless the Sink
//     refused it). It spans from the moment the shard's consume loop took
//     the batch's page to the durable commit of its checkpoint
//     (BatchDelivered.Latency): the Sink's Deliver, with any refused tries
//     and their backoffs, and the commit. No hook reports a commit by
//     itself, so there is no commit span.
//     With windows it also has tidemark.window.wait: how long the
//     batch's oldest record waited in its window, in seconds.
//   - window: a window of batches delivered (kinesisload.Config.MaxBatchWait,
//     or a MultiSink's window across shards), from the read of its oldest
//     record (WindowDelivered.Age and Latency before the hook) to the
//     durable commit of every shard's checkpoint in it.
//     messaging.batch.message_count (its records), tidemark.bytes,
//     tidemark.window.shards, tidemark.window.pages, tidemark.window.reason
//     (what closed it), tidemark.window.age (how long its oldest record
//     had waited when it closed, in seconds) and tidemark.attempts (the
//     Sink calls it took). Its batches have process spans of their own,
//     which lie within it.
//   - process (Error): a try of Deliver that the Sink refused and that is
//     tried again. messaging.operation.name and messaging.operation.type
//     "process", error.type (the Go type of the error, as
//     semconv.ErrorType gives it), tidemark.retry.attempt (the failed tries
//     of the batch so far) and tidemark.retry.backoff (the wait before
//     the next, in seconds); the status has the error's message, and an
//     exception event records the error. It has no length: the hook gives
//     none. A refusal that is not tried again (Run stops with ErrSink)
//     has no hook, and no span.
//   - fetch: a page read by GetRecords, or an event of an enhanced fan-out
//     subscription. messaging.batch.message_count (the records in the
//     page), tidemark.bytes and tidemark.millis_behind_latest. No length:
//     the hook gives none. It is no "receive" span: the conventions keep
//     those for messages handed to the application, and forbid them for
//     messages a library reads ahead, as the Loader reads one page ahead
//     of the Sink.
//   - initialise (Unset): an initialisation, from its start (loading the
//     stored progress) to the journaling of its batch
//     (InitResolved.Duration). tidemark.init.shards (the shards left to
//     read), tidemark.init.resolved (LATEST positions resolved),
//     tidemark.init.reused (shards that kept a stored position),
//     tidemark.init.strategy ("probe" or "full-scan"),
//     tidemark.init.unanswered (probes taken for "no record there") and,
//     when anything was resolved, tidemark.init.t0 (the time on Kinesis's
//     clock the positions were resolved at, RFC 3339 UTC). An event
//     [EventShardResolved] marks each shard resolved (its InitProgress),
//     with messaging.destination.partition.id, tidemark.position (the
//     resolved start), tidemark.init.done and tidemark.init.total (shards
//     resolved so far, of how many), tidemark.init.calls and
//     tidemark.bytes (what resolving it cost). Traces keeps the latest
//     128 of them until the hook of the span.
//   - initialise (Error): an initialisation that failed and is started
//     over. error.type, tidemark.retry.attempt and tidemark.retry.backoff,
//     a status and an exception event, as for a refused Deliver; no
//     length. The shards it resolved are forgotten. An initialisation
//     that fails for good (Run returns its error) has no span.
//   - lease acquired: this host was granted a shard's lease and starts
//     reading the shard. tidemark.lease.epoch, tidemark.lease.reason
//     (initial, unowned, expired, handoff or reclaimed) and
//     tidemark.position (where reading resumes). No length.
//   - lease held (Unset): a lease this host gave up on a planned move,
//     over the time it held it (LeaseHandedOff.Held).
//     tidemark.lease.epoch, tidemark.lease.release "handed_off",
//     tidemark.lease.reason (rebalance, close, pause or stop) and
//     tidemark.position (the committed position the next owner resumes
//     from).
//   - lease held (Error): a lease this host lost, over the time it held
//     it (LeaseLost.Held): the batch in flight may be delivered again by
//     the next owner. tidemark.lease.epoch, tidemark.lease.release "lost",
//     tidemark.lease.reason and error.type (both the reason, such as
//     commit_refused, self_fenced, expired or sink_fenced); the status
//     says "lease lost:" and the reason, and an exception event records
//     the coordinator's error, if it gave one.
//
// A shard that reaches its end releases its lease without a lease hook,
// so without a lease held span (OnShardState reports it COMPLETED).
//
// Throttles, retries of Kinesis calls, iterator renewals, KPL decode
// failures and shard state changes make no span: the metrics count them.
package kotel
