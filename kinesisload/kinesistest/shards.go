package kinesistest

import (
	"context"
	"math/big"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// ListShards lists the shards of a stream in shard-id order, closed ones
// included until retention removes them, in pages of MaxResults (default
// and cap 1,000). A NextToken continues a listing with the same filter; it
// must come without StreamName, StreamARN and ExclusiveStartShardId, and
// expires after 300 s (*types.ExpiredNextTokenException).
//
// ShardFilter types: AFTER_SHARD_ID (ids after ShardId), AT_LATEST (open
// shards), AT_TRIM_HORIZON (shards open at the trim horizon, that is at
// now minus retention or at the stream's creation if later),
// FROM_TRIM_HORIZON (every retained shard), AT_TIMESTAMP (shards open at
// Timestamp) and FROM_TIMESTAMP (shards open at Timestamp or created
// after it).
func (f *Fake) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if in == nil {
		in = &kinesis.ListShardsInput{}
	}
	var tok nextToken
	var tokErr error
	streamForFault := ""
	if in.NextToken != nil {
		tok, tokErr = f.decodeNextToken(*in.NextToken)
		if tokErr == nil {
			streamForFault = tok.stream
		}
	} else {
		streamForFault = f.requestStream(in.StreamName, in.StreamARN)
	}
	if err := f.enter(ctx, OpListShards, streamForFault); err != nil {
		return nil, err
	}
	limit := defaultListShards
	if in.MaxResults != nil {
		n := int(*in.MaxResults)
		if n < 1 || n > maxListShardsResult {
			return nil, errInvalidArgument("MaxResults %d must be between 1 and %d", n, maxListShardsResult)
		}
		limit = min(n, defaultListShards)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var st *stream
	after := -1
	var filter *types.ShardFilter
	if in.NextToken != nil {
		if in.StreamName != nil || in.StreamARN != nil || in.ExclusiveStartShardId != nil || in.StreamCreationTimestamp != nil {
			return nil, errInvalidArgument("NextToken cannot be combined with StreamName, StreamARN, ExclusiveStartShardId or StreamCreationTimestamp")
		}
		if tokErr != nil {
			return nil, errInvalidArgument("NextToken is invalid")
		}
		if now.Sub(tok.issued) > iteratorTTL {
			return nil, errExpiredNextToken()
		}
		var ok bool
		if st, ok = f.byID[tok.streamID]; !ok {
			return nil, f.errStreamNotFound(tok.stream)
		}
		after = tok.after
		if tok.filterType != "" {
			filter = &types.ShardFilter{Type: types.ShardFilterType(tok.filterType)}
			if !tok.filterTime.IsZero() {
				filter.Timestamp = aws.Time(tok.filterTime)
			}
		}
	} else {
		var err error
		if st, err = f.lookupStream(in.StreamName, in.StreamARN); err != nil {
			return nil, err
		}
		if in.StreamCreationTimestamp != nil && !in.StreamCreationTimestamp.Equal(st.created) {
			return nil, f.errStreamNotFound(st.name)
		}
		if in.ExclusiveStartShardId != nil {
			after = shardIndexAfter(st, *in.ExclusiveStartShardId)
		}
		if sf := in.ShardFilter; sf != nil {
			switch sf.Type {
			case types.ShardFilterTypeAfterShardId:
				if sf.ShardId == nil {
					return nil, errInvalidArgument("ShardId must be supplied in a ShardFilter with a Type of AFTER_SHARD_ID")
				}
				after = max(after, shardIndexAfter(st, *sf.ShardId))
			case types.ShardFilterTypeAtTimestamp, types.ShardFilterTypeFromTimestamp:
				if sf.Timestamp == nil {
					return nil, errInvalidArgument("Timestamp must be supplied in a ShardFilter with a Type of %s", sf.Type)
				}
				filter = &types.ShardFilter{Type: sf.Type, Timestamp: sf.Timestamp}
			case types.ShardFilterTypeAtLatest, types.ShardFilterTypeAtTrimHorizon, types.ShardFilterTypeFromTrimHorizon:
				filter = &types.ShardFilter{Type: sf.Type}
			default:
				return nil, errInvalidArgument("ShardFilter Type %q is not one of AFTER_SHARD_ID, AT_TRIM_HORIZON, FROM_TRIM_HORIZON, AT_LATEST, AT_TIMESTAMP, FROM_TIMESTAMP", sf.Type)
			}
		}
	}

	out := &kinesis.ListShardsOutput{Shards: []types.Shard{}}
	last := -1
	for _, s := range st.shards {
		if s.index <= after || f.gone(s, now) || !f.selected(st, s, filter, now) {
			continue
		}
		if len(out.Shards) == limit {
			tok := nextToken{streamID: st.id, stream: st.name, after: last, issued: now}
			if filter != nil {
				tok.filterType = string(filter.Type)
				if filter.Timestamp != nil {
					tok.filterTime = *filter.Timestamp
				}
			}
			out.NextToken = aws.String(f.encodeNextToken(tok))
			break
		}
		out.Shards = append(out.Shards, describeShard(s))
		last = s.index
	}
	setDate(&out.ResultMetadata, now)
	return out, nil
}

// shardIndexAfter returns the index of the last shard whose id is not
// greater than id, so that listing resumes after id even if it names no
// shard.
func shardIndexAfter(st *stream, id string) int {
	after := -1
	for _, s := range st.shards {
		if s.id <= id {
			after = s.index
		}
	}
	return after
}

// selected reports whether filter keeps shard s.
func (f *Fake) selected(st *stream, s *shard, filter *types.ShardFilter, now time.Time) bool {
	if filter == nil {
		return true
	}
	openAt := func(t time.Time) bool {
		if t.Before(st.created) {
			t = st.created
		}
		return !s.created.After(t) && (s.open() || s.closed.After(t))
	}
	switch filter.Type {
	case types.ShardFilterTypeAtLatest:
		return s.open()
	case types.ShardFilterTypeAtTrimHorizon:
		return openAt(now.Add(-f.cfg.retention))
	case types.ShardFilterTypeAtTimestamp:
		return openAt(*filter.Timestamp)
	case types.ShardFilterTypeFromTimestamp:
		t := *filter.Timestamp
		if t.Before(st.created) {
			t = st.created
		}
		return s.open() || s.closed.After(t)
	}
	return true // FROM_TRIM_HORIZON: every retained shard
}

func describeShard(s *shard) types.Shard {
	out := types.Shard{
		ShardId:             aws.String(s.id),
		HashKeyRange:        hashRange(s),
		SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String(seqString(s.startSeq, s.index))},
	}
	if s.parent != "" {
		out.ParentShardId = aws.String(s.parent)
	}
	if s.adjacent != "" {
		out.AdjacentParentShardId = aws.String(s.adjacent)
	}
	if !s.open() {
		out.SequenceNumberRange.EndingSequenceNumber = aws.String(seqString(s.endSeq, s.index))
	}
	return out
}

