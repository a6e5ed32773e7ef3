package kinesistest

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const half = "170141183460469231731687303715884105728" // 2^127

func (x *fixture) split(shard, at string) error {
	_, err := x.f.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String(x.stream), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(at)})
	return err
}

func (x *fixture) merge(shard, adjacent string) error {
	_, err := x.f.MergeShards(context.Background(), &kinesis.MergeShardsInput{StreamName: aws.String(x.stream), ShardToMerge: aws.String(shard), AdjacentShardToMerge: aws.String(adjacent)})
	return err
}

type lineage struct {
	ID, Parent, Adjacent, Lo, Hi string
	Closed                       bool
}

func lineages(shards []types.Shard) []lineage {
	var out []lineage
	for _, s := range shards {
		out = append(out, lineage{
			ID: *s.ShardId, Parent: aws.ToString(s.ParentShardId), Adjacent: aws.ToString(s.AdjacentParentShardId),
			Lo: *s.HashKeyRange.StartingHashKey, Hi: *s.HashKeyRange.EndingHashKey,
			Closed: s.SequenceNumberRange.EndingSequenceNumber != nil,
		})
	}
	return out
}

func TestSplitAndMergeLineage(t *testing.T) {
	x := newFixture(t, 1)
	const max = "340282366920938463463374607431768211455"
	if err := x.split(shard0, half); err != nil {
		t.Fatal(err)
	}
	if err := x.merge(shard2, shard1); err != nil { // the upper child first: order does not matter
		t.Fatal(err)
	}
	want := []lineage{
		{ID: shard0, Lo: "0", Hi: max, Closed: true},
		{ID: shard1, Parent: shard0, Lo: "0", Hi: "170141183460469231731687303715884105727", Closed: true},
		{ID: shard2, Parent: shard0, Lo: half, Hi: max, Closed: true},
		{ID: shard3, Parent: shard2, Adjacent: shard1, Lo: "0", Hi: max},
	}
	if d := cmp.Diff(want, lineages(x.listShards(nil))); d != "" {
		t.Errorf("shards after split and merge (-want +got):\n%s", d)
	}
	out, err := x.f.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if err != nil || *out.StreamDescriptionSummary.OpenShardCount != 1 || out.StreamDescriptionSummary.StreamStatus != types.StreamStatusActive {
		t.Errorf("summary after resharding: %+v, %v; want ACTIVE with 1 open shard", out, err)
	}
}

func TestSequenceNumberRangeOfClosedShard(t *testing.T) {
	x := newFixture(t, 1)
	seqs := []string{x.put("0", "a"), x.put("0", "b")}
	if err := x.split(shard0, half); err != nil {
		t.Fatal(err)
	}
	shards := x.listShards(nil)
	r := shards[0].SequenceNumberRange
	all := []string{*r.StartingSequenceNumber, seqs[0], seqs[1], aws.ToString(r.EndingSequenceNumber)}
	if r.EndingSequenceNumber == nil || !increasing(all) {
		t.Errorf("closed shard range %s..%s does not enclose its records %v", *r.StartingSequenceNumber, aws.ToString(r.EndingSequenceNumber), seqs)
	}
	if shards[1].SequenceNumberRange.EndingSequenceNumber != nil {
		t.Errorf("open child %s has an EndingSequenceNumber", *shards[1].ShardId)
	}
}

func TestChildShardsAtEndOfClosedShard(t *testing.T) {
	tests := []struct {
		name     string
		reshard  func(x *fixture) error
		parent   string
		children []types.ChildShard
	}{
		{"split", func(x *fixture) error { return x.split(shard0, "1000") }, shard0, []types.ChildShard{
			{ShardId: aws.String(shard2), ParentShards: []string{shard0}},
			{ShardId: aws.String(shard3), ParentShards: []string{shard0}},
		}},
		{"merge", func(x *fixture) error { return x.merge(shard0, shard1) }, shard0, []types.ChildShard{
			{ShardId: aws.String(shard2), ParentShards: []string{shard0, shard1}},
		}},
		{"merge, adjacent parent", func(x *fixture) error { return x.merge(shard0, shard1) }, shard1, []types.ChildShard{
			{ShardId: aws.String(shard2), ParentShards: []string{shard0, shard1}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 2)
			hk := "0"
			if tc.parent == shard1 {
				hk = half
			}
			for _, d := range []string{"a", "b", "c"} {
				x.put(hk, d)
			}
			open := x.iter(tc.parent, types.ShardIteratorTypeTrimHorizon, "", nil)
			if err := tc.reshard(x); err != nil {
				t.Fatal(err)
			}
			x.put(hk, "child") // goes to a child, not to the closed parent

			// An iterator issued before the reshard reads on to the end.
			first := x.get(open, 2)
			if d := cmp.Diff([]string{"a", "b"}, data(first.Records)); d != "" || first.NextShardIterator == nil || first.ChildShards != nil {
				t.Fatalf("first page: records (-want +got):\n%s next %v, children %v", d, first.NextShardIterator != nil, first.ChildShards)
			}
			last := x.get(*first.NextShardIterator, 2)
			if d := cmp.Diff([]string{"c"}, data(last.Records)); d != "" {
				t.Errorf("last page records (-want +got):\n%s", d)
			}
			if last.NextShardIterator != nil {
				t.Errorf("last page of a closed shard has a NextShardIterator")
			}
			if *last.MillisBehindLatest != 0 {
				t.Errorf("last page of a closed shard: MillisBehindLatest %d, want 0", *last.MillisBehindLatest)
			}
			if d := cmp.Diff(tc.children, last.ChildShards, cmpopts.IgnoreUnexported(types.ChildShard{}), cmpopts.IgnoreFields(types.ChildShard{}, "HashKeyRange")); d != "" {
				t.Errorf("ChildShards (-want +got):\n%s", d)
			}
			for _, c := range last.ChildShards {
				if c.HashKeyRange == nil {
					t.Errorf("child %s has no HashKeyRange", *c.ShardId)
				}
			}
			// LATEST on a closed shard ends at once, with the children too.
			end := x.get(x.iter(tc.parent, types.ShardIteratorTypeLatest, "", nil), 0)
			if len(end.Records) != 0 || end.NextShardIterator != nil || len(end.ChildShards) != len(tc.children) {
				t.Errorf("LATEST on closed shard: %d records, next %v, %d children", len(end.Records), end.NextShardIterator != nil, len(end.ChildShards))
			}
		})
	}
}

