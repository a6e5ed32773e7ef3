package scan_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/scan"
)

// silentAtTimestamp never answers an AT_TIMESTAMP GetShardIterator, as
// kinesalite does when no record arrived at or after the timestamp.
type silentAtTimestamp struct {
	scan.Client
}

func (c silentAtTimestamp) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if in.ShardIteratorType == types.ShardIteratorTypeAtTimestamp {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.Client.GetShardIterator(ctx, in, optFns...)
}

// A probe that times out on every attempt makes the shard fall back to the
// full scan, which finds the same tip; the fallback is reported.
func TestProbeFallsBackToFullScanWhenProbesNeverAnswer(t *testing.T) {
	w := newWorld(t)
	const stream = "silent"
	if _, err := w.fake.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: &[]string{stream}[0], ShardCount: &[]int32{1}[0]}); err != nil {
		t.Fatal(err)
	}
	shard := shardIDs(t, w.fake, stream)[0]
	tip := putN(t, w.fake, stream, shard, 500, 10, w.every(time.Millisecond))
	w.clock.Advance(time.Minute)

	cfg := w.testConfig(scan.StrategyProbe, 0)
	cfg.CallTimeout = 20 * time.Millisecond
	cfg.Retries = 1
	res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: silentAtTimestamp{w.fake}, Stream: stream, Shards: []string{shard}})
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if got := res[0].Position.String(); got != after(tip) {
		t.Errorf("position %s, want %s (the full scan's)", got, after(tip))
	}
	if !res[0].Stats.FellBack {
		t.Errorf("Stats.FellBack is false; the probe never answered")
	}

	// A probe that answers does not fall back.
	res, err = newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: w.fake, Stream: stream, Shards: []string{shard}})
	if err != nil || res[0].Stats.FellBack || res[0].Position.String() != after(tip) {
		t.Errorf("with answering probes: %v, %+v", err, res)
	}
}
