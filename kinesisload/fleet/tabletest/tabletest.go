// Package tabletest is the conformance suite of [fleet.Table]: the
// contract every table of the fleet protocol must keep (versions,
// conditional writes, conflicts, entries of a map that several hosts
// write, consistent reads). [Run] runs it; [fleet.MemoryTable] and
// kinesisload/dynamo's table (on dynalite) pass it.
package tabletest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// Run runs every case of the suite as a subtest, each on a table from
// newTable. Every case uses partitions of its own (named after the case
// and a counter), so newTable may return the same table every time.
func Run(t *testing.T, newTable func(t *testing.T) fleet.Table) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c.run(ctx, t, newTable(t), partition(c.name))
		})
	}
}

var seq atomic.Int64

// partition returns a partition name of its own for a case.
func partition(name string) string {
	return fmt.Sprintf("tabletest-%s-%d-%d", strings.ToLower(name), time.Now().UnixNano(), seq.Add(1))
}

type suiteCase struct {
	name string
	run  func(ctx context.Context, t *testing.T, tb fleet.Table, p string)
}

var cases = []suiteCase{
	{"GetAbsent", testGetAbsent},
	{"GetFieldAnswersOneAttribute", testGetField},
	{"PutCreatesAndVersions", testPutVersions},
	{"PutConflicts", testPutConflicts},
	{"PutReplacesWhole", testPutReplaces},
	{"ValuesRoundTrip", testValues},
	{"QueryOnePartitionSorted", testQuery},
	{"DeleteConditional", testDelete},
	{"SetEntry", testSetEntry},
	{"SetEntryOnAnItemWithout", testSetEntryExisting},
	{"SetEntryOverAnEmptyEntry", testSetEntryEmpty},
	{"SetEntriesOfManyWriters", testSetEntryConcurrent},
	{"SetEntriesCreatingTheItemTogether", testSetEntryCreateConcurrent},
	{"ConditionalWritesSerialise", testPutConcurrent},
	{"LargeMap", testLargeMap},
	{"CancelledIsUnknown", testCancelled},
	{"SetEntryRefusedOnAbsentItemCreatesNothing", testSetEntryRefusedAbsent},
	{"SetEntryRefusedOnItemWithoutMapChangesNothing", testSetEntryRefusedNoMap},
	{"QueryReadsEveryPage", testQueryPages},
	{"PutReturnsTheItemAsStored", testPutReturns},
	{"EveryCallOnAnEndedContextIsUnknown", testCancelledAll},
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func item(p, key string, fields map[string]string) fleet.Item {
	return fleet.Item{Partition: p, Key: key, Fields: fields}
}

func same(a, b fleet.Item) bool {
	if a.Partition != b.Partition || a.Key != b.Key || a.Version != b.Version || !maps.Equal(a.Fields, b.Fields) || len(a.Maps) != len(b.Maps) {
		return false
	}
	for k, m := range a.Maps {
		if !maps.Equal(m, b.Maps[k]) {
			return false
		}
	}
	return true
}

func show(it fleet.Item) string {
	return fmt.Sprintf("%s/%s v%d fields %v maps %v", it.Partition, it.Key, it.Version, it.Fields, it.Maps)
}

// A missing item reads as version 0 with nothing in it, not an error.
func testGetAbsent(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	got, err := tb.Get(ctx, p, "nothing")
	must(t, "Get of a missing item", err)
	if got.Exists() || got.Version != 0 || len(got.Fields) != 0 || len(got.Maps) != 0 {
		t.Errorf("Get of a missing item = %s, want version 0 and nothing", show(got))
	}
}

// Put with version 0 creates the item at a version above 0; each Put at
// the version read moves it one up; Get reads what was stored.
func testPutVersions(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	stored, err := tb.Put(ctx, item(p, "k", map[string]string{"a": "1"}))
	must(t, "Put of a new item", err)
	if !stored.Exists() {
		t.Fatalf("a new item is stored at version %d, want one above 0", stored.Version)
	}
	v0 := stored.Version
	got, err := tb.Get(ctx, p, "k")
	must(t, "Get", err)
	want := item(p, "k", map[string]string{"a": "1"})
	want.Version = v0
	if !same(got, want) {
		t.Errorf("Get = %s, want %s", show(got), show(want))
	}
	for v := v0; v < v0+3; v++ {
		next := item(p, "k", map[string]string{"a": fmt.Sprint(v - v0 + 2)})
		next.Version = v
		stored, err := tb.Put(ctx, next)
		must(t, fmt.Sprintf("Put at version %d", v), err)
		if stored.Version != v+1 {
			t.Errorf("Put at version %d stored version %d, want %d", v, stored.Version, v+1)
		}
	}
	if got, _ := tb.Get(ctx, p, "k"); got.Version != v0+3 || got.Fields["a"] != "4" {
		t.Errorf("after 4 writes Get = %s, want version %d with a=4", show(got), v0+3)
	}
}

// A Put whose version is not the stored one fails with ErrConflict and
// changes nothing: creating an item that exists, writing over a newer
// one, or over one deleted.
func testPutConflicts(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	stored, err := tb.Put(ctx, item(p, "k", map[string]string{"a": "1"}))
	must(t, "Put", err)
	v0 := stored.Version
	for _, v := range []uint64{0, v0 + 1, v0 + 6} {
		bad := item(p, "k", map[string]string{"a": "bad"})
		bad.Version = v
		if _, err := tb.Put(ctx, bad); !errors.Is(err, fleet.ErrConflict) {
			t.Errorf("Put at version %d over version %d = %v, want an error wrapping ErrConflict", v, v0, err)
		}
	}
	if got, _ := tb.Get(ctx, p, "k"); got.Version != v0 || got.Fields["a"] != "1" {
		t.Errorf("after refused Puts Get = %s, want version %d with a=1", show(got), v0)
	}
	ghost := item(p, "never", map[string]string{"a": "x"})
	ghost.Version = 1
	if _, err := tb.Put(ctx, ghost); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("Put at version 1 of a missing item = %v, want ErrConflict", err)
	}
	if got, _ := tb.Get(ctx, p, "never"); got.Exists() {
		t.Errorf("a refused Put created %s", show(got))
	}
}