func TestReshardErrors(t *testing.T) {
	tests := []struct {
		name string
		call func(x *fixture) error
		want string
	}{
		{"split at the starting hash key", func(x *fixture) error { return x.split(shard0, "0") }, "InvalidArgument"},
		{"split just above the start", func(x *fixture) error { return x.split(shard0, "1") }, ""},
		{"split at the ending hash key", func(x *fixture) error { return x.split(shard0, "170141183460469231731687303715884105727") }, ""},
		{"split beyond the shard", func(x *fixture) error { return x.split(shard0, half) }, "InvalidArgument"},
		{"split at a non-number", func(x *fixture) error { return x.split(shard0, "x") }, "InvalidArgument"},
		{"split at a signed number", func(x *fixture) error { return x.split(shard0, "+5") }, "InvalidArgument"},
		{"split unknown shard", func(x *fixture) error { return x.split(shard4, "5") }, "ResourceNotFound"},
		{"split closed shard", func(x *fixture) error {
			if err := x.split(shard0, "5"); err != nil {
				return err
			}
			return x.split(shard0, "7")
		}, "ResourceInUse"},
		{"split over the shard limit", func(x *fixture) error {
			if err := x.split(shard0, "5"); err != nil {
				return err
			}
			return x.split(shard1, "170141183460469231731687303715884105729")
		}, "LimitExceeded"},
		{"merge non-adjacent", func(x *fixture) error {
			if err := x.split(shard0, "5"); err != nil {
				return err
			}
			return x.merge(shard2, shard1)
		}, "InvalidArgument"},
		{"merge with itself", func(x *fixture) error { return x.merge(shard0, shard0) }, "InvalidArgument"},
		{"merge closed shard", func(x *fixture) error {
			if err := x.merge(shard0, shard1); err != nil {
				return err
			}
			return x.merge(shard0, shard2)
		}, "ResourceInUse"},
		{"merge unknown shard", func(x *fixture) error { return x.merge(shard0, shard4) }, "ResourceNotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 2, WithShardLimit(3))
			if got := errorKind(tc.call(x)); got != tc.want {
				t.Errorf("error = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestListShardsPaging(t *testing.T) {
	x := newFixture(t, 5)
	want := []string{shard0, shard1, shard2, shard3, shard4}
	for _, max := range []int32{1, 2, 4, 5, 1000} {
		var got []string
		in := &kinesis.ListShardsInput{StreamName: aws.String("s"), MaxResults: aws.Int32(max)}
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("MaxResults %d: more than 10 pages", max)
			}
			out, err := x.f.ListShards(context.Background(), in)
			if err != nil {
				t.Fatalf("MaxResults %d, page %d: %v", max, pages, err)
			}
			if len(out.Shards) > int(max) {
				t.Errorf("MaxResults %d: page of %d shards", max, len(out.Shards))
			}
			got = append(got, ids(out.Shards)...)
			if out.NextToken == nil {
				break
			}
			in = &kinesis.ListShardsInput{NextToken: out.NextToken, MaxResults: aws.Int32(max)}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("MaxResults %d: shards (-want +got):\n%s", max, d)
		}
	}
	if d := cmp.Diff([]string{shard3, shard4}, ids(x.listShards(&kinesis.ListShardsInput{ExclusiveStartShardId: aws.String(shard2)}))); d != "" {
		t.Errorf("ExclusiveStartShardId (-want +got):\n%s", d)
	}
}

func TestListShardsTokenErrors(t *testing.T) {
	x := newFixture(t, 3)
	out, err := x.f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s"), MaxResults: aws.Int32(1)})
	if err != nil || out.NextToken == nil {
		t.Fatalf("first page: %v, token %v", err, out)
	}
	tok := out.NextToken
	tests := []struct {
		name    string
		in      *kinesis.ListShardsInput
		advance time.Duration
		want    string
	}{
		{"token with stream name", &kinesis.ListShardsInput{NextToken: tok, StreamName: aws.String("s")}, 0, "InvalidArgument"},
		{"token with exclusive start", &kinesis.ListShardsInput{NextToken: tok, ExclusiveStartShardId: aws.String(shard0)}, 0, "InvalidArgument"},
		{"forged token", &kinesis.ListShardsInput{NextToken: aws.String("c2hhcmRJZC0w")}, 0, "InvalidArgument"},
		{"no stream and no token", &kinesis.ListShardsInput{}, 0, "InvalidArgument"},
		{"MaxResults 0", &kinesis.ListShardsInput{StreamName: aws.String("s"), MaxResults: aws.Int32(0)}, 0, "InvalidArgument"},
		{"token after 300 s", &kinesis.ListShardsInput{NextToken: tok}, 300 * time.Second, ""},
		{"expired token", &kinesis.ListShardsInput{NextToken: tok}, 301 * time.Second, "ExpiredNextToken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x.clock.Set(t0.Add(tc.advance))
			_, err := x.f.ListShards(context.Background(), tc.in)
			if got := errorKind(err); got != tc.want {
				t.Errorf("error = %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

func TestListShardsFilters(t *testing.T) {
	// Stream of 2 shards created at t0; at t0+1h shard 0 splits into 2 and
	// 3; at t0+2h shards 3 and 1 merge into 4. Listed at t0+3h, retention
	// 24 h.
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	tests := []struct {
		name   string
		filter *types.ShardFilter
		want   []string
	}{
		{"none", nil, []string{shard0, shard1, shard2, shard3, shard4}},
		{"AT_LATEST", &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}, []string{shard2, shard4}},
		{"AT_TRIM_HORIZON", &types.ShardFilter{Type: types.ShardFilterTypeAtTrimHorizon}, []string{shard0, shard1}},
		{"FROM_TRIM_HORIZON", &types.ShardFilter{Type: types.ShardFilterTypeFromTrimHorizon}, []string{shard0, shard1, shard2, shard3, shard4}},
		{"AFTER_SHARD_ID", &types.ShardFilter{Type: types.ShardFilterTypeAfterShardId, ShardId: aws.String(shard1)}, []string{shard2, shard3, shard4}},
		{"AT_TIMESTAMP before creation", &types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: at(-time.Hour)}, []string{shard0, shard1}},
		{"AT_TIMESTAMP between split and merge", &types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: at(90 * time.Minute)}, []string{shard1, shard2, shard3}},
		{"AT_TIMESTAMP now", &types.ShardFilter{Type: types.ShardFilterTypeAtTimestamp, Timestamp: at(3 * time.Hour)}, []string{shard2, shard4}},
		{"FROM_TIMESTAMP between split and merge", &types.ShardFilter{Type: types.ShardFilterTypeFromTimestamp, Timestamp: at(90 * time.Minute)}, []string{shard1, shard2, shard3, shard4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 2)
			x.clock.Set(t0.Add(time.Hour))
			if err := x.split(shard0, "1000"); err != nil {
				t.Fatal(err)
			}
			x.clock.Set(t0.Add(2 * time.Hour))
			if err := x.merge(shard3, shard1); err != nil {
				t.Fatal(err)
			}
			x.clock.Set(t0.Add(3 * time.Hour))
			got := ids(x.listShards(&kinesis.ListShardsInput{ShardFilter: tc.filter}))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("shards (-want +got):\n%s", d)
			}
			// Paging keeps the filter.
			var paged []string
			in := &kinesis.ListShardsInput{StreamName: aws.String("s"), ShardFilter: tc.filter, MaxResults: aws.Int32(1)}
			for {
				out, err := x.f.ListShards(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				paged = append(paged, ids(out.Shards)...)
				if out.NextToken == nil {
					break
				}
				in = &kinesis.ListShardsInput{NextToken: out.NextToken, MaxResults: aws.Int32(1)}
			}
			if d := cmp.Diff(tc.want, paged); d != "" {
				t.Errorf("shards paged one at a time (-want +got):\n%s", d)
			}
		})
	}
	t.Run("filters that need a field", func(t *testing.T) {
		x := newFixture(t, 1)
		for _, sf := range []types.ShardFilter{
			{Type: types.ShardFilterTypeAfterShardId},
			{Type: types.ShardFilterTypeAtTimestamp},
			{Type: types.ShardFilterTypeFromTimestamp},
			{Type: "SOMETIME"},
		} {
			_, err := x.f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s"), ShardFilter: &sf})
			if errorKind(err) != "InvalidArgument" {
				t.Errorf("ShardFilter %s without its field: %v, want InvalidArgument", sf.Type, err)
			}
		}
	})
}
