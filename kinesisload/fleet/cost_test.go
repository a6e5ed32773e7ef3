package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// holders drives hosts as Loaders do: every round, offer every shard and
// keep the leases granted; commit a position on each (when commit is set).
type holders struct {
	w      *world
	hosts  []*host
	ids    []string
	leases map[*host]map[string]kinesisload.Lease
	seq    int
}

func (hs *holders) round(commit bool) {
	hs.w.advance(hs.w.cfg.RenewInterval)
	hs.seq++
	for _, h := range hs.hosts {
		ls, err := h.m.Acquire(context.Background(), hs.ids)
		if err != nil {
			hs.w.t.Fatal(err)
		}
		for _, l := range ls {
			hs.leases[h][l.Shard()] = l
		}
		for id, l := range hs.leases[h] {
			if l.Err() != nil {
				delete(hs.leases[h], id)
				continue
			}
			if commit {
				if err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence(fmt.Sprint(1000 + hs.seq))}); err != nil {
					hs.w.t.Fatal(err)
				}
			}
		}
	}
}

// The coordination cost grows with hosts, not shards: once the leases are
// balanced, a host's round writes one item: its heartbeat in the roster
// or, when positions moved, one chunk of positions for all its shards
// that carries the heartbeat. Idle, it reads nothing while no host
// changes anything (one read of the partition per ResyncInterval); busy,
// it also reads the roster every round and each other host's heartbeat
// counter every round (a fleet of three: see watchEvery).
func TestCostGrowsWithHostsNotShards(t *testing.T) {
	type cost struct{ writes, reads float64 }
	measure := func(shards int, commit bool) cost {
		w := newWorld(t, fleet.Config{})
		hs := &holders{w: w, leases: map[*host]map[string]kinesisload.Lease{}}
		for _, id := range []string{"a", "b", "c"} {
			h := w.host(id)
			hs.hosts = append(hs.hosts, h)
			hs.leases[h] = map[string]kinesisload.Lease{}
		}
		hs.ids = w.seed(hs.hosts[0], shards)
		for range 60 {
			hs.round(false)
		}
		held := 0
		for _, h := range hs.hosts {
			held += len(hs.leases[h])
		}
		if held != shards {
			t.Fatalf("%d shards: %d held after balancing", shards, held)
		}
		const rounds = 45 // 90 s: three ResyncIntervals
		var w0, r0 int
		for _, h := range hs.hosts {
			w0, r0 = w0+h.table.Writes(), r0+h.table.Reads()
		}
		for range rounds {
			hs.round(commit)
		}
		var w1, r1 int
		for _, h := range hs.hosts {
			w1, r1 = w1+h.table.Writes(), r1+h.table.Reads()
		}
		n := float64(rounds * len(hs.hosts))
		return cost{writes: float64(w1-w0) / n, reads: float64(r1-r0) / n}
	}
	for _, commit := range []bool{false, true} {
		small, large := measure(30, commit), measure(600, commit)
		t.Logf("commits %v: per host per round: 30 shards %.2f writes %.2f reads; 600 shards %.2f writes %.2f reads",
			commit, small.writes, small.reads, large.writes, large.reads)
		// One read of the partition per ResyncInterval (30 s, 15
		// rounds); busy, the roster and the two other hosts'
		// counters every round.
		wantReads := 1.0 / 15
		if commit {
			wantReads += 1 + 2
		}
		for _, c := range []cost{small, large} {
			if c.writes > 1.05 {
				t.Errorf("commits %v: %.2f writes per host per round, want at most 1 whatever the shards", commit, c.writes)
			}
			if c.reads > wantReads+0.01 {
				t.Errorf("commits %v: %.3f reads per host per round, want at most %.3f", commit, c.reads, wantReads)
			}
		}
	}
}

