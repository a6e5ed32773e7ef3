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
// An endpoint that never answers an AT_TIMESTAMP probe (kinesalite, when no
// record arrived at or after the time, leaves the request open): when every
// attempt of a probe times out, the shard is resolved by a full scan instead
// and [Stats].FellBack is set. That is always correct, and costs the probe's
// timeouts on top of the full scan; on such an endpoint, choose
// [StrategyFullScan] with a short [Config.CallTimeout].
package scan
