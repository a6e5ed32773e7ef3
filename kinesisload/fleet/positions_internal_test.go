package fleet

import (
	"math"
	"testing"
	"time"

	"github.com/tidemark/tidemark/scan"
)

const seq56 = "49590338271490256608559692538361571095921575989136588898"

func TestAChunkStoresAPositionAfterASequenceNumberAsTheBareNumber(t *testing.T) {
	e := posEntry{epoch: 7, pos: scan.AfterSequence(seq56)}
	if got, want := e.String(), "7 "+seq56; got != want {
		t.Fatalf("entry written as %q, want %q", got, want)
	}
	back, err := parsePosEntry(e.String())
	if err != nil {
		t.Fatal(err)
	}
	if back != e {
		t.Fatalf("read back %+v, want %+v", back, e)
	}
}

func TestAChunkEntryOfEveryKindReadsBackAsWritten(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 123e6, time.UTC)
	for _, p := range []scan.Position{
		scan.TrimHorizon(), scan.Latest(), scan.ShardEnd(), scan.AtTimestamp(at),
		scan.AtSequence(seq56), scan.AfterSequence(seq56), scan.AfterSequence("1"),
	} {
		e := posEntry{epoch: 1 << 40, pos: p, rate: 250}
		back, err := parsePosEntry(e.String())
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		if !back.pos.Timestamp.Equal(e.pos.Timestamp) || back.pos.Kind != e.pos.Kind || back.pos.Sequence != e.pos.Sequence || back.epoch != e.epoch || back.rate != e.rate {
			t.Fatalf("%q read back as %+v, want %+v", e.String(), back, e)
		}
	}
}

// Chunks written before positions were written as bare numbers name the
// kind: a host of this version takes over from a host of the previous one
// in a rolling restart.
func TestAChunkEntryWrittenWithTheKindsNameIsStillRead(t *testing.T) {
	back, err := parsePosEntry("7 AFTER_SEQUENCE_NUMBER:" + seq56 + " 12")
	if err != nil {
		t.Fatal(err)
	}
	if want := (posEntry{epoch: 7, pos: scan.AfterSequence(seq56), rate: 12}); back != want {
		t.Fatalf("read %+v, want %+v", back, want)
	}
}

// A shard's rate edited by hand to what no shard can read (infinite, not
// a number, negative, or above maxRate) is taken for none: a rate seeds
// its next owner's meter, which decays by a sixtieth a second, so 1e300
// would have made its holder the most loaded host for eleven hours, and
// +Inf for ever, every other host stealing from it by throughput.
func TestARateNoShardCanReadIsTakenForNone(t *testing.T) {
	for _, v := range []string{"Inf", "+Inf", "NaN", "-5", "1e300", "2e9"} {
		it := Item{Partition: "s", Key: prefixShard + "shard-a", Version: 1, Fields: map[string]string{"epoch": "3", "owner": "b", "rate": v}}
		s, err := decodeShard(it)
		if err != nil {
			t.Fatalf("a shard item with rate %q: %v", v, err)
		}
		if s.rate != 0 {
			t.Errorf("a shard item with rate %q has rate %v, want none", v, s.rate)
		}
		e, err := parsePosEntry("3 " + seq56 + " " + v)
		if err != nil {
			t.Fatalf("a positions entry with rate %q: %v", v, err)
		}
		if e.rate != 0 {
			t.Errorf("a positions entry with rate %q has rate %v, want none", v, e.rate)
		}
		b, err := parseBeat("c=1 v=0 b=1 w=" + v)
		if err != nil {
			t.Fatalf("a roster entry with load %q: %v", v, err)
		}
		if math.IsNaN(b.load) || math.IsInf(b.load, 0) || b.load < 0 {
			t.Errorf("a roster entry with load %q has load %v, want a finite load, none or more", v, b.load)
		}
	}
	if s, err := decodeShard(Item{Partition: "s", Key: prefixShard + "shard-a", Version: 1, Fields: map[string]string{"epoch": "3", "rate": "2097152"}}); err != nil || s.rate != 2097152 {
		t.Errorf("a shard item with rate 2 MiB/s: rate %v, err %v; want 2097152", s.rate, err)
	}
}

// A shard in two chunks of a host's positions (its entry left in one
// whose write failed, after it moved to the other with a lease taken
// again) reads as the entry of the later lease, or of one lease the
// further position, in whatever order the chunks come: the later
// chunk's won, and the earlier lease's entry, which its taker does not
// take, sent the shard back to its item's position.
func TestAShardInTwoChunksReadsAsItsLatestEntry(t *testing.T) {
	chunk := func(key, v string) Item {
		return Item{Partition: "s#pos#a", Key: key, Version: 1, Maps: map[string]map[string]string{fieldPos: {"shard-a": v}}}
	}
	for _, c := range []struct{ x, y, want string }{
		{"3 100", "4 90", "4 90"},
		{"4 100", "4 120", "4 120"},
		{"4 100", "4 TRIM_HORIZON", "4 100"},
	} {
		for _, order := range [][2]string{{c.x, c.y}, {c.y, c.x}} {
			got, err := decodePositions([]Item{chunk("pos#0", order[0]), chunk("pos#1", order[1])})
			if err != nil {
				t.Fatal(err)
			}
			if g := got["shard-a"].String(); g != c.want {
				t.Errorf("chunks %q then %q: shard-a reads %q, want %q", order[0], order[1], g, c.want)
			}
		}
	}
}