// A host holding more shards than one chunk of positions holds writes
// several, and the host that takes its shards after it dies reads them
// all: every shard resumes from the position committed a round before.
func TestPositionsOfManyShardsSpanChunksAndSurviveTheHost(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	hs := &holders{w: w, hosts: []*host{a}, leases: map[*host]map[string]kinesisload.Lease{a: {}}}
	hs.ids = w.seed(a, 0)
	var ups []kinesisload.ShardProgress
	for i := range 2500 {
		id := fmt.Sprintf("shard-%05d", i)
		hs.ids = append(hs.ids, id)
		ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	}
	if err := a.m.Store().Save(context.Background(), "s", ups); err != nil {
		t.Fatal(err)
	}
	for len(hs.leases[a]) < 2500 {
		hs.round(false)
	}
	hs.round(true) // commits AFTER 1000+seq on every shard, written this round
	committed := scan.AfterSequence(fmt.Sprint(1000 + hs.seq))
	hs.round(false)
	items, err := w.table.Query(context.Background(), "s#pos#a")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Errorf("2,500 positions in %d chunks, want 3 of at most 1,000", len(items))
	}
	a.table.Kill()
	b := w.host("b")
	hb := &holders{w: w, hosts: []*host{b}, ids: hs.ids, leases: map[*host]map[string]kinesisload.Lease{b: {}}}
	for range 200 {
		if len(hb.leases[b]) == 2500 {
			break
		}
		hb.round(false)
		w.advance(time.Second)
	}
	if len(hb.leases[b]) != 2500 {
		t.Fatalf("b took %d of the dead host's 2,500 shards", len(hb.leases[b]))
	}
	for id, l := range hb.leases[b] {
		if got := l.Progress().Position; !got.Equal(committed) {
			t.Fatalf("%s resumes at %v, want the dead host's %v", id, got, committed)
		}
	}
}

// Every commit is durable within one round: with the default
// CheckpointInterval (RenewInterval), a position committed before a round
// is in the host's positions after it, even when the rounds' clock
// readings are a little less than CheckpointInterval apart (a tick
// delivered late, then one on time; a heartbeat slower in one round than
// in the next). Positions written only when a full CheckpointInterval had
// passed skipped every round that followed a late one.
func TestPositionsAreWrittenEveryRoundDespiteJitter(t *testing.T) {
	w := newWorld(t, fleet.Config{})
	a := w.host("a")
	hs := &holders{w: w, hosts: []*host{a}, leases: map[*host]map[string]kinesisload.Lease{a: {}}}
	hs.ids = w.seed(a, 4)
	for range 10 {
		hs.round(false)
	}
	if len(hs.leases[a]) != 4 {
		t.Fatalf("a holds %d of 4 shards", len(hs.leases[a]))
	}
	ctx := context.Background()
	for i := range 10 {
		// Rounds alternately 50 ms late and on time.
		step := w.cfg.RenewInterval + 50*time.Millisecond
		if i%2 == 1 {
			step = w.cfg.RenewInterval - 50*time.Millisecond
		}
		want := scan.AfterSequence(fmt.Sprint(5000 + i))
		for id, l := range hs.leases[a] {
			if err := l.Commit(ctx, kinesisload.ShardProgress{ShardID: id, Position: want}); err != nil {
				t.Fatal(err)
			}
		}
		w.now.Add(int64(step))
		a.c.Round()
		it, err := w.table.Get(ctx, "s#pos#a", "pos#0")
		if err != nil {
			t.Fatal(err)
		}
		for id := range hs.leases[a] {
			got := it.Maps["pos"][id]
			if f := strings.Fields(got); len(f) < 2 || !positionIs(f[1], want) {
				t.Fatalf("round %d (%v after the last): shard %s's position in the table is %q, want the one committed before the round, %v", i, step, id, got, want)
			}
		}
	}
}

// positionIs tells whether v, a position as a chunk stores it, is want.
func positionIs(v string, want scan.Position) bool {
	p, err := scan.Parse(v)
	return err == nil && p == want
}
