package kpl

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Deaggregate gives back the user records Aggregate was given, in order,
// their Data aliasing the aggregate with its capacity cut to its length.
func TestDeaggregateGivesBackAggregatedRecords(t *testing.T) {
	users := []UserRecord{
		{PartitionKey: "alpha", Data: []byte("one")},
		{PartitionKey: "beta", ExplicitHashKey: "12345", Data: []byte{0, 1, 2, 0xff}},
		{PartitionKey: "alpha", Data: []byte{}},
		{PartitionKey: "gamma", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte(strings.Repeat("x", 300))},
		{PartitionKey: "beta", ExplicitHashKey: "12345", Data: []byte("five")},
	}
	agg, err := Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Deaggregate(agg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(users, got); diff != "" {
		t.Errorf("Deaggregate (-want +got):\n%s", diff)
	}
	for i, u := range got {
		if len(u.Data) != cap(u.Data) {
			t.Errorf("record %d: cap(Data) = %d, want len %d", i, cap(u.Data), len(u.Data))
		}
	}
	d3 := got[3].Data
	if i := bytes.Index(agg, d3); i < 0 || &agg[i] != &d3[0] {
		t.Errorf("record 3's Data is a copy, want it to alias the aggregate's bytes")
	}
}

// Data without the magic bytes is ErrNotAggregated, not ErrCorrupt.
func TestDecodeNotAggregated(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("hello"), []byte(Magic[:3]), []byte("\xF3\x89\x9A\xC3 and more")} {
		_, err := Deaggregate(data)
		if err != ErrNotAggregated {
			t.Errorf("Deaggregate(%q) = %v, want ErrNotAggregated", data, err)
		}
		if IsAggregated(data) {
			t.Errorf("IsAggregated(%q) = true", data)
		}
	}
	if !IsAggregated([]byte(Magic)) {
		t.Error("IsAggregated(Magic) = false")
	}
}

// Every corrupt input is refused with ErrCorrupt, and the Decoder holds no
// user record after it (not even those of the aggregate before); none
// panics.
func TestDecodeCorruptRefused(t *testing.T) {
	pkTable := pbBytes(nil, fieldPartitionKeyTable, []byte("pk"))
	good := append(bytes.Clone(pkTable), pbBytes(nil, fieldRecords, pbRecord(0, "d"))...)
	with := func(fields ...[]byte) []byte { return bytes.Join(append([][]byte{pkTable}, fields...), nil) }
	cases := []struct {
		name string
		data []byte
	}{
		{"magic only", []byte(Magic)},
		{"shorter than magic and MD5", append([]byte(Magic), make([]byte, 15)...)},
		{"bad MD5", func() []byte { b := frame(good); b[len(b)-1] ^= 1; return b }()},
		{"flipped protobuf byte (MD5 mismatch)", func() []byte { b := frame(good); b[6] ^= 0x40; return b }()},
		{"truncated protobuf", frame(good[:len(good)-1])},
		{"truncated length", frame(with([]byte{0x1a}))},
		{"no records", frame(pkTable)},
		{"empty protobuf", frame(nil)},
		{"partition key index out of range", frame(with(pbBytes(nil, 3, pbRecord(1, "d"))))},
		{"partition key index 2^64-1", frame(with(pbBytes(nil, 3, pbRecord(^uint64(0), "d"))))},
		{"no partition key table", frame(pbBytes(nil, 3, pbRecord(0, "d")))},
		{"explicit hash key index out of range", frame(with(pbBytes(nil, 3, pbVarint(pbRecord(0, "d"), 2, 0))))},
		{"missing partition key index", frame(with(pbBytes(nil, 3, pbBytes(nil, 3, []byte("d")))))},
		{"missing data", frame(with(pbBytes(nil, 3, pbVarint(nil, 1, 0))))},
		{"huge varint index", frame(with(pbBytes(nil, 3,
			append([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, pbBytes(nil, 3, []byte("d"))...))))},
		{"huge length", frame(with([]byte{0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}))},
		{"table with varint wire type", frame(append(pbVarint(nil, 1, 7), pbBytes(nil, 3, pbRecord(0, "d"))...))},
		{"records with varint wire type", frame(with(pbVarint(nil, 3, 1)))},
		{"index with bytes wire type", frame(with(pbBytes(nil, 3, pbBytes(pbBytes(nil, 1, []byte{0}), 3, []byte("d")))))},
		{"data with varint wire type", frame(with(pbBytes(nil, 3, pbVarint(pbVarint(nil, 1, 0), 3, 5))))},
		{"tag without key", frame(with(pbBytes(nil, 3, pbBytes(pbRecord(0, "d"), 4, pbBytes(nil, 2, []byte("v"))))))},
		{"tag key with varint wire type", frame(with(pbBytes(nil, 3, pbBytes(pbRecord(0, "d"), 4, pbVarint(nil, 1, 1)))))},
		{"field number 0", frame(append(bytes.Clone(good), 0x02, 0x00))},
		{"unterminated group", frame(append(bytes.Clone(good), 0x2b))},
		{"second record bad", frame(append(bytes.Clone(good), pbBytes(nil, 3, pbRecord(9, "e"))...))},
	}
	prev, err := Aggregate([]UserRecord{{PartitionKey: "a", Data: []byte("x")}, {PartitionKey: "b", Data: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, err := Deaggregate(c.data); !errors.Is(err, ErrCorrupt) || got != nil {
				t.Fatalf("Deaggregate = %d records, %v; want an error wrapping ErrCorrupt", len(got), err)
			}
			var d Decoder
			if err := d.Decode(prev); err != nil {
				t.Fatal(err)
			}
			if err := d.Decode(c.data); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode = %v, want an error wrapping ErrCorrupt", err)
			}
			if d.Len() != 0 {
				t.Errorf("Len = %d after a refused aggregate, want 0", d.Len())
			}
		})
	}
}

