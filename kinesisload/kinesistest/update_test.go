package kinesistest

import (
	"context"
	"math/big"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

func TestUpdateShardCount(t *testing.T) {
	tests := []struct {
		name          string
		from, to      int32
		wantErr       string
		wantOpen      int
		wantTwoParent int // children of merges
	}{
		{"double", 2, 4, "", 4, 0},
		{"up by one", 3, 4, "", 4, 0},
		{"halve", 4, 2, "", 2, 2},
		{"down by one", 3, 2, "", 2, 1},
		{"same", 2, 2, "", 2, 0},
		{"more than double", 2, 5, "InvalidArgument", 2, 0},
		{"less than half", 5, 2, "InvalidArgument", 5, 0},
		{"over the shard limit", 4, 7, "LimitExceeded", 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, int(tc.from), WithShardLimit(6))
			out, err := x.f.UpdateShardCount(context.Background(), &kinesis.UpdateShardCountInput{
				StreamName: aws.String("s"), ScalingType: types.ScalingTypeUniformScaling, TargetShardCount: aws.Int32(tc.to),
			})
			if got := errorKind(err); got != tc.wantErr {
				t.Fatalf("error = %q (%v), want %q", got, err, tc.wantErr)
			}
			if err == nil && (*out.CurrentShardCount != tc.from || *out.TargetShardCount != tc.to) {
				t.Errorf("output counts %d -> %d, want %d -> %d", *out.CurrentShardCount, *out.TargetShardCount, tc.from, tc.to)
			}
			open := x.listShards(&kinesis.ListShardsInput{ShardFilter: &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}})
			if len(open) != tc.wantOpen {
				t.Errorf("%d open shards, want %d", len(open), tc.wantOpen)
			}
			// The open shards still cover the key space exactly once.
			sort.Slice(open, func(i, j int) bool {
				a, _ := new(big.Int).SetString(*open[i].HashKeyRange.StartingHashKey, 10)
				b, _ := new(big.Int).SetString(*open[j].HashKeyRange.StartingHashKey, 10)
				return a.Cmp(b) < 0
			})
			next := big.NewInt(0)
			merged := 0
			for _, s := range open {
				lo, _ := new(big.Int).SetString(*s.HashKeyRange.StartingHashKey, 10)
				hi, _ := new(big.Int).SetString(*s.HashKeyRange.EndingHashKey, 10)
				if lo.Cmp(next) != 0 {
					t.Errorf("shard %s starts at %s, want %s", *s.ShardId, lo, next)
				}
				next = hi.Add(hi, big.NewInt(1))
				if s.AdjacentParentShardId != nil {
					merged++
				}
			}
			if next.Cmp(new(big.Int).Add(maxHashKey, big.NewInt(1))) != 0 {
				t.Errorf("open shards end at %s, want 2^128", next)
			}
			if merged != tc.wantTwoParent {
				t.Errorf("%d open shards come from merges, want %d", merged, tc.wantTwoParent)
			}
		})
	}
}
