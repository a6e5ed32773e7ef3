package kpl

import (
	"bytes"
	"testing"
)

// FuzzRecordFastPath: whenever the fast path decodes a Record message,
// the general parser decodes it the same way, without error. Seeds are in
// testdata/fuzz.
func FuzzRecordFastPath(f *testing.F) {
	f.Add(pbRecord(3, "data"))
	f.Add(pbBytes(pbVarint(pbVarint(nil, 1, 300), 2, 7), 3, []byte("with an explicit hash key")))
	f.Add(pbBytes(pbVarint(nil, 1, 0), 3, nil))
	f.Fuzz(func(t *testing.T, m []byte) {
		pk, ehk, hasEHK, data, ok := parseRecordFast(m)
		if !ok {
			return
		}
		pk2, ehk2, hasEHK2, data2, err := parseRecord(m)
		if err != nil {
			t.Fatalf("fast path decoded %x, the general parser refuses it: %v", m, err)
		}
		if pk != pk2 || ehk != ehk2 || hasEHK != hasEHK2 || !bytes.Equal(data, data2) || (data == nil) != (data2 == nil) {
			t.Fatalf("%x: fast (%d, %d, %v, %q), general (%d, %d, %v, %q)", m, pk, ehk, hasEHK, data, pk2, ehk2, hasEHK2, data2)
		}
	})
}

// The records the KPL writes take the fast path (FuzzRecordFastPath would
// pass without it, so check that it is taken), and records it does not
// check (tags) do not.
func TestRecordFastPathTakenForKPLEncoding(t *testing.T) {
	for _, m := range [][]byte{
		pbRecord(3, "data"),
		pbBytes(pbVarint(pbVarint(nil, 1, 300), 2, 7), 3, []byte("ehk")),
	} {
		if _, _, _, _, ok := parseRecordFast(m); !ok {
			t.Errorf("%x: fast path not taken", m)
		}
	}
	if _, _, _, _, ok := parseRecordFast(pbBytes(pbRecord(1, "x"), 4, pbBytes(nil, 1, []byte("k")))); ok {
		t.Error("a record with a tag took the fast path, which does not check tags")
	}
}
