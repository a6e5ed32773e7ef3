package kinesistest

import (
	"context"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// GetShardIterator returns an iterator for a shard, of any of the five
// types. TRIM_HORIZON starts at the oldest retained record; LATEST just
// after the newest record; AT_TIMESTAMP at the first record that arrived at
// or after Timestamp (at the tip if none has); AT_SEQUENCE_NUMBER and
// AFTER_SEQUENCE_NUMBER at or just after a sequence number of this shard
// (at the oldest retained record if that one has expired). The iterator is
// valid for 300 s on the fake's clock. A sequence number of another shard
// (also of a deleted stream of the same name) or an unknown type gives
// *types.InvalidArgumentException; an unknown
// stream or shard gives *types.ResourceNotFoundException; a shard over
// [Limits.GetShardIteratorPerSecond] gives
// *types.ProvisionedThroughputExceededException.
func (f *Fake) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if in == nil {
		in = &kinesis.GetShardIteratorInput{}
	}
	shardID := aws.ToString(in.ShardId)
	st, err := f.begin(ctx, OpGetShardIterator, in.StreamName, in.StreamARN, shardID)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	now := f.now()
	s, err := f.lookupShard(st, shardID, now)
	if err != nil {
		return nil, err
	}
	from, err := f.startOf(st, s, in.ShardIteratorType, in.StartingSequenceNumber, in.Timestamp, now, "GetShardIterator")
	if err != nil {
		return nil, err
	}
	if !f.allowIterator(s, now) {
		s.stats.GetShardIteratorThrottled++
		return nil, f.errThrottled(st.name, s.id)
	}
	s.stats.GetShardIteratorCalls++
	it := f.encodeIterator(iterator{streamID: st.id, stream: st.name, shard: s.index, from: from, issued: now})
	out := &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(it)}
	setDate(&out.ResultMetadata, now)
	return out, nil
}

