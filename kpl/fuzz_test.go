package kpl

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDeaggregate: no input panics; one is refused with ErrNotAggregated
// exactly when it lacks the magic bytes, else with ErrCorrupt, and then the
// Decoder holds no records; a decoded aggregate has records, Deaggregate
// and the Decoder agree, and its hash keys are its user records'. Anything
// that decodes re-encodes (when its partition keys are not empty, which
// Aggregate refuses) to an aggregate that decodes to the same user records
// and re-encodes to itself: the canonical form, which is what Aggregate
// writes (FuzzAggregateRoundTrip). Each input is decoded as is, and with
// the magic bytes and a matching MD5 around it (so that mutations reach
// the protobuf decoder). Seeds are in testdata/fuzz.
func FuzzDeaggregate(f *testing.F) {
	agg, _ := Aggregate([]UserRecord{{PartitionKey: "a", Data: []byte("x")}, {PartitionKey: "b", ExplicitHashKey: "5", Data: []byte("yy")}})
	f.Add(agg)
	f.Add(body(agg))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDeaggregate(t, data)
		checkDeaggregate(t, frame(data))
	})
}

func checkDeaggregate(t *testing.T, data []byte) {
	var d Decoder
	err := d.Decode(data)
	users, err2 := Deaggregate(data)
	if (err == nil) != (err2 == nil) {
		t.Fatalf("Decode: %v; Deaggregate: %v", err, err2)
	}
	if err != nil {
		if errors.Is(err, ErrNotAggregated) == IsAggregated(data) || (IsAggregated(data) && !errors.Is(err, ErrCorrupt)) {
			t.Fatalf("Decode(% x) = %v", data, err)
		}
		if d.Len() != 0 || users != nil {
			t.Fatalf("refused, yet %d records held, %d returned", d.Len(), len(users))
		}
		return
	}
	if d.Len() == 0 || d.Len() != len(users) {
		t.Fatalf("Decode: %d records; Deaggregate: %d", d.Len(), len(users))
	}
	for i, u := range users {
		if diff := cmp.Diff(u, d.Record(i)); diff != "" {
			t.Fatalf("record %d: Deaggregate and Decoder differ (-Deaggregate +Decoder):\n%s", i, diff)
		}
		k, ok := d.HashKey(i)
		k2, ok2 := u.HashKey()
		if r := d.recs[i]; r.hasEHK && d.ehks[r.ehk] == "" {
			k2, ok2 = HashKey{}, false // present but empty: not a hash key
		}
		if k != k2 || ok != ok2 {
			t.Fatalf("record %d: HashKey = %s, %v; the user record's is %s, %v", i, k, ok, k2, ok2)
		}
	}
	for _, u := range users {
		if u.PartitionKey == "" {
			return
		}
	}
	again, err := Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	users2, err := Deaggregate(again)
	if err != nil {
		t.Fatalf("re-encoded aggregate refused: %v", err)
	}
	if diff := cmp.Diff(users, users2); diff != "" {
		t.Fatalf("re-encoded aggregate decodes differently (-first +second):\n%s", diff)
	}
	if third, err := Aggregate(users2); err != nil || !bytes.Equal(third, again) {
		t.Fatalf("the re-encoded aggregate re-encodes to % x, %v\nnot itself             % x", third, err, again)
	}
}