// Put replaces the whole item: fields and maps it does not have are gone.
func testPutReplaces(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	first := fleet.Item{Partition: p, Key: "k", Fields: map[string]string{"a": "1", "b": "2"}, Maps: map[string]map[string]string{"m": {"x": "1"}}}
	stored, err := tb.Put(ctx, first)
	must(t, "Put", err)
	second := fleet.Item{Partition: p, Key: "k", Version: stored.Version, Fields: map[string]string{"a": "3"}}
	_, err = tb.Put(ctx, second)
	must(t, "Put over it", err)
	got, _ := tb.Get(ctx, p, "k")
	if got.Fields["b"] != "" || len(got.Maps["m"]) != 0 || got.Fields["a"] != "3" {
		t.Errorf("after a Put of a=3 alone, Get = %s: want only a=3", show(got))
	}
}

// Values come back as they went in: JSON, spaces, numbers in fields the
// protocol names (epoch, gen, rate, progress, counter), unicode.
func testValues(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	it := fleet.Item{Partition: p, Key: "shard#shardId-000000000001", Fields: map[string]string{
		"prog":     `{"id":"shardId-000000000001","state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:49590338271490256608559692538361571095921575989136588898"}`,
		"epoch":    "4294967297",
		"gen":      "3",
		"rate":     "1048576",
		"progress": "12",
		"counter":  "18446744073709551615",
		"owner":    "host-ünïcode #1",
		"spaces":   "a b  c",
	}, Maps: map[string]map[string]string{"pend": {"tok": `{"pos":"TRIM_HORIZON"}`}, "pos": {"shardId-000000000002": "7 AFTER_SEQUENCE_NUMBER:1 2048"}}}
	stored, err := tb.Put(ctx, it)
	must(t, "Put", err)
	got, err := tb.Get(ctx, p, it.Key)
	must(t, "Get", err)
	it.Version = stored.Version
	if !same(got, it) {
		t.Errorf("Get = %s\nwant  %s", show(got), show(it))
	}
}

