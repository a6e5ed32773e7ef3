package fleet

import (
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
