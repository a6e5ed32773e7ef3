package bench_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// TestMemStoreMerges checks the baseline store of the checkpoint overhead
// benchmarks: updates merge into a shard's progress (a zero State or
// Position changes nothing, parents accumulate, states only advance), and
// Load returns a copy.
func TestMemStoreMerges(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	saves := [][]kinesisload.ShardProgress{
		{{ShardID: "a", State: kinesisload.StateActive, Position: scan.TrimHorizon()}},
		{{ShardID: "a", Position: scan.AfterSequence("5")}, {ShardID: "b", Parents: []string{"a"}, State: kinesisload.StateDiscovered}},
		{{ShardID: "a", State: kinesisload.StateDiscovered}, {ShardID: "b", Parents: []string{"a", "c"}}},
	}
	for _, u := range saves {
		if err := s.Save(ctx, "s", u); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]kinesisload.ShardProgress{
		"a": {ShardID: "a", State: kinesisload.StateActive, Position: scan.AfterSequence("5")},
		"b": {ShardID: "b", Parents: []string{"a", "c"}, State: kinesisload.StateDiscovered},
	}
	got, err := s.Load(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	got["b"].Parents[0] = "x"
	delete(got, "a")
	again, _ := s.Load(ctx, "s")
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("Load after the caller changed its copy (-want +got):\n%s", diff)
	}
	if other, _ := s.Load(ctx, "other"); len(other) != 0 {
		t.Errorf("Load of another stream: %v, want empty", other)
	}
}