// Unknown fields are skipped, as protobuf does, at every level; the tables
// may come after the records; a tag with a key is accepted.
func TestDecodeAcceptsWhatProtobufAllows(t *testing.T) {
	pkTable := pbBytes(nil, fieldPartitionKeyTable, []byte("pk"))
	rec := pbBytes(nil, fieldRecords, pbRecord(0, "d"))
	want := []UserRecord{{PartitionKey: "pk", Data: []byte("d")}}
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"unknown fields", bytes.Join([][]byte{pbVarint(nil, 9, 1), pkTable, rec, pbBytes(nil, 15, []byte("x"))}, nil)},
		{"unknown field in a record", append(bytes.Clone(pkTable), pbBytes(nil, 3, pbVarint(pbRecord(0, "d"), 7, 1))...)},
		{"table last", append(bytes.Clone(rec), pkTable...)},
		{"tag", append(bytes.Clone(pkTable), pbBytes(nil, 3, pbBytes(pbRecord(0, "d"), 4, pbBytes(pbBytes(nil, 1, []byte("k")), 2, []byte("v"))))...)},
		{"fields in another order", append(bytes.Clone(pkTable), pbBytes(nil, 3, pbVarint(pbBytes(nil, 3, []byte("d")), 1, 0))...)},
	} {
		got, err := Deaggregate(frame(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// A Decoder reused for a smaller aggregate holds only that one's records,
// keys and hash keys.
func TestDecoderReuseHoldsOnlyTheLastAggregate(t *testing.T) {
	big, _ := Aggregate([]UserRecord{
		{PartitionKey: "a", Data: []byte("1")}, {PartitionKey: "b", ExplicitHashKey: "5", Data: []byte("2")}, {PartitionKey: "c", Data: []byte("3")},
	})
	small, _ := Aggregate([]UserRecord{{PartitionKey: "z", Data: []byte("9")}})
	var d Decoder
	if err := d.Decode(big); err != nil {
		t.Fatal(err)
	}
	if k, _ := d.HashKey(1); k != (HashKey{0, 5}) {
		t.Fatalf("HashKey(1) = %s, want 5", k)
	}
	if err := d.Decode(small); err != nil {
		t.Fatal(err)
	}
	if d.Len() != 1 {
		t.Fatalf("Len = %d, want 1", d.Len())
	}
	if u := d.Record(0); u.PartitionKey != "z" || string(u.Data) != "9" || u.ExplicitHashKey != "" {
		t.Errorf("Record(0) = %+v, want z: 9", u)
	}
	if k, ok := d.HashKey(0); !ok || k != PartitionKeyHash("z") {
		t.Errorf("HashKey(0) = %s, %v; want the MD5 of z", k, ok)
	}
}

// Decoder.HashKey is UserRecord.HashKey, except for an explicit hash key
// present but empty, which is not a hash key (Record gives "" for it, the
// same as none).
func TestDecoderHashKey(t *testing.T) {
	users := []UserRecord{
		{PartitionKey: "a", Data: []byte("by MD5")},
		{PartitionKey: "a", ExplicitHashKey: "7", Data: []byte("explicit")},
		{PartitionKey: "b", ExplicitHashKey: "340282366920938463463374607431768211456", Data: []byte("2^128")},
		{PartitionKey: "c", ExplicitHashKey: "x", Data: []byte("not a number")},
	}
	agg, _ := Aggregate(users)
	var d Decoder
	if err := d.Decode(agg); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		k  HashKey
		ok bool
	}{{PartitionKeyHash("a"), true}, {HashKey{0, 7}, true}, {HashKey{}, false}, {HashKey{}, false}}
	for i, u := range users {
		k, ok := d.HashKey(i)
		if k != want[i].k || ok != want[i].ok {
			t.Errorf("HashKey(%d) = %s, %v; want %s, %v", i, k, ok, want[i].k, want[i].ok)
		}
		if k2, ok2 := u.HashKey(); k2 != k || ok2 != ok {
			t.Errorf("UserRecord %d: HashKey() = %s, %v; Decoder says %s, %v", i, k2, ok2, k, ok)
		}
	}

	// An explicit hash key table holding "", used by the record.
	b := pbBytes(pbBytes(nil, 1, []byte("a")), 2, nil)
	b = pbBytes(b, 3, pbBytes(pbVarint(pbVarint(nil, 1, 0), 2, 0), 3, []byte("d")))
	if err := d.Decode(frame(b)); err != nil {
		t.Fatal(err)
	}
	if u := d.Record(0); u.ExplicitHashKey != "" {
		t.Errorf("Record(0).ExplicitHashKey = %q, want empty", u.ExplicitHashKey)
	}
	if k, ok := d.HashKey(0); ok {
		t.Errorf("HashKey(0) = %s, ok for an empty explicit hash key; want not ok", k)
	}
}
