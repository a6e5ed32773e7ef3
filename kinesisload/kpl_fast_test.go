package kinesisload

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzKPLRecordFast: whenever the fast path decodes a Record message, the
// general parser decodes it the same way, without error.
func FuzzKPLRecordFast(f *testing.F) {
	f.Add(kplRec(3, "data"))
	f.Add(pbBytes(pbVarint(pbVarint(nil, 1, 300), 2, 7), 3, []byte("with an explicit hash key")))
	f.Add(pbBytes(pbVarint(nil, 1, 0), 3, nil))
	f.Add(pbBytes(kplRec(1, "tagged"), 4, pbBytes(nil, 1, []byte("k"))))    // a tag: general path
	f.Add(pbVarint(pbBytes(nil, 3, []byte("data first")), 1, 2))            // another order
	f.Add(pbBytes(pbVarint(pbVarint(nil, 1, 1), 1, 2), 3, []byte("twice"))) // a repeated index
	f.Add(kplRec(1, "truncated")[:5])
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x1a, 0x00}) // an overlong varint
	f.Fuzz(func(t *testing.T, m []byte) {
		pki, ehki, hasEHK, data, ok := parseKPLRecordFast(m)
		if !ok {
			return
		}
		pki2, ehki2, hasEHK2, data2, err := parseKPLRecord(m)
		if err != nil {
			t.Fatalf("fast path decoded %x, the general parser refuses it: %v", m, err)
		}
		if pki != pki2 || ehki != ehki2 || hasEHK != hasEHK2 || !bytes.Equal(data, data2) || (data == nil) != (data2 == nil) {
			t.Fatalf("%x: fast (%d, %d, %v, %q), general (%d, %d, %v, %q)", m, pki, ehki, hasEHK, data, pki2, ehki2, hasEHK2, data2)
		}
	})
}

// The records the KPL writes take the fast path; the test would pass
// without it, so check that it is taken.
func TestKPLRecordFastPathTaken(t *testing.T) {
	for _, m := range [][]byte{
		kplRec(3, "data"),
		pbBytes(pbVarint(pbVarint(nil, 1, 300), 2, 7), 3, []byte("ehk")),
	} {
		if _, _, _, _, ok := parseKPLRecordFast(m); !ok {
			t.Errorf("%x: fast path not taken", m)
		}
	}
	if _, _, _, _, ok := parseKPLRecordFast(pbBytes(kplRec(1, "x"), 4, pbBytes(nil, protowire.Number(1), []byte("k")))); ok {
		t.Error("a record with a tag took the fast path, which does not check tags")
	}
}