// close closes shard s of st at now.
func (f *Fake) close(st *stream, s *shard, now time.Time) {
	s.endSeq = st.nextSeq()
	s.closed = now
	f.notifyLocked() // wake the subscriptions
}

// SplitShard closes an open shard and creates two children that share its
// hash-key range at NewStartingHashKey, which must lie above the shard's
// starting hash key and not above its ending hash key. New shard ids
// continue the stream's counter. The stream stays ACTIVE.
func (f *Fake) SplitShard(ctx context.Context, in *kinesis.SplitShardInput, _ ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error) {
	if in == nil {
		in = &kinesis.SplitShardInput{}
	}
	shardID := aws.ToString(in.ShardToSplit)
	st, err := f.begin(ctx, OpSplitShard, in.StreamName, in.StreamARN, shardID)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	now := f.now()
	s, err := f.lookupShard(st, shardID, now)
	if err != nil {
		return nil, err
	}
	if !s.open() {
		return nil, f.errNotOpen(st, s)
	}
	if in.NewStartingHashKey == nil {
		return nil, errInvalidArgument("NewStartingHashKey is required")
	}
	h, ok := parseHashKey(*in.NewStartingHashKey)
	if !ok || h.Cmp(s.lo) <= 0 || h.Cmp(s.hi) > 0 {
		return nil, errInvalidArgument("NewStartingHashKey %s used in SplitShard() on shard %s in stream %s under account %s is not both greater than the shard's StartingHashKey %s and not greater than its EndingHashKey %s.",
			*in.NewStartingHashKey, s.id, st.name, f.cfg.account, s.lo, s.hi)
	}
	if cur := f.openShardTotal(); cur+1 > f.cfg.shardLimit {
		return nil, f.errShardLimit(cur, 1)
	}
	f.splitAt(st, s, h, now)
	return &kinesis.SplitShardOutput{}, nil
}

