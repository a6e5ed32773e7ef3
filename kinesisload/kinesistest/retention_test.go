package kinesistest

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

func TestRetentionExpiresRecords(t *testing.T) {
	// a arrives at t0, b at t0+30m; retention is 1 h.
	tests := []struct {
		name string
		now  time.Duration
		want []string
	}{
		{"both retained", 59 * time.Minute, []string{"a", "b"}},
		{"a exactly at retention", time.Hour, []string{"a", "b"}},
		{"a expired", time.Hour + time.Millisecond, []string{"b"}},
		{"both expired", 2 * time.Hour, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 1, WithRetention(time.Hour))
			x.put("0", "a")
			x.clock.Set(t0.Add(30 * time.Minute))
			x.put("0", "b")
			x.clock.Set(t0.Add(tc.now))
			got := data(x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("TRIM_HORIZON (-want +got):\n%s", d)
			}
		})
	}
}

func TestRetentionMovesPositionsToTrimHorizon(t *testing.T) {
	x := newFixture(t, 1, WithRetention(time.Hour))
	seqA := x.put("0", "a")
	x.clock.Set(t0.Add(30 * time.Minute))
	x.put("0", "b")
	x.clock.Set(t0.Add(59 * time.Minute))
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil) // positioned at a
	x.clock.Set(t0.Add(61 * time.Minute))                             // a expires; the iterator is still valid
	if d := cmp.Diff([]string{"b"}, data(x.get(it, 0).Records)); d != "" {
		t.Errorf("iterator at an expired record (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"b"}, data(x.get(x.iter(shard0, types.ShardIteratorTypeAtSequenceNumber, seqA, nil), 0).Records)); d != "" {
		t.Errorf("AT_SEQUENCE_NUMBER of an expired record (-want +got):\n%s", d)
	}
	old := t0.Add(-time.Hour)
	if d := cmp.Diff([]string{"b"}, data(x.get(x.iter(shard0, types.ShardIteratorTypeAtTimestamp, "", &old), 0).Records)); d != "" {
		t.Errorf("AT_TIMESTAMP before the trim horizon (-want +got):\n%s", d)
	}
}

func TestRetentionRemovesClosedShards(t *testing.T) {
	x := newFixture(t, 1, WithRetention(time.Hour))
	x.put("0", "a")
	x.clock.Set(t0.Add(10 * time.Minute))
	if err := x.split(shard0, half); err != nil {
		t.Fatal(err)
	}
	x.clock.Set(t0.Add(70 * time.Minute)) // closed exactly one retention ago
	if d := cmp.Diff([]string{shard0, shard1, shard2}, ids(x.listShards(nil))); d != "" {
		t.Errorf("shards at the end of retention (-want +got):\n%s", d)
	}
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	x.clock.Set(t0.Add(70*time.Minute + time.Millisecond))
	if d := cmp.Diff([]string{shard1, shard2}, ids(x.listShards(nil))); d != "" {
		t.Errorf("shards after retention (-want +got):\n%s", d)
	}
	if _, err := x.iterErr(shard0, types.ShardIteratorTypeTrimHorizon, "", nil); errorKind(err) != "ResourceNotFound" {
		t.Errorf("GetShardIterator on expired shard: %v, want ResourceNotFound", err)
	}
	if _, err := x.getErr(it, 0); errorKind(err) != "ResourceNotFound" {
		t.Errorf("GetRecords on expired shard: %v, want ResourceNotFound", err)
	}
	for _, sf := range []types.ShardFilterType{types.ShardFilterTypeAtTrimHorizon, types.ShardFilterTypeFromTrimHorizon} {
		got := ids(x.listShards(&kinesis.ListShardsInput{ShardFilter: &types.ShardFilter{Type: sf}}))
		if d := cmp.Diff([]string{shard1, shard2}, got); d != "" {
			t.Errorf("%s after retention (-want +got):\n%s", sf, d)
		}
	}
	// Statistics of the expired shard stay readable.
	if _, err := x.f.Stats("s", shard0); err != nil {
		t.Errorf("Stats of expired shard: %v", err)
	}
	out, err := x.f.DescribeStreamSummary(t.Context(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if err != nil || *out.StreamDescriptionSummary.RetentionPeriodHours != 1 {
		t.Errorf("RetentionPeriodHours: %v, %v; want 1", out, err)
	}
}
