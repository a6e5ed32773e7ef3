package kinesistest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

func TestConcurrentWritersAndReaders(t *testing.T) {
	const writers, perWriter = 4, 200
	x := newFixture(t, 2, WithoutLimits())
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("writer-%d", w)
			for i := 0; i < perWriter; i++ {
				if _, err := x.f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String(key), Data: []byte(fmt.Sprint(i))}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, shard := range []string{shard0, shard1} {
		it := x.iter(shard, types.ShardIteratorTypeTrimHorizon, "", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				out, err := x.getErr(it, 7)
				if err != nil {
					errs <- err
					return
				}
				it = *out.NextShardIterator
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Each writer's records are all there, in its order, in one shard.
	got := map[string][]string{}
	for _, shard := range []string{shard0, shard1} {
		var seqs []string
		for _, r := range x.get(x.iter(shard, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records {
			got[*r.PartitionKey] = append(got[*r.PartitionKey], string(r.Data))
			seqs = append(seqs, *r.SequenceNumber)
		}
		if !increasing(seqs) {
			t.Errorf("shard %s: sequence numbers do not grow", shard)
		}
	}
	var want []string
	for i := 0; i < perWriter; i++ {
		want = append(want, fmt.Sprint(i))
	}
	for w := 0; w < writers; w++ {
		key := fmt.Sprintf("writer-%d", w)
		if d := cmp.Diff(want, got[key]); d != "" {
			t.Errorf("%s (-want +got):\n%s", key, d)
		}
	}
}
