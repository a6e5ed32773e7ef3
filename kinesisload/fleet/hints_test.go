package fleet_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// readCounter is a Table that counts one host's reads of the stream's
// partition: Queries, and Gets of shard items by key.
type readCounter struct {
	fleet.Table
	mu      sync.Mutex
	queries int
	gets    map[string]int
}

func (c *readCounter) Query(ctx context.Context, partition string) ([]fleet.Item, error) {
	if partition == "s" {
		c.mu.Lock()
		c.queries++
		c.mu.Unlock()
	}
	return c.Table.Query(ctx, partition)
}

func (c *readCounter) Get(ctx context.Context, partition, key string) (fleet.Item, error) {
	if partition == "s" && strings.HasPrefix(key, "shard#") {
		c.mu.Lock()
		c.gets[key]++
		c.mu.Unlock()
	}
	return c.Table.Get(ctx, partition, key)
}

// reset starts the counts again and returns those so far.
func (c *readCounter) reset() (queries int, gets map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	queries, gets = c.queries, c.gets
	c.queries, c.gets = 0, map[string]int{}
	return queries, gets
}

// hintRig is two hosts, x and y, on one memory table with rounds run by
// hand on a manual clock; y's reads are counted. ResyncInterval is an
// hour: y reads only what the roster tells it to.
type hintRig struct {
	t      *testing.T
	mem    *fleet.MemoryTable
	now    atomic.Int64
	xc, yc *fleet.Coordinator
	x, y   kinesisload.Membership
	yreads *readCounter
}

func newHintRig(t *testing.T, shards ...string) *hintRig {
	r := &hintRig{t: t, mem: fleet.NewMemoryTable()}
	r.yreads = &readCounter{Table: r.mem, gets: map[string]int{}}
	join := func(id string, table fleet.Table) (*fleet.Coordinator, kinesisload.Membership) {
		c, err := fleet.New(table, fleet.Config{HostID: id, ManualRounds: true, Logger: slog.New(slog.DiscardHandler),
			LeaseDuration: 10 * time.Second, RenewInterval: time.Second, ResyncInterval: time.Hour,
			Clock: func() time.Time { return start.Add(time.Duration(r.now.Load())) }})
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Join(context.Background(), "s")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Leave(context.Background()) })
		return c, m
	}
	r.xc, r.x = join("x", r.mem)
	r.yc, r.y = join("y", r.yreads)
	if err := r.x.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", active(shards...))
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.y.Initialise(context.Background(), func(context.Context, kinesisload.PositionStore) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r.rounds(3, true)
	r.yreads.reset()
	return r
}

func active(ids ...string) []kinesisload.ShardProgress {
	var ups []kinesisload.ShardProgress
	for _, id := range ids {
		ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	}
	return ups
}

// rounds runs n rounds of x (and of y when withY), a second apart.
func (r *hintRig) rounds(n int, withY bool) {
	for range n {
		r.now.Add(int64(time.Second))
		r.xc.Round()
		if withY {
			r.yc.Round()
		}
	}
}