// Query reads every item of one partition, sorted by key, and nothing of
// another; an empty partition has none.
func testQuery(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	keys := []string{"shard#b", "init", "shard#a", "roster", "identity"}
	for _, k := range keys {
		_, err := tb.Put(ctx, item(p, k, map[string]string{"k": k}))
		must(t, "Put "+k, err)
	}
	_, err := tb.Put(ctx, item(p+"-other", "shard#c", map[string]string{"k": "other"}))
	must(t, "Put in another partition", err)
	got, err := tb.Query(ctx, p)
	must(t, "Query", err)
	var gotKeys []string
	for _, it := range got {
		gotKeys = append(gotKeys, it.Key)
		if it.Partition != p || it.Fields["k"] != it.Key || !it.Exists() {
			t.Errorf("Query returned %s", show(it))
		}
	}
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(gotKeys, want) {
		t.Errorf("Query keys = %v, want %v (sorted)", gotKeys, want)
	}
	empty, err := tb.Query(ctx, p+"-empty")
	must(t, "Query of an empty partition", err)
	if len(empty) != 0 {
		t.Errorf("Query of an empty partition = %d items", len(empty))
	}
}

// Delete removes an item at the version given; at another version it
// fails with ErrConflict and keeps it; a missing item is no error. An item
// created again starts at a version above its earlier life's, so a write
// made from a read of that life fails.
func testDelete(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	stored, err := tb.Put(ctx, item(p, "k", map[string]string{"a": "1"}))
	must(t, "Put", err)
	if err := tb.Delete(ctx, p, "k", stored.Version+1); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("Delete at the wrong version = %v, want ErrConflict", err)
	}
	if got, _ := tb.Get(ctx, p, "k"); !got.Exists() {
		t.Error("a refused Delete removed the item")
	}
	must(t, "Delete at its version", tb.Delete(ctx, p, "k", stored.Version))
	if got, _ := tb.Get(ctx, p, "k"); got.Exists() {
		t.Errorf("after Delete Get = %s", show(got))
	}
	must(t, "Delete of a missing item", tb.Delete(ctx, p, "k", 1))
	// A life written four times, then deleted, then a new life.
	life, err := tb.Put(ctx, item(p, "k", map[string]string{"a": "2"}))
	must(t, "Put after Delete", err)
	first := life.Version
	for range 3 {
		life, err = tb.Put(ctx, life)
		must(t, "Put over it", err)
	}
	must(t, "Delete at its version", tb.Delete(ctx, p, "k", life.Version))
	again, err := tb.Put(ctx, item(p, "k", map[string]string{"a": "3"}))
	must(t, "Put after the second Delete", err)
	if again.Version <= life.Version {
		t.Errorf("an item created again after Delete is at version %d, not above its earlier life's %d", again.Version, life.Version)
	}
	for v := first; v <= life.Version; v++ {
		stale := item(p, "k", map[string]string{"a": "stale"})
		stale.Version = v
		if _, err := tb.Put(ctx, stale); !errors.Is(err, fleet.ErrConflict) {
			t.Errorf("Put at version %d, of the item's earlier life = %v, want ErrConflict", v, err)
		}
	}
	entry, err := tb.SetEntry(ctx, p, "k2", "m", "e", "", "1")
	must(t, "SetEntry creating k2", err)
	must(t, "Delete k2", tb.Delete(ctx, p, "k2", entry.Version))
	entry2, err := tb.SetEntry(ctx, p, "k2", "m", "e", "", "2")
	must(t, "SetEntry creating k2 again", err)
	if entry2.Version <= entry.Version {
		t.Errorf("an item SetEntry created again after Delete is at version %d, not above its earlier life's %d", entry2.Version, entry.Version)
	}
}