// MergeShards closes two open shards with adjacent hash-key ranges and
// creates one child covering both, with ParentShardId ShardToMerge and
// AdjacentParentShardId AdjacentShardToMerge. The stream stays ACTIVE.
func (f *Fake) MergeShards(ctx context.Context, in *kinesis.MergeShardsInput, _ ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error) {
	if in == nil {
		in = &kinesis.MergeShardsInput{}
	}
	id, adjID := aws.ToString(in.ShardToMerge), aws.ToString(in.AdjacentShardToMerge)
	st, err := f.begin(ctx, OpMergeShards, in.StreamName, in.StreamARN, id, adjID)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	now := f.now()
	s, err := f.lookupShard(st, id, now)
	if err != nil {
		return nil, err
	}
	adj, err := f.lookupShard(st, adjID, now)
	if err != nil {
		return nil, err
	}
	for _, x := range []*shard{s, adj} {
		if !x.open() {
			return nil, f.errNotOpen(st, x)
		}
	}
	one := big.NewInt(1)
	lo, hi := s.lo, adj.hi
	switch {
	case new(big.Int).Add(s.hi, one).Cmp(adj.lo) == 0:
	case new(big.Int).Add(adj.hi, one).Cmp(s.lo) == 0:
		lo, hi = adj.lo, s.hi
	default:
		return nil, errInvalidArgument("Shards %s and %s in stream %s under account %s are not an adjacent pair of shards eligible for merging", s.id, adj.id, st.name, f.cfg.account)
	}
	f.close(st, s, now)
	f.close(st, adj, now)
	st.addShard(lo, hi, s.id, adj.id, now)
	return &kinesis.MergeShardsOutput{}, nil
}

// splitAt closes s and adds its two children, split at h.
func (f *Fake) splitAt(st *stream, s *shard, h *big.Int, now time.Time) {
	f.close(st, s, now)
	st.addShard(s.lo, new(big.Int).Sub(h, big.NewInt(1)), s.id, "", now)
	st.addShard(h, s.hi, s.id, "", now)
}

// UpdateShardCount changes the number of open shards of a stream to
// TargetShardCount, which must lie between half and twice the current
// count, by splitting open shards at the middle of their ranges (scaling
// up) or merging adjacent pairs (scaling down), in shard order, as
// kinesis-local does; the resulting ranges need not be uniform. The
// lineage is that of the splits and merges. Not part of [API]: a
// *kinesis.Client has it too.
func (f *Fake) UpdateShardCount(ctx context.Context, in *kinesis.UpdateShardCountInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateShardCountOutput, error) {
	if in == nil {
		in = &kinesis.UpdateShardCountInput{}
	}
	st, err := f.begin(ctx, OpUpdateShardCount, in.StreamName, in.StreamARN)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if in.ScalingType != types.ScalingTypeUniformScaling {
		return nil, errInvalidArgument("ScalingType %q is not UNIFORM_SCALING", in.ScalingType)
	}
	if in.TargetShardCount == nil {
		return nil, errInvalidArgument("TargetShardCount is required")
	}
	cur, target := st.openShards(), int(*in.TargetShardCount)
	switch {
	case target < 1:
		return nil, errInvalidArgument("TargetShardCount %d of stream %s must be at least 1", target, st.name)
	case target > 2*cur:
		return nil, errInvalidArgument("TargetShardCount %d of stream %s is more than twice the current count %d", target, st.name, cur)
	case 2*target < cur:
		return nil, errInvalidArgument("TargetShardCount %d of stream %s is less than half the current count %d", target, st.name, cur)
	}
	if total := f.openShardTotal(); target > cur && total+target-cur > f.cfg.shardLimit {
		return nil, f.errShardLimit(total, target-cur)
	}
	now := f.now()
	var open []*shard
	for _, s := range st.shards {
		if s.open() {
			open = append(open, s)
		}
	}
	one := big.NewInt(1)
	for n := cur; n < target; n++ {
		s := open[n-cur]
		mid := new(big.Int).Add(s.lo, new(big.Int).Rsh(new(big.Int).Sub(s.hi, s.lo), 1))
		f.splitAt(st, s, mid.Add(mid, one), now)
	}
	if target < cur {
		sort.Slice(open, func(i, j int) bool { return open[i].lo.Cmp(open[j].lo) < 0 })
		n := cur
		for i := 0; n > target && i+1 < len(open); i += 2 {
			a, b := open[i], open[i+1]
			f.close(st, a, now)
			f.close(st, b, now)
			st.addShard(a.lo, b.hi, a.id, b.id, now)
			n--
		}
	}
	return &kinesis.UpdateShardCountOutput{
		CurrentShardCount: aws.Int32(int32(cur)),
		TargetShardCount:  aws.Int32(int32(target)),
		StreamName:        aws.String(st.name),
		StreamARN:         aws.String(st.arn),
	}, nil
}

func (f *Fake) errNotOpen(st *stream, s *shard) error {
	return &types.ResourceInUseException{Message: aws.String(
		"Shard " + s.id + " in stream " + st.name + " under account " + f.cfg.account +
			" has already been merged or split, and thus is not eligible for merging or splitting.")}
}
