package kpl

import (
	"bytes"
	"crypto/md5"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
)

// Aggregate writes what the KPL writes: magic, protobuf, MD5 of the
// protobuf; each key once, in its table, in order of first use; each
// record's fields in field order. aws-kinesis-agg de-aggregates it to the
// same user records (kinesisload's TestKPLInteropAwsKinesisAgg).
func TestAggregateFormat(t *testing.T) {
	got, err := Aggregate([]UserRecord{
		{PartitionKey: "a", ExplicitHashKey: "7", Data: []byte("x")},
		{PartitionKey: "a", Data: []byte("y")},
		{PartitionKey: "b", ExplicitHashKey: "7", Data: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0xF3, 0x89, 0x9A, 0xC2,
		0x0a, 0x01, 'a', // partition_key_table "a"
		0x0a, 0x01, 'b', // partition_key_table "b"
		0x12, 0x01, '7', // explicit_hash_key_table "7"
		0x1a, 0x07, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x01, 'x', // record 0: pk 0, ehk 0, data x
		0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, 'y', // record 1: pk 0, data y
		0x1a, 0x06, 0x08, 0x01, 0x10, 0x00, 0x1a, 0x00, // record 2: pk 1, ehk 0, data empty
	}
	sum := md5.Sum(want[4:])
	want = append(want, sum[:]...)
	if !bytes.Equal(got, want) {
		t.Errorf("Aggregate = % x\nwant        % x", got, want)
	}
}

// Lengths of 128 bytes and more take two-byte varints; the record's
// length, computed before it is written, must agree.
func TestAggregateLongFields(t *testing.T) {
	users := []UserRecord{{PartitionKey: strings.Repeat("k", 200), Data: bytes.Repeat([]byte{7}, 70000)}, {PartitionKey: "k", Data: make([]byte, 127)}}
	agg, err := Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Deaggregate(agg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(users, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// Aggregate refuses no records and an empty partition key.
func TestAggregateRefusesWhatKinesisWouldNotRoute(t *testing.T) {
	if b, err := Aggregate(nil); err == nil {
		t.Errorf("Aggregate(nil) = % x, want an error", b)
	}
	if b, err := Aggregate([]UserRecord{{PartitionKey: "a"}, {Data: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "user record 1") {
		t.Errorf("Aggregate with an empty partition key = % x, %v; want an error naming user record 1", b, err)
	}
}

// AppendAggregate appends to dst and leaves what was there; on error it
// returns dst.
func TestAppendAggregateAppends(t *testing.T) {
	users := []UserRecord{{PartitionKey: "a", Data: []byte("x")}}
	alone, _ := Aggregate(users)
	dst := make([]byte, 3, 100)
	copy(dst, "pre")
	got, err := AppendAggregate(dst, users)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[:3]) != "pre" || !bytes.Equal(got[3:], alone) || &got[0] != &dst[0] {
		t.Errorf("AppendAggregate = %q, want %q after pre, in dst's array", got, alone)
	}
	if got, err := AppendAggregate(dst, nil); err == nil || string(got) != "pre" {
		t.Errorf("AppendAggregate(dst, nil) = %q, %v; want dst and an error", got, err)
	}
}

// userRecordsFromSpec turns fuzz input into user records: each is three
// fields (partition key, explicit hash key, data), each a length byte and
// that many bytes (fewer at the end).
func userRecordsFromSpec(spec []byte) []UserRecord {
	field := func() []byte {
		if len(spec) == 0 {
			return []byte{}
		}
		n := min(int(spec[0]), len(spec)-1)
		f := spec[1 : 1+n]
		spec = spec[1+n:]
		return f
	}
	var out []UserRecord
	for len(spec) > 0 {
		out = append(out, UserRecord{PartitionKey: string(field()), ExplicitHashKey: string(field()), Data: field()})
	}
	return out
}

// FuzzAggregateRoundTrip: what Aggregate writes de-aggregates to exactly
// the user records it was given (and their hash keys), takes the fast
// path, and re-encodes to the same bytes. Seeds are in testdata/fuzz.
func FuzzAggregateRoundTrip(f *testing.F) {
	f.Add([]byte("\x01a\x00\x01x\x01b\x015\x02yy\x01a\x00\x00"))
	f.Fuzz(func(t *testing.T, spec []byte) {
		users := userRecordsFromSpec(spec)
		agg, err := Aggregate(users)
		emptyKey := false
		for _, u := range users {
			emptyKey = emptyKey || u.PartitionKey == ""
		}
		if err != nil {
			if len(users) > 0 && !emptyKey {
				t.Fatalf("Aggregate(%q) = %v", users, err)
			}
			return
		}
		if len(users) == 0 || emptyKey {
			t.Fatalf("Aggregate(%q) succeeded", users)
		}
		var d Decoder
		if err := d.Decode(agg); err != nil {
			t.Fatalf("Decode(Aggregate(%q)) = %v", users, err)
		}
		got := make([]UserRecord, d.Len())
		for i := range got {
			got[i] = d.Record(i)
			k, ok := d.HashKey(i)
			if k2, ok2 := users[i].HashKey(); k != k2 || ok != ok2 {
				t.Fatalf("record %d: HashKey = %s, %v; the user record's is %s, %v", i, k, ok, k2, ok2)
			}
		}
		if diff := cmp.Diff(users, got); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
		again, err := Aggregate(got)
		if err != nil || !bytes.Equal(again, agg) {
			t.Fatalf("re-encoded: % x, %v\nwant        % x", again, err, agg)
		}
		for m := body(agg); len(m) > 0; {
			num, typ, l := protowire.ConsumeTag(m)
			m = m[l:]
			n := protowire.ConsumeFieldValue(num, typ, m)
			if num == fieldRecords {
				v, _ := protowire.ConsumeBytes(m)
				if _, _, _, _, ok := parseRecordFast(v); !ok {
					t.Fatalf("record % x did not take the fast path", v)
				}
			}
			m = m[n:]
		}
	})
}
