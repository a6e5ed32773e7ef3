package kinesisload

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// iteratorTypes records the type of every GetShardIterator call.
type iteratorTypes struct {
	scan.Client
	mu    sync.Mutex
	types []types.ShardIteratorType
}

func (c *iteratorTypes) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.mu.Lock()
	c.types = append(c.types, in.ShardIteratorType)
	c.mu.Unlock()
	return c.Client.GetShardIterator(ctx, in, opts...)
}

func (c *iteratorTypes) used(t types.ShardIteratorType) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.types, t)
}

// Config.ResolveStrategy chooses the strategy of the Loader's own Resolver,
// and InitResolved says which one resolved the positions.
func TestConfigChoosesResolveStrategy(t *testing.T) {
	for _, st := range []scan.Strategy{scan.StrategyProbe, scan.StrategyFullScan} {
		t.Run(st.String(), func(t *testing.T) {
			s := newFakeStream(t, 1)
			var tip string
			for range 150 { // more than the probe's first read of 100
				tip = s.put(shard0, "history")
			}
			s.settle()
			c := &iteratorTypes{Client: s.f}
			ih := newInitHook()
			r := start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder(), ResolveStrategy: st},
				WithClient(c), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih))
			e := ih.wait(t)
			r.stop(t)
			if e.Strategy != st || e.Resolved != 1 {
				t.Errorf("InitResolved: %d resolved by %v, want 1 by %v", e.Resolved, e.Strategy, st)
			}
			if got := e.Positions[shard0]; !got.Equal(scan.AfterSequence(tip)) {
				t.Errorf("resolved %v, want %v", got, scan.AfterSequence(tip))
			}
			if probed := c.used(types.ShardIteratorTypeAtTimestamp); probed != (st == scan.StrategyProbe) {
				t.Errorf("AT_TIMESTAMP probes used: %v, with strategy %v", probed, st)
			}
		})
	}
}

func TestNewRefusesStrategyConflictingWithResolver(t *testing.T) {
	res, err := scan.NewResolver(scan.Config{Strategy: scan.StrategyProbe})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Stream: "orders", Sink: newRecorder(), Dir: t.TempDir(), ResolveStrategy: scan.StrategyFullScan}
	if _, err := New(cfg, WithResolver(res)); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ResolveStrategy = full-scan") {
		t.Errorf("New = %v, want ErrInvalidConfig naming ResolveStrategy", err)
	}
	cfg.ResolveStrategy = 7
	if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ResolveStrategy") {
		t.Errorf("New = %v, want ErrInvalidConfig naming ResolveStrategy", err)
	}
}
