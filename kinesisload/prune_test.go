package kinesisload

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// reshardDaily runs a Loader on a stream that doubles or halves its shards
// every (modelled) day for days days, with a retention of one day, and
// checks that every record put on every day's shards is delivered. It
// returns the store and its journal.
func reshardDaily(t *testing.T, days int) (*JournalStore, *journal.Memory, string, *Loader) {
	t.Helper()
	ctx := context.Background()
	clock := kinesistest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 2, kinesistest.WithClock(clock), kinesistest.WithRetention(24*time.Hour))
	j := journal.NewMemory()
	store, err := NewJournalStore(ctx, j, 16)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	quick := withTune(func(rc *readerConfig) {
		rc.minInterval = time.Millisecond
		rc.readBytesPerSecond = -1
		rc.idleWait = time.Millisecond
	})
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: 2 * time.Millisecond}
	ih := newInitHook()
	r := start(t, ctx, cfg, WithClient(s.f), WithStore(store), quick, WithHooks(ih))
	ih.wait(t)
	count := int32(2)
	for day := range days {
		clock.Advance(25 * time.Hour) // yesterday's closed shards expire
		if count == 2 {
			count = 4
		} else {
			count = 2
		}
		if _, err := s.f.UpdateShardCount(ctx, &kinesis.UpdateShardCountInput{StreamName: aws.String(s.name),
			TargetShardCount: aws.Int32(count), ScalingType: types.ScalingTypeUniformScaling}); err != nil {
			t.Fatalf("day %d: UpdateShardCount: %v", day, err)
		}
		var want []string
		for _, sh := range s.openShards() {
			d := fmt.Sprintf("day%d-%s", day, sh)
			s.put(sh, d)
			want = append(want, d)
		}
		rec.waitFor(t, want...)
	}
	return store, j, s.name, r.l
}

// waitStored waits until the store holds at most n shards of stream.
func waitStored(t *testing.T, store *JournalStore, stream string, n int) map[string]ShardProgress {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := store.Load(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) <= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// snapshotShards returns how many shards of stream the journal's snapshot
// holds.
func snapshotShards(t *testing.T, j journal.Journal, stream string) int {
	t.Helper()
	n := -1
	if err := j.Replay(context.Background(), func(e journal.Entry) error {
		if e.Snapshot {
			var snap storeSnapshot
			if err := json.Unmarshal(e.Data, &snap); err != nil {
				return err
			}
			n = len(snap.Streams[stream])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A year of daily reshards with a day of retention: the store holds only
// the shards Kinesis still lists, not one more per day, and the snapshot
// and the Loader's Stats stay as small. Nothing put on any day's shards is
// lost.
func TestPruneKeepsAYearOfDailyReshardsBounded(t *testing.T) {
	store, j, stream, l := reshardDaily(t, 365)
	// Listed now: yesterday's shards (closed today) and today's: at most
	// 4 + 4. Wait for the listing that follows the last reshard.
	const bound = 8
	got := waitStored(t, store, stream, bound)
	if len(got) > bound {
		t.Fatalf("after a year the store holds %d shards, want at most %d", len(got), bound)
	}
	// Stats forgets a shard just after the store prunes it.
	deadline := time.Now().Add(10 * time.Second)
	for len(l.Stats().Shards) > bound && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(l.Stats().Shards); n > bound {
		t.Errorf("after a year Stats reports %d shards, want at most %d (the store holds %d)", n, bound, len(got))
	}
	// Write another snapshot now, and check it is as small.
	for i := range 16 {
		if err := store.Save(context.Background(), "other", []ShardProgress{{ShardID: fmt.Sprint(i), State: StateActive}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := snapshotShards(t, j, stream); n < 0 || n > bound {
		t.Errorf("the snapshot holds %d shards of the stream, want 0 to %d", n, bound)
	}
}

func TestPrunableKeepsWhatLineageNeeds(t *testing.T) {
	done := func(id string, parents ...string) ShardProgress {
		return ShardProgress{ShardID: id, Parents: parents, State: StateCompleted, Position: scan.ShardEnd()}
	}
	active := func(id string, parents ...string) ShardProgress {
		return ShardProgress{ShardID: id, Parents: parents, State: StateActive, Position: scan.TrimHorizon()}
	}
	tests := []struct {
		name     string
		selected map[string]scan.Position
		stored   []ShardProgress
		listed   []string
		want     []string
	}{
		{"completed and gone", nil, []ShardProgress{done("a"), done("b", "a"), active("c", "b")}, []string{"b", "c"}, []string{"a"}},
		{"still listed is kept", nil, []ShardProgress{done("a"), active("b", "a")}, []string{"a", "b"}, nil},
		{"not completed is never pruned", nil, []ShardProgress{done("a"), {ShardID: "b", Parents: []string{"a"}, State: StateDraining, Position: scan.AfterSequence("5")}}, []string{}, []string{"a"}},
		{"a chain, all gone", nil, []ShardProgress{done("a"), done("b", "a"), done("c", "b"), active("d", "c")}, []string{"d"}, []string{"a", "b", "c"}},
		{"a selection keeps the ancestry of a tracked shard",
			map[string]scan.Position{"a": {}}, []ShardProgress{done("a"), done("b", "a"), done("c", "b"), active("d", "c")}, []string{"d"}, nil},
		{"a selection keeps its selected shards and drops a finished line",
			map[string]scan.Position{"a": {}}, []ShardProgress{done("a"), done("b", "a"), done("c", "b")}, []string{}, []string{"b", "c"}},
		{"a selection drops what its tracked shards do not need",
			map[string]scan.Position{"b": {}}, []ShardProgress{done("a"), done("b", "a"), active("c", "b"), done("x")}, []string{"c"}, []string{"a", "x"}},
	}
	for _, tt := range tests {
		stored := map[string]ShardProgress{}
		for _, p := range tt.stored {
			stored[p.ShardID] = p
		}
		top := newTopology("orders", scan.TrimHorizon(), tt.selected, stored)
		for _, id := range tt.listed {
			top.nodes[id].listed = true
		}
		got := top.prunable()
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: prunable = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A pruned shard's last rewind goes with it, from the store and from what
// a replay of its journal rebuilds: it was kept in memory and in every
// snapshot for ever, and re-read at every start-up.
func TestAPrunedShardsRewindIsForgotten(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	st := memStore(t, j)
	const id = "shardId-000000000001"
	if err := st.Save(ctx, "s", []ShardProgress{{ShardID: id, State: StateActive, Position: scan.AfterSequence("100")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Rewind(ctx, "s", Rewind{ID: "r1", By: "oncall", At: time.Now()}, map[string]scan.Position{id: scan.AfterSequence("50")}); err != nil {
		t.Fatal(err)
	}
	if rws, _ := st.Rewinds(ctx, "s"); len(rws) != 1 {
		t.Fatalf("rewinds before the prune: %v, want the one of %s", rws, id)
	}
	if err := st.Save(ctx, "s", []ShardProgress{{ShardID: id, State: StateCompleted, Position: scan.ShardEnd()}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Prune(ctx, "s", []string{id}); err != nil {
		t.Fatal(err)
	}
	if rws, _ := st.Rewinds(ctx, "s"); len(rws) != 0 {
		t.Errorf("rewinds after the prune: %v, want none", rws)
	}
	if rws, _ := memStore(t, j).Rewinds(ctx, "s"); len(rws) != 0 {
		t.Errorf("rewinds replayed after the prune: %v, want none", rws)
	}
}