// SetEntry creates the item and the map, sets one entry on condition of
// its value, removes it with "", grows the version, and returns the item.
func testSetEntry(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	got, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "", "c=1")
	must(t, "SetEntry of a new item", err)
	if got.Maps["beats"]["a"] != "c=1" || !got.Exists() {
		t.Errorf("SetEntry on a missing item returned %s, want beats[a]=c=1 at a version above 0", show(got))
	}
	v0 := got.Version
	if _, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "", "c=9"); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("SetEntry of an existing entry as absent = %v, want ErrConflict", err)
	}
	if _, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "c=7", "c=9"); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("SetEntry from a wrong value = %v, want ErrConflict", err)
	}
	got, err = tb.SetEntry(ctx, p, "roster", "beats", "b", "", "c=1 left")
	must(t, "SetEntry of a second entry", err)
	got, err = tb.SetEntry(ctx, p, "roster", "beats", "a", "c=1", "c=2")
	must(t, "SetEntry from the right value", err)
	if want := map[string]string{"a": "c=2", "b": "c=1 left"}; !maps.Equal(got.Maps["beats"], want) || got.Version != v0+2 {
		t.Errorf("returned %s, want beats %v at version %d", show(got), want, v0+2)
	}
	got, err = tb.SetEntry(ctx, p, "roster", "beats", "b", "c=1 left", "")
	must(t, "SetEntry removing an entry", err)
	if want := map[string]string{"a": "c=2"}; !maps.Equal(got.Maps["beats"], want) {
		t.Errorf("after removing b: %s, want beats %v", show(got), want)
	}
	if back, _ := tb.Get(ctx, p, "roster"); !same(back, got) {
		t.Errorf("Get = %s, SetEntry returned %s", show(back), show(got))
	}
	// A Put at the version SetEntry left succeeds; at an older one not.
	stale := read(ctx, tb, p, "roster")
	stale.Version--
	if _, err := tb.Put(ctx, stale); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("Put at a version before the last SetEntry = %v, want ErrConflict", err)
	}
}

func read(ctx context.Context, tb fleet.Table, p, key string) fleet.Item {
	it, _ := tb.Get(ctx, p, key)
	return it
}

// SetEntry on an item written by Put, which has fields and no such map:
// the map is added, the fields stay.
func testSetEntryExisting(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	stored, err := tb.Put(ctx, item(p, "roster", map[string]string{"keep": "me"}))
	must(t, "Put", err)
	got, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "", "c=1")
	must(t, "SetEntry on an item without the map", err)
	if got.Fields["keep"] != "me" || got.Maps["beats"]["a"] != "c=1" || got.Version != stored.Version+1 {
		t.Errorf("SetEntry on an existing item returned %s, want keep=me, beats[a]=c=1, version %d", show(got), stored.Version+1)
	}
}

// An entry present with an empty value (as a hand edit in a console may
// leave it) is as absent: SetEntry from "" sets it. (On DynamoDB a write
// conditional on the entry's absence was refused, and the host whose
// roster entry it was could never beat again.)
func testSetEntryEmpty(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	_, err := tb.Put(ctx, fleet.Item{Partition: p, Key: "roster", Maps: map[string]map[string]string{"beats": {"a": "", "b": "c=1"}}})
	must(t, "Put", err)
	got, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "", "c=1")
	must(t, "SetEntry from \"\" over an empty entry", err)
	if want := map[string]string{"a": "c=1", "b": "c=1"}; !maps.Equal(got.Maps["beats"], want) {
		t.Errorf("after SetEntry: %s, want beats %v", show(got), want)
	}
}

