package kinesisload

import (
	"fmt"
	"testing"

	"github.com/tidemark/tidemark/scan"
)

// TestLineageWalksVisitEachShardOnce builds 80 generations of a split
// followed by a merge: 2^80 paths lead from the last shard to the first.
// Walking every path (as the depth and tracked checks once did) never
// ends; each walk must visit a shard once.
func TestLineageWalksVisitEachShardOnce(t *testing.T) {
	stored := map[string]ShardProgress{"g0": {ShardID: "g0", State: StateCompleted}}
	last := "g0"
	for g := 1; g <= 80; g++ {
		a, b, m := fmt.Sprintf("g%d-a", g), fmt.Sprintf("g%d-b", g), fmt.Sprintf("g%d", g)
		stored[a] = ShardProgress{ShardID: a, Parents: []string{last}, State: StateCompleted}
		stored[b] = ShardProgress{ShardID: b, Parents: []string{last}, State: StateCompleted}
		stored[m] = ShardProgress{ShardID: m, Parents: []string{a, b}, State: StateCompleted}
		last = m
	}
	top := newTopology("s", scan.Latest(), map[string]scan.Position{"g0": {}}, stored)
	if got := top.depth(last, map[string]int{}); got != 160 {
		t.Errorf("depth of %s = %d, want 160", last, got)
	}
	if cmpDepth(top, "g0", last) >= 0 {
		t.Errorf("cmpDepth(g0, %s) >= 0, want the root first", last)
	}
	if !top.tracked(last) {
		t.Errorf("%s descends from the selected g0 but is not tracked", last)
	}
	if top.trackedWithout(last, map[string]bool{"g0": true}) {
		t.Errorf("%s is tracked without g0, the only selected shard", last)
	}
}
