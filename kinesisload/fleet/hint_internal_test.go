package fleet

import (
	"slices"
	"testing"
)

// A beat with a hint is stored as it is read back, byte for byte: the
// roster write is conditional on the entry as last read, so an encoding
// that changed on the way round would refuse every heartbeat.
func TestABeatWithAHintReadsBackAsWritten(t *testing.T) {
	for _, b := range []beat{
		{counter: 7, changes: 3},
		{counter: 7, changes: 3, hint: hint{from: 2, ids: []string{"shardId-000000000000", "shardId-000000000102"}}},
		{counter: 1, changes: 9, left: true, hint: hint{from: 9, all: true}},
		{counter: 1, changes: 4, hint: hint{from: 4, ids: []string{"orders-7", "shardId-12"}}},
	} {
		s := b.String()
		got, err := parseBeat(s)
		if err != nil {
			t.Fatalf("parseBeat(%q): %v", s, err)
		}
		if got.String() != s || got.hint.from != b.hint.from || got.hint.all != b.hint.all || !slices.Equal(got.hint.ids, b.hint.ids) {
			t.Errorf("beat %q read back as %q (%+v)", s, got.String(), got.hint)
		}
	}
	if got := (beat{changes: 2, hint: hint{from: 1, ids: []string{"shardId-000000000102"}}}).String(); got != "c=0 v=2 h=1:102" {
		t.Errorf("a Kinesis shard ID is not named by its number: %q", got)
	}
}

// A hint covers the changes after a host's last sight of the entry only
// when it names every change since.
func TestAHintCoversOnlyTheChangesItNames(t *testing.T) {
	h := hint{from: 5, ids: []string{"a"}}
	for seen, want := range map[uint64]bool{3: false, 4: true, 5: true, 6: true} {
		if got := h.covers(seen); got != want {
			t.Errorf("hint from 5, seen %d: covers = %v, want %v", seen, got, want)
		}
	}
	if (hint{from: 5, all: true}).covers(4) || (hint{}).covers(4) {
		t.Error("a hint of all, or none, covers a change")
	}
	for _, bad := range []string{"x:1", "3", "3:abc", "3:1000000000000"} {
		if _, err := parseHint(bad); err == nil {
			t.Errorf("parseHint(%q) accepted it", bad)
		}
	}
}
