// Package scan resolves the symbolic start position LATEST of Kinesis shards
// into concrete positions that can be persisted, and defines the position
// types tidemark stores.
//
// # Why resolve LATEST
//
// LATEST means "after the newest record at the moment an iterator is
// requested". A reader that keeps LATEST as its stored position and loses its
// iterator before committing a record asks for LATEST again, gets a later
// tip, and silently skips every record in between. A [Resolver] therefore
// turns LATEST into the tip's sequence number, to be persisted as
// AFTER_SEQUENCE_NUMBER, or into TRIM_HORIZON when the shard holds no record,
// before any record is read.
//
// # LATEST at T0
//
// "The tip when the scan catches up" depends on how long the scan took: with
// 1,000 shards at the real limits that is minutes after the start, and a
// retried batch resolves later again. So a batch is resolved at a fixed
// time, T0 ([Request.At]), on Kinesis's clock: every shard resolves to just
// after the last record whose ApproximateArrivalTimestamp is before T0, or to
// TRIM_HORIZON when none is. "Before" is strict and to the millisecond, the
// precision of arrival times: T0 is truncated to the millisecond, and a
// record that arrived in T0's own millisecond is after the start. Arrival
// times are taken as non-decreasing in shard order (Kinesis stamps records
// as it appends them), so the resolved position is also "just before the
// first record that arrived at or after T0". Records that arrive at or after
// T0 are after the start whatever the scan's duration, and resolving the
// same batch again at the same T0 gives the same positions. T0 must not be
// later than Kinesis's clock when the batch is resolved. A zero At keeps the
// older meaning (the tip when each scan catches up).
//
// Where T0 comes from: [Resolver.Now] reads Kinesis's clock from an answer,
// never from this host's wall clock. Every HTTP response of Kinesis carries
// a Date header, which the SDK keeps in the response metadata
// ([ServerTime]; an in-memory Kinesis sets it with [SetServerTime]). Now
// makes one ListShards call and returns that Date minus the time elapsed on
// this host (a duration, measured on the monotonic clock) since the call
// began. The Date has whole seconds, floored, and it was stamped after the
// call began, so the result is never later than Kinesis's clock when Now was
// called, and at most one second plus the call's duration earlier: a few
// records from the second before the start may count as after it, and no
// record that arrived after the start is ever before it. The records'
// arrival times would be finer but exist only where records do; the Date is
// in every answer. Only when an answer carries no server time (a Client that
// does not pass the SDK's metadata through) is this host's clock used, and
// then minus [HostClockBound] (5 minutes, the skew beyond which AWS refuses
// a signed request), the bound within which it is trusted.
//
// # Batches, workers, bounds
//
// One Resolver serves a whole process. [Resolver.Resolve] takes a batch of
// shards ([Request]) and returns a position for every shard or an error and
// no position at all. The Resolver's worker budget ([Config.Workers],
// default 8) bounds the shard scans running at once across all batches; a
// batch uses at most min(shards, workers) goroutines (a
// [golang.org/x/sync/errgroup.Group] with SetLimit), each of which waits for
// a token of the shared budget before it claims a shard. Shards waiting for a
// token count against [Config.QueueSize]; a batch that does not fit fails at
// once with [ErrQueueFull]. Every Kinesis call has its own timeout
// ([Config.CallTimeout]), and calls of one operation on one shard are paced
// [Config.CallInterval] apart (5 per second, the Kinesis limit). Retryable
// errors are retried a bounded number of times ([Config.Retries]) with
// backoff and jitter; throttling is retried with the same backoff for as
// long as the batch's context and deadline allow, without using up that
// budget. The SDK's own retries are switched off for these calls so that
// the bounds are the true ones. An
// expired iterator is re-acquired after the last record seen, or at the
// read's start. [Config.BatchTimeout] bounds a whole batch, including the
// time it waits. Workers check for cancellation before claiming a shard,
// around every call and while backing off, and every worker has exited
// before Resolve returns; a panic in a scan becomes an error naming the
// shard. Errors name the stream and the shard ([ShardError]). A scan holds
// one page of records at a time, and keeps no payload.
//
// # Finding the tip
//
// The tip is reached when a GetRecords page reports MillisBehindLatest == 0
// and is not full (some implementations report 0 too early, so a page of
// Limit records means "keep reading"), or when a closed shard's iterator ends
// (NextShardIterator is nil). Empty pages before that are followed: Kinesis
// returns them in the middle of a shard too. A page that does not report
// MillisBehindLatest is never taken for the tip of an open shard, so an
// implementation that omits it is read until the batch's deadline. The last
// record seen on the way is the tip.
//
// [StrategyFullScan] reads from TRIM_HORIZON to the tip, as the seed did. Its
// cost is the retained history: a 7-day shard written at 1 MB/s holds 600 GB,
// and reads are capped at 2 MB/s per shard.
//
// [StrategyProbe], the default, reads almost none of it. A probe asks "is
// there a record at or after time t?": an AT_TIMESTAMP iterator and
// GetRecords with Limit 1, following empty pages until it sees a record (yes,
// and which) or reaches the tip (no). The scan:
//
//  1. reads the head: the first page from TRIM_HORIZON, of at most
//     [Config.HeadLimit] records (default 100), following empty pages. If
//     that page is at the tip, it is the whole shard, and the answer is
//     decided by the full scan's own rule: its last record, or TRIM_HORIZON
//     when it holds none. Small and idle shards cost one read, as in the
//     full scan. Otherwise the page's last record is the anchor (below) and
//     its arrival time a lower bound lo;
//  2. probes now, now-1s, now-4s, now-16s, ... (the window grows fourfold
//     while it holds nothing, from [Config.InitialWindow]) until a probe
//     finds a record or the window reaches lo; an empty probe at t sets the
//     upper bound hi = t;
//  3. if even the probe at now found a record (this host's clock is behind
//     Kinesis, or records are arriving), probes lo+1s, lo+4s, ... forwards
//     until one finds nothing, which sets hi;
//  4. bisects [lo, hi) on time until it is narrower than
//     [Config.Resolution]; each probe that finds a record moves lo to the
//     later of the probe time and that record's arrival time, and remembers
//     the record as the anchor;
//  5. reads from the anchor (AT_SEQUENCE_NUMBER) to the tip, with full pages.
//
// Steps 2 to 4 take O(log(history / resolution)) probes of one record each,
// step 1 reads at most HeadLimit records, and step 5 reads the records that
// arrived within one resolution window (plus whatever arrives during the
// scan), so the cost grows with the logarithm of the history, not with the
// history. The price is a few dozen small calls where the full scan of a
// tiny shard makes two; at the Kinesis limit of 5 GetRecords calls per
// second per shard that is a few seconds per shard, against days for a
// full week of history. Throttling is retried, without counting against
// [Config.Retries].
//
// # Why the probe strategy returns what the full scan returns
//
// Correctness never depends on the clock or on arrival times. The final read
// starts at the anchor, a record a probe has seen, so it sees at least one
// record; it reads to the tip by the same rule as the full scan; so the last
// record it sees is the tip, the same record the full scan would end on. The
// times only decide where the anchor is, that is, how much the final read
// costs. Two observations make the search sound as an optimisation:
//
//   - A probe that reaches the tip without a record proves that no record
//     was at or after t when it ran. Records that arrive later move the tip;
//     the final read follows the tip to wherever it is when the read catches
//     up, exactly as the full scan does (the tip observed at catch-up is the
//     resolved start, not a cross-shard snapshot).
//   - If the final read sees no record at all, the anchor expired between
//     the probe and the read (it was at the edge of retention). The scan then
//     falls back to a full scan from TRIM_HORIZON, which on such a shard is
//     short. So a shard whose records have all expired resolves to
//     TRIM_HORIZON in both strategies: step 1 finds nothing.
//
// Records that share a timestamp: arrival times have millisecond precision,
// and AT_TIMESTAMP t starts at the first record that arrived at or after t,
// so a probe cannot tell records of one millisecond apart, and bisection
// stops at a window of at least one millisecond. That costs nothing in
// correctness: the final read starts at the anchor and reads every record
// after it, by sequence number, whatever their timestamps, so the records
// sharing the last millisecond are all read and the last of them is the
// tip. A thousand records in one millisecond cost one page, not a wrong
// answer.
//
// Clock skew: probe times come from Kinesis's clock when it is known, from
// the HTTP Date of a real response
// ([github.com/aws/aws-sdk-go-v2/aws/middleware.GetServerTime]), advanced by
// the time elapsed on this host since; otherwise (the in-memory Kinesis sets
// no Date) from [Config.Now]. The Date has whole seconds, so when this host's
// clock falls within that second the two agree and the finer local clock is
// used. Arrival times are Kinesis's clock too. If the clock used is ahead,
// the probe at "now" is in Kinesis's future: it finds nothing, or Kinesis
// refuses it ("The timestampInMillis parameter cannot be greater than the
// currentTimestampInMillis" from AWS, "Timestamp cannot be in the future"
// from kinesis-mock), which the probe takes as nothing found, since no
// record can carry a time that has not come; the backward gallop then takes
// a few more steps. If it is behind, the probe at "now" finds a record and
// step 3 gallops forwards. Either way skew costs O(log(skew)) probes and
// changes no result.
//
// Shards written while they are scanned: the final read ends at the tip it
// reaches; a record that arrives after a probe at hi found nothing makes a
// later probe find a record at or after hi, and the search stops bisecting
// and reads from that record.
//
// With T0, the search is bounded by it: no probe is made at or after T0
// (every record there is after the start, and a probe there could be in
// Kinesis's future), the backward gallop starts one window before T0, a
// probe that finds only records at or after T0 found nothing, and the final
// read stops at the first record at or after T0, or at the tip. The full
// scan stops at the same record, so both strategies end on the same record
// before T0 by the argument above; the property test checks it with random
// shards, T0s at, between and around records (and records sharing T0's
// millisecond), records arriving after T0 during the scan, and this host's
// clock ahead of and behind Kinesis's.
//
// An endpoint that never answers an AT_TIMESTAMP probe when no record
// arrived at or after its time (kinesalite leaves the request open): each
// attempt of a probe's GetShardIterator waits at most [Config.ProbeTimeout]
// (1 s). When it gets no answer, a control GetShardIterator AT_TIMESTAMP at
// the anchor's arrival time, where a record is known to exist, is made with
// the same wait: the same request, so an endpoint that is slow at it (not
// silent) is slow at the control too. If the control
// answers, the endpoint is up and silent only about that time, and the probe
// is taken for "no record at or after it" ([Stats].Unanswered counts these).
// If the control does not answer either, the endpoint is slow or down: the
// attempt is retried like any timeout, with twice the wait (up to
// [Config.CallTimeout]), so a slow network is never taken for a silent
// endpoint. A transient outage therefore fails the batch after the retries,
// like any transient error; it never turns a shard into a read of its whole
// retention (an earlier version fell back to the full scan). An "unanswered"
// taken wrongly (one slow answer on an endpoint that does answer) costs at
// most a page: with T0, the final read that meets a record before T0 at or
// after a time a probe found empty stops there and searches again from it.
// A 30,000-record shard on kinesalite initialises in 2-4 s this way
// (BENCHMARKS.md).
package scan