// GetRecords returns the records at an iterator: at most Limit (default and
// maximum 10,000) and at most 10 MiB. MillisBehindLatest is 0 when the page
// reaches the newest record of the shard; otherwise it is the age, on the
// fake's clock, of the first record not returned, and at least 1. An open
// shard at its tip returns an empty page and a next iterator. The page that
// reaches the end of a closed shard carries ChildShards and no
// NextShardIterator.
//
// Errors: a malformed or forged iterator gives
// *types.InvalidArgumentException, an iterator older than 300 s
// *types.ExpiredIteratorException, a deleted stream or a shard expired by
// retention *types.ResourceNotFoundException, and a shard over its read
// limits *types.ProvisionedThroughputExceededException.
func (f *Fake) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if in == nil {
		in = &kinesis.GetRecordsInput{}
	}
	raw := aws.ToString(in.ShardIterator)
	it, itErr := f.decodeIterator(raw)
	var stream, shardName string
	if itErr == nil {
		stream, shardName = it.stream, shardID(it.shard)
	}
	if err := f.enter(ctx, OpGetRecords, stream, shardName); err != nil {
		return nil, err
	}
	if in.ShardIterator == nil {
		return nil, errInvalidArgument("ShardIterator is required")
	}
	if itErr != nil {
		return nil, errInvalidArgument("Invalid ShardIterator.")
	}
	limit := maxGetRecordsLimit
	if in.Limit != nil {
		limit = int(*in.Limit)
		if limit < 1 || limit > maxGetRecordsLimit {
			return nil, errInvalidArgument("Limit %d must be between 1 and %d", limit, maxGetRecordsLimit)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	st, ok := f.byID[it.streamID]
	if !ok {
		return nil, f.errStreamNotFound(it.stream)
	}
	if now.Sub(it.issued) > iteratorTTL {
		return nil, errExpiredIterator(it.issued, now)
	}
	s, err := f.lookupShard(st, shardName, now)
	if err != nil {
		return nil, err
	}
	if !f.allowRead(s, now) {
		s.stats.GetRecordsThrottled++
		return nil, f.errThrottled(st.name, s.id)
	}

	first := sort.Search(len(s.records), func(i int) bool { return s.records[i].seq >= it.from })
	end, bytes := first, 0
	for end < len(s.records) && end-first < limit {
		n := s.records[end].size()
		if bytes+n > maxGetRecordsBytes {
			break
		}
		bytes += n
		end++
	}
	out := &kinesis.GetRecordsOutput{Records: make([]types.Record, 0, end-first)}
	for i := first; i < end; i++ {
		r := &s.records[i]
		out.Records = append(out.Records, types.Record{
			Data:                        append([]byte(nil), r.data...),
			PartitionKey:                aws.String(r.key),
			SequenceNumber:              aws.String(seqString(r.seq, s.index)),
			ApproximateArrivalTimestamp: aws.Time(r.arrival),
		})
	}
	f.chargeRead(s, bytes)
	s.stats.GetRecordsCalls++
	s.stats.RecordsRead += int64(end - first)
	s.stats.BytesRead += int64(bytes)

	next := it.from
	if end > first {
		next = s.records[end-1].seq + 1
	}
	var behind int64
	if end < len(s.records) {
		behind = max(now.Sub(s.records[end].arrival).Milliseconds(), 1)
	}
	out.MillisBehindLatest = aws.Int64(behind)
	setDate(&out.ResultMetadata, now)
	if end == len(s.records) && !s.open() {
		out.ChildShards = f.childShards(st, s)
		return out, nil
	}
	out.NextShardIterator = aws.String(f.encodeIterator(iterator{
		streamID: st.id, stream: st.name, shard: s.index, from: next, issued: now,
	}))
	return out, nil
}

// childShards returns the shards made from s by a split or a merge.
func (f *Fake) childShards(st *stream, s *shard) []types.ChildShard {
	var out []types.ChildShard
	for _, c := range st.shards {
		if c.parent != s.id && c.adjacent != s.id {
			continue
		}
		parents := []string{c.parent}
		if c.adjacent != "" {
			parents = append(parents, c.adjacent)
		}
		sort.Strings(parents)
		out = append(out, types.ChildShard{
			ShardId:      aws.String(c.id),
			ParentShards: parents,
			HashKeyRange: hashRange(c),
		})
	}
	return out
}

func hashRange(s *shard) *types.HashKeyRange {
	return &types.HashKeyRange{StartingHashKey: aws.String(s.lo.String()), EndingHashKey: aws.String(s.hi.String())}
}

// startOf returns the sequence counter a read of shard s starting at a
// position of type typ begins at (see [Fake.GetShardIterator]); op names
// the call in error messages. f.mu must be held.
func (f *Fake) startOf(st *stream, s *shard, typ types.ShardIteratorType, seqNum *string, ts *time.Time, now time.Time, op string) (uint64, error) {
	var from uint64
	switch typ {
	case types.ShardIteratorTypeTrimHorizon:
		from = 0
	case types.ShardIteratorTypeLatest:
		from = st.seq + 1
	case types.ShardIteratorTypeAtTimestamp:
		if ts == nil {
			return 0, errInvalidArgument("Timestamp must be provided for ShardIteratorType %s", typ)
		}
		t := ts.Truncate(time.Millisecond)
		if t.UnixMilli() > now.UnixMilli() {
			return 0, errInvalidArgument("The timestampInMillis parameter cannot be greater than the currentTimestampInMillis. timestampInMillis: %d, currentTimestampInMillis: %d", t.UnixMilli(), now.UnixMilli())
		}
		i := sort.Search(len(s.records), func(i int) bool { return !s.records[i].arrival.Before(t) })
		if i < len(s.records) {
			from = s.records[i].seq
		} else {
			from = st.seq + 1
		}
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		if seqNum == nil {
			return 0, errInvalidArgument("StartingSequenceNumber must be provided for ShardIteratorType %s", typ)
		}
		seq := *seqNum
		n, idx, ok := parseSeq(seq)
		if !ok || idx != s.index {
			return 0, errInvalidArgument("StartingSequenceNumber %s used in %s on shard %s in stream %s under account %s is invalid.", seq, op, s.id, st.name, f.cfg.account)
		}
		// A number below the shard's first was never this shard's: it
		// belongs to a stream deleted before this one was created under
		// the same name.
		if n < s.startSeq {
			return 0, errInvalidArgument("StartingSequenceNumber %s used in %s on shard %s in stream %s under account %s is invalid because it did not come from this stream.", seq, op, s.id, st.name, f.cfg.account)
		}
		from = n
		if typ == types.ShardIteratorTypeAfterSequenceNumber {
			from = n + 1
		}
	default:
		return 0, errInvalidArgument("ShardIteratorType %q is not one of TRIM_HORIZON, LATEST, AT_TIMESTAMP, AT_SEQUENCE_NUMBER, AFTER_SEQUENCE_NUMBER", typ)
	}
	return from, nil
}
