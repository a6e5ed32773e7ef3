package scan_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// nullPastEnd answers GetShardIterator as Kinesis documents for a closed
// shard: no iterator (null) when nothing is left to read from the requested
// position. The fake itself always gives an iterator.
type nullPastEnd struct {
	scan.Client
}

func (c nullPastEnd) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := c.Client.GetShardIterator(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	page, err := c.Client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: out.ShardIterator, Limit: aws.Int32(1)}, optFns...)
	if err != nil {
		return nil, err
	}
	if len(page.Records) == 0 && page.NextShardIterator == nil {
		out.ShardIterator = nil
	}
	return out, nil
}

// A null iterator (a probe, the head read or a renewal past the last record
// of a closed shard) is the shard's end: both strategies give the same
// answer, the shard's true tip, on random closed shards. Before, the probe
// strategy failed the batch ("no iterator returned") where the full scan
// succeeded.
func TestNullIteratorIsTheEndForBothStrategies(t *testing.T) {
	const cases = 60
	gaps := []time.Duration{0, time.Millisecond, 250 * time.Millisecond, 3 * time.Second, 5 * time.Minute, 9 * time.Hour}
	for seed := range uint64(cases) {
		rng := rand.New(rand.NewPCG(seed, 0x6e756c6c))
		w := newWorld(t)
		kinesistest.NewStream(t, w.fake, "s", 1)
		var last string
		n := 0
		if seed > 0 { // seed 0: an empty closed shard
			n = 1 + rng.IntN(200)
			last = putN(t, w.fake, "s", shard0, n, 1+rng.IntN(40), w.every(gaps[rng.IntN(len(gaps))]))
		}
		split(t, w.fake, "s", shard0)
		w.clock.Advance(gaps[rng.IntN(len(gaps))])
		want := trimHorizon
		if last != "" {
			want = after(last)
		}
		got := map[scan.Strategy]string{}
		for _, st := range strategies {
			cfg := w.testConfig(st, 0)
			cfg.PageLimit = []int32{1, 3, 10000}[rng.IntN(3)]
			cfg.HeadLimit = []int32{1, 4, 100}[rng.IntN(3)]
			res, err := newResolver(t, cfg).Resolve(context.Background(), scan.Request{Client: nullPastEnd{w.fake}, Stream: "s", Shards: []string{shard0}})
			desc := fmt.Sprintf("seed %d (%d records, %s, limit %d, head %d)", seed, n, st, cfg.PageLimit, cfg.HeadLimit)
			if err != nil {
				t.Errorf("%s: %v", desc, err)
				continue
			}
			got[st] = res[0].Position.String()
			if got[st] != want {
				t.Errorf("%s: %s, want %s", desc, got[st], want)
			}
		}
		if got[scan.StrategyProbe] != got[scan.StrategyFullScan] {
			t.Errorf("seed %d: probe %s, full scan %s", seed, got[scan.StrategyProbe], got[scan.StrategyFullScan])
		}
	}
}
