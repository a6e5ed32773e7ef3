package tabletest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// A SetEntry whose condition fails changes nothing: on an item that does
// not exist, it does not create it.
func testSetEntryRefusedAbsent(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	for _, value := range []string{"c=2", ""} {
		if _, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "c=1", value); !errors.Is(err, fleet.ErrConflict) {
			t.Errorf("SetEntry from c=1 to %q on a missing item = %v, want ErrConflict", value, err)
		}
		if got := read(ctx, tb, p, "roster"); got.Exists() {
			t.Errorf("a refused SetEntry (to %q) created %s", value, show(got))
		}
	}
}

// A SetEntry whose condition fails on an item without the map changes
// nothing: the item stays as it was, version and attributes.
func testSetEntryRefusedNoMap(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	stored, err := tb.Put(ctx, item(p, "roster", map[string]string{"keep": "me"}))
	must(t, "Put", err)
	if _, err := tb.SetEntry(ctx, p, "roster", "beats", "a", "c=1", "c=2"); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("SetEntry from c=1 on an item without the map = %v, want ErrConflict", err)
	}
	if got := read(ctx, tb, p, "roster"); !same(got, stored) {
		t.Errorf("after a refused SetEntry Get = %s, want %s", show(got), show(stored))
	}
}

// A partition of more than a megabyte (DynamoDB's page) is read whole, in
// order: Query follows every page.
func testQueryPages(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	const items = 14
	big := strings.Repeat("x", 100<<10)
	var want []string
	for i := range items {
		key := fmt.Sprintf("pos#%02d", i)
		_, err := tb.Put(ctx, fleet.Item{Partition: p, Key: key, Fields: map[string]string{"blob": big, "i": fmt.Sprint(i)}})
		must(t, "Put "+key, err)
		want = append(want, key)
	}
	got, err := tb.Query(ctx, p)
	must(t, "Query", err)
	var keys []string
	for _, it := range got {
		keys = append(keys, it.Key)
		if len(it.Fields["blob"]) != len(big) {
			t.Errorf("item %s came back with %d bytes", it.Key, len(it.Fields["blob"]))
		}
	}
	if !slices.Equal(keys, want) {
		t.Errorf("Query of a partition over a megabyte = %v, want %v", keys, want)
	}
}

// Put returns the item as stored, attributes and all, as Get then reads
// it: the protocol takes a shard item Put returned into its view.
func testPutReturns(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	it := fleet.Item{Partition: p, Key: "shard#x", Fields: map[string]string{"owner": "h1", "epoch": "12"},
		Maps: map[string]map[string]string{"pend": {"tok": "{}"}}}
	stored, err := tb.Put(ctx, it)
	must(t, "Put", err)
	if back := read(ctx, tb, p, "shard#x"); !same(stored, back) {
		t.Errorf("Put returned %s, Get reads %s", show(stored), show(back))
	}
	next := stored.Clone()
	next.Fields["owner"] = "h2"
	stored, err = tb.Put(ctx, next)
	must(t, "Put over it", err)
	if back := read(ctx, tb, p, "shard#x"); !same(stored, back) {
		t.Errorf("Put over it returned %s, Get reads %s", show(stored), show(back))
	}
}

// Every call on an ended context fails with ErrUnknown, and a write
// lands nothing.
func testCancelledAll(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	stored, err := tb.Put(ctx, item(p, "k", map[string]string{"a": "1"}))
	must(t, "Put", err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tb.Query(done, p); !errors.Is(err, fleet.ErrUnknown) {
		t.Errorf("Query on an ended context = %v, want ErrUnknown", err)
	}
	if err := tb.Delete(done, p, "k", stored.Version); !errors.Is(err, fleet.ErrUnknown) || errors.Is(err, fleet.ErrConflict) {
		t.Errorf("Delete on an ended context = %v, want ErrUnknown", err)
	}
	if _, err := tb.SetEntry(done, p, "k", "m", "e", "", "1"); !errors.Is(err, fleet.ErrUnknown) || errors.Is(err, fleet.ErrConflict) {
		t.Errorf("SetEntry on an ended context = %v, want ErrUnknown", err)
	}
	if got := read(ctx, tb, p, "k"); !same(got, stored) {
		t.Errorf("after calls on an ended context Get = %s, want %s", show(got), show(stored))
	}
}

// GetField answers the item's version and the one scalar attribute asked
// for, nothing else: not the other fields, not the maps (not a map of
// that name either); an item without that attribute answers its version
// alone, a missing item version 0.
func testGetField(ctx context.Context, t *testing.T, tb fleet.Table, p string) {
	it := item(p, "k", map[string]string{"a": "1", "b": "two"})
	it.Maps = map[string]map[string]string{"m": {"x": "y"}, "a2": {"k": "v"}}
	stored, err := tb.Put(ctx, it)
	must(t, "Put", err)
	got, err := tb.GetField(ctx, p, "k", "b")
	must(t, "GetField", err)
	if got.Version != stored.Version || got.Partition != p || got.Key != "k" || len(got.Fields) != 1 || got.Field("b") != "two" || len(got.Maps) != 0 {
		t.Errorf("GetField of b = %s, want version %d and b = two alone", show(got), stored.Version)
	}
	got, err = tb.GetField(ctx, p, "k", "m")
	must(t, "GetField of a map's name", err)
	if got.Version != stored.Version || len(got.Fields) != 0 || len(got.Maps) != 0 {
		t.Errorf("GetField of the map m = %s, want version %d and nothing else", show(got), stored.Version)
	}
	got, err = tb.GetField(ctx, p, "k", "none")
	must(t, "GetField of a missing attribute", err)
	if got.Version != stored.Version || len(got.Fields) != 0 || len(got.Maps) != 0 {
		t.Errorf("GetField of a missing attribute = %s, want version %d and nothing else", show(got), stored.Version)
	}
	got, err = tb.GetField(ctx, p, "nothing", "a")
	must(t, "GetField of a missing item", err)
	if got.Exists() || len(got.Fields) != 0 || len(got.Maps) != 0 {
		t.Errorf("GetField of a missing item = %s, want version 0 and nothing", show(got))
	}
}