// Many writers each set their own entry of one item, over and over: no
// write of one conflicts with another's, and every entry ends at its last
// value.
func testSetEntryConcurrent(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	const writers, rounds = 8, 15
	created, err := tb.SetEntry(ctx, p, "roster", "beats", "first", "", "c=0")
	must(t, "SetEntry creating the item", err)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			host := fmt.Sprintf("host-%d", w)
			old := ""
			for r := 1; r <= rounds; r++ {
				v := fmt.Sprintf("c=%d", r)
				if _, err := tb.SetEntry(ctx, p, "roster", "beats", host, old, v); err != nil {
					errs <- fmt.Errorf("%s: round %d: %w", host, r, err)
					return
				}
				old = v
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := read(ctx, tb, p, "roster")
	for w := range writers {
		if v := got.Maps["beats"][fmt.Sprintf("host-%d", w)]; v != fmt.Sprintf("c=%d", rounds) {
			t.Errorf("host-%d's entry is %q, want c=%d", w, v, rounds)
		}
	}
	if want := created.Version + writers*rounds; got.Version != want {
		t.Errorf("version %d after %d SetEntry, want %d", got.Version, writers*rounds, want)
	}
}

// Many writers each set their own entry of an item that does not exist
// yet, at once (the hosts of a new fleet registering): every write
// succeeds, whichever of them creates the item, and every entry is in it.
func testSetEntryCreateConcurrent(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	const writers = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			<-start
			host := fmt.Sprintf("host-%d", w)
			if _, err := tb.SetEntry(ctx, p, "roster", "beats", host, "", "c=1"); err != nil {
				errs <- fmt.Errorf("%s: %w", host, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("SetEntry of an entry of its own on an item created meanwhile: %v", err)
	}
	got := read(ctx, tb, p, "roster")
	for w := range writers {
		if v := got.Maps["beats"][fmt.Sprintf("host-%d", w)]; v != "c=1" {
			t.Errorf("host-%d's entry is %q, want c=1 (item %s)", w, v, show(got))
		}
	}
}

// Conditional writes serialise: writers that each add one to a counter by
// read, Put at the version read, and again on ErrConflict, end with the
// counter at the number of additions.
func testPutConcurrent(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	const writers, adds = 4, 10
	created, err := tb.Put(ctx, item(p, "n", map[string]string{"n": "0"}))
	must(t, "Put", err)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range writers {
		wg.Go(func() {
			for range adds {
				for {
					cur, err := tb.Get(ctx, p, "n")
					if err != nil {
						failed.Add(1)
						return
					}
					var n int
					fmt.Sscan(cur.Fields["n"], &n)
					next := item(p, "n", map[string]string{"n": fmt.Sprint(n + 1)})
					next.Version = cur.Version
					if _, err := tb.Put(ctx, next); err == nil {
						break
					} else if !errors.Is(err, fleet.ErrConflict) {
						failed.Add(1)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d writers failed with an error other than ErrConflict", f)
	}
	if got := read(ctx, tb, p, "n"); got.Fields["n"] != fmt.Sprint(writers*adds) || got.Version != created.Version+writers*adds {
		t.Errorf("counter %s at version %d, want %d at %d: a conditional write was lost", got.Fields["n"], got.Version, writers*adds, created.Version+writers*adds)
	}
}

// A map of a thousand entries of about 100 bytes (a chunk of a host's
// positions) is stored and read whole.
func testLargeMap(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	m := map[string]string{}
	for i := range 1000 {
		m[fmt.Sprintf("shardId-%012d", i)] = fmt.Sprintf("4294967297 AFTER_SEQUENCE_NUMBER:4959033827149025660855969253836157109592157598913658%04d 1048576", i)
	}
	_, err := tb.Put(ctx, fleet.Item{Partition: p, Key: "pos#0", Maps: map[string]map[string]string{"pos": m}})
	must(t, "Put of a large map", err)
	got := read(ctx, tb, p, "pos#0")
	if !maps.Equal(got.Maps["pos"], m) {
		t.Errorf("the large map came back with %d entries, not as written", len(got.Maps["pos"]))
	}
}

// A call on a context that has ended fails with an error that wraps
// ErrUnknown (a write's outcome is unknown) and is not a conflict.
func testCancelled(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tb.Put(done, item(p, "k", nil)); !errors.Is(err, fleet.ErrUnknown) || errors.Is(err, fleet.ErrConflict) {
		t.Errorf("Put on an ended context = %v, want an error wrapping ErrUnknown", err)
	}
	if _, err := tb.Get(done, p, "k"); !errors.Is(err, fleet.ErrUnknown) {
		t.Errorf("Get on an ended context = %v, want an error wrapping ErrUnknown", err)
	}
}