// y takes shard once its Loader offers it (y holds nothing): proof that
// y's view of the table holds the shard.
func (r *hintRig) yTakes(shard string) {
	r.t.Helper()
	if _, err := r.y.Acquire(context.Background(), []string{shard}); err != nil {
		r.t.Fatal(err)
	}
	r.rounds(1, true)
	ls, err := r.y.Acquire(context.Background(), []string{shard})
	if err != nil {
		r.t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Shard() != shard {
		r.t.Fatalf("y was granted %d leases, want the one of %s: its view lacks the shard", len(ls), shard)
	}
}

// A shard one host adds is read by the others through the item its
// roster entry names, not through a read of the whole partition. (At
// 10,000 shards and 50 hosts every change made every host read the 3 MB
// partition within a round: 12 times the partition key's read limit.)
func TestAChangeIsReadThroughTheItemsItsHintNames(t *testing.T) {
	r := newHintRig(t, "a", "b")
	if err := r.x.Store().Save(context.Background(), "s", active("c")); err != nil {
		t.Fatal(err)
	}
	r.rounds(1, true)
	queries, gets := r.yreads.reset()
	if queries != 0 || gets["shard#c"] != 1 || len(gets) != 1 {
		t.Fatalf("y read the partition %d times and the shard items %v after x added shard c; want only shard#c, once", queries, gets)
	}
	r.yTakes("c")
}

// A host that missed a hint (its rounds stood still for longer than a host
// keeps one) reads the whole partition: the change is not lost to it.
func TestAHostThatMissedAHintReadsTheWholePartition(t *testing.T) {
	r := newHintRig(t, "a", "b")
	if err := r.x.Store().Save(context.Background(), "s", active("c")); err != nil {
		t.Fatal(err)
	}
	r.rounds(5, false) // y stands still; x drops its hint
	beats := r.rosterEntry("x")
	if strings.Contains(beats, "h=") {
		t.Fatalf("x's entry %q still holds its hint after 5 rounds", beats)
	}
	r.rounds(1, true)
	if queries, _ := r.yreads.reset(); queries != 1 {
		t.Fatalf("y read the partition %d times after it missed x's hint, want 1", queries)
	}
	r.yTakes("c")
}

// A hint names at most a few shards; a change that writes more asks for
// a read of the whole partition.
func TestAChangeOfManyShardsIsReadInTheWholePartition(t *testing.T) {
	r := newHintRig(t, "a")
	var many []string
	for i := range 20 {
		many = append(many, string(rune('b'+i)))
	}
	if err := r.x.Store().Save(context.Background(), "s", active(many...)); err != nil {
		t.Fatal(err)
	}
	if beats := r.rosterEntry("x"); !strings.Contains(beats, ":*") {
		t.Fatalf("x's entry %q does not ask for a whole read", beats)
	}
	r.rounds(1, true)
	if queries, gets := r.yreads.reset(); queries != 1 || len(gets) != 0 {
		t.Fatalf("y read the partition %d times and items %v, want one read of the partition", queries, gets)
	}
	r.yTakes("u")
}

// rosterEntry returns host's entry in the roster as stored.
func (r *hintRig) rosterEntry(host string) string {
	r.t.Helper()
	it, err := r.mem.Get(context.Background(), "s", "roster")
	if err != nil {
		r.t.Fatal(err)
	}
	return it.Maps["beats"][host]
}

// A host that joins with no change made makes no other host read the
// whole partition: its takes, when it takes shards, come with hints.
func TestAJoiningHostMakesNoOtherReadTheWholePartition(t *testing.T) {
	r := newHintRig(t, "a", "b", "c", "d")
	if _, err := r.x.Acquire(context.Background(), []string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	r.rounds(2, true) // x takes every shard: y holds nothing to share
	r.yreads.reset()
	c, err := fleet.New(r.mem, fleet.Config{HostID: "z", ManualRounds: true, Logger: slog.New(slog.DiscardHandler),
		LeaseDuration: 10 * time.Second, RenewInterval: time.Second, ResyncInterval: time.Hour,
		Clock: func() time.Time { return start.Add(time.Duration(r.now.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	z, err := c.Join(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = z.Leave(context.Background()) })
	if _, err := z.Acquire(context.Background(), []string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		r.now.Add(int64(time.Second))
		r.xc.Round()
		r.yc.Round()
		c.Round()
	}
	ls, err := z.Acquire(context.Background(), []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	queries, gets := r.yreads.reset()
	if len(ls) == 0 {
		t.Fatal("z took no shard from x")
	}
	if queries != 0 || len(gets) == 0 {
		t.Fatalf("y read the partition %d times and the items %v while z joined and took %d shards; want the items only", queries, gets, len(ls))
	}
}
