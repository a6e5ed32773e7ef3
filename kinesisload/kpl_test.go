package kinesisload

import (
	"bytes"
	"crypto/md5"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kpl"
)

// aggregate builds a KPL record from user records with the kinesistest
// helper, as a plain Record read from Kinesis.
func aggregate(t testing.TB, seq string, users ...kinesistest.UserRecord) Record {
	t.Helper()
	e, err := kinesistest.Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	return Record{Data: e.Data, PartitionKey: *e.PartitionKey, SequenceNumber: seq, ArrivalTime: time.UnixMilli(1700000000000)}
}

// kplFrame wraps protobuf bytes in the magic bytes and their MD5, so that
// fuzzed bytes reach the protobuf decoder.
func kplFrame(body []byte) []byte {
	b := append([]byte(kpl.Magic), body...)
	sum := md5.Sum(body)
	return append(b, sum[:]...)
}

// allHashKeys is the range of every hash key.
var allHashKeys = hashRange{start: hashKey{}, end: hashKey{Hi: ^uint64(0), Lo: ^uint64(0)}, known: true}

func TestKPLRoundTrip(t *testing.T) {
	users := []kinesistest.UserRecord{
		{PartitionKey: "alpha", Data: []byte("one")},
		{PartitionKey: "beta", ExplicitHashKey: "12345", Data: []byte{0, 1, 2, 0xff}},
		{PartitionKey: "alpha", Data: nil},
		{PartitionKey: "gamma", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte(strings.Repeat("x", 300))},
		{PartitionKey: "beta", ExplicitHashKey: "12345", Data: []byte("five")},
	}
	in := aggregate(t, "49590338271490256608559692538361571095921575989136588898", users...)
	var d kplDecoder
	prefix := []Record{{PartitionKey: "before"}}
	got, err := d.Decode(prefix, in)
	if err != nil {
		t.Fatal(err)
	}
	var want []Record
	want = append(want, prefix...)
	for i, u := range users {
		want = append(want, Record{
			Data: u.Data, PartitionKey: u.PartitionKey, ExplicitHashKey: u.ExplicitHashKey,
			SequenceNumber: in.SequenceNumber, SubSequenceNumber: int64(i), Aggregated: true, ArrivalTime: in.ArrivalTime,
		})
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	// Data aliases the Kinesis record's bytes, capped so an append copies.
	for _, r := range got[1:] {
		if len(r.Data) != cap(r.Data) {
			t.Errorf("record %d: cap(Data) = %d, want len %d", r.SubSequenceNumber, cap(r.Data), len(r.Data))
		}
	}
	d3 := got[4].Data
	if i := strings.Index(string(in.Data), string(d3)); i < 0 || &in.Data[i] != &d3[0] {
		t.Errorf("record 3's Data is a copy, want it to alias the Kinesis record's bytes")
	}
}

// A record without the magic bytes is delivered as read, with no error.
func TestKPLPlainRecord(t *testing.T) {
	var d kplDecoder
	in := Record{Data: []byte("hello"), PartitionKey: "k", SequenceNumber: "1"}
	got, err := d.Decode(nil, in)
	if err != nil || len(got) != 1 || string(got[0].Data) != "hello" || got[0].Aggregated {
		t.Fatalf("Decode(plain) = %+v, %v; want the record as read", got, err)
	}
}

// An aggregate that fails a check is refused with ErrBadAggregate (which
// kpl's tests check for every kind of check), leaving dst as it was; the
// page decoder then delivers it as one plain record and reports it.
func TestKPLCorruptDeliveredWhole(t *testing.T) {
	good := aggregate(t, "7", kinesistest.UserRecord{PartitionKey: "pk", Data: []byte("d")}).Data
	cases := []struct {
		name string
		data []byte
	}{
		{"magic only", []byte(kpl.Magic)},
		{"bad MD5", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }()},
		{"truncated", good[:len(good)-1]},
		{"no records", kplFrame(nil)},
		{"truncated protobuf", kplFrame(good[len(kpl.Magic) : len(good)-md5.Size-1])},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d kplDecoder
			dst := make([]Record, 1, 8)
			dst[0] = Record{PartitionKey: "before"}
			got, err := d.Decode(dst, Record{Data: c.data, SequenceNumber: "7"})
			if !errors.Is(err, ErrBadAggregate) || !errors.Is(err, kpl.ErrCorrupt) {
				t.Fatalf("Decode = %d records, %v; want an error wrapping ErrBadAggregate", len(got), err)
			}
			if len(got) != 1 || got[0].PartitionKey != "before" {
				t.Errorf("Decode changed dst: %+v", got)
			}
			var failed []error
			pd := pageDecoder{dec: &d, failed: func(_ Record, err error) { failed = append(failed, err) }}
			out, _ := pd.decode(kinesisRecords(Record{Data: c.data, SequenceNumber: "7", PartitionKey: "k"}))
			if len(out) != 1 || string(out[0].Data) != string(c.data) || out[0].Aggregated || len(failed) != 1 {
				t.Errorf("page decoder: %d records (aggregated %v), %d failures; want the record as read and 1 failure",
					len(out), len(out) > 0 && out[0].Aggregated, len(failed))
			}
		})
	}
}

// A user record outside the shard's hash key range is delivered like the
// others, and reported once per aggregate with a count.
func TestKPLOutsideHashRangeDelivered(t *testing.T) {
	lo, hi := hashKey{Lo: 1000}, hashKey{Lo: 2000}
	type report struct {
		n     int
		first int64
		key   string
	}
	var reports []report
	d := kplDecoder{keys: hashRange{start: lo, end: hi, known: true}, outside: func(_ Record, n int, first Record, key hashKey, ok bool) {
		k := "?"
		if ok {
			k = key.String()
		}
		reports = append(reports, report{n, first.SubSequenceNumber, k})
	}}
	in := aggregate(t, "1",
		kinesistest.UserRecord{PartitionKey: "a", ExplicitHashKey: "1500", Data: []byte("in")},
		kinesistest.UserRecord{PartitionKey: "b", ExplicitHashKey: "2001", Data: []byte("out1")},
		kinesistest.UserRecord{PartitionKey: "c", ExplicitHashKey: "1000", Data: []byte("edge-low")},
		kinesistest.UserRecord{PartitionKey: "d", ExplicitHashKey: "2000", Data: []byte("edge-high")},
		kinesistest.UserRecord{PartitionKey: "e", Data: []byte("out2-by-md5")},
		kinesistest.UserRecord{PartitionKey: "f", ExplicitHashKey: "not a number", Data: []byte("out3")},
	)
	got, err := d.Decode(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Fatalf("got %d records, want all 6 delivered", len(got))
	}
	want := []report{{3, 1, "2001"}}
	if diff := cmp.Diff(want, reports, cmp.AllowUnexported(report{})); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}
}

// FuzzKPLDecode: the Loader's decoder gives what kpl.Deaggregate gives
// (kpl's own fuzz targets check the format): a record without the magic
// bytes as read; an aggregate's user records with its sequence number and
// arrival time, their index as SubSequenceNumber; for a refused aggregate,
// ErrBadAggregate and dst as it was. No input panics. Each input is
// decoded as is, and with the magic bytes and a matching MD5 around it (so
// that mutations reach the protobuf decoder). Seeds are in testdata/fuzz.
func FuzzKPLDecode(f *testing.F) {
	e, _ := kinesistest.Aggregate([]kinesistest.UserRecord{{PartitionKey: "a", Data: []byte("x")}, {PartitionKey: "b", ExplicitHashKey: "5", Data: []byte("yy")}})
	f.Add(e.Data)
	f.Add(e.Data[len(kpl.Magic) : len(e.Data)-md5.Size])
	f.Fuzz(func(t *testing.T, data []byte) {
		checkKPLDecode(t, data)
		checkKPLDecode(t, kplFrame(data))
	})
}

func checkKPLDecode(t *testing.T, data []byte) {
	var d kplDecoder
	d.keys = hashRange{start: hashKey{}, end: hashKey{Hi: 1 << 63}, known: true}
	d.outside = func(Record, int, Record, hashKey, bool) {}
	in := Record{Data: data, PartitionKey: "k", SequenceNumber: "5", ArrivalTime: time.UnixMilli(1700000000000)}
	dst := []Record{{PartitionKey: "before"}}
	got, err := d.Decode(dst, in)
	users, kerr := kpl.Deaggregate(data)
	switch {
	case errors.Is(kerr, kpl.ErrNotAggregated):
		if err != nil || len(got) != 2 || !cmp.Equal(got[1], in) {
			t.Fatalf("plain record: Decode = %+v, %v; want it as read", got, err)
		}
		return
	case kerr != nil:
		if !errors.Is(err, ErrBadAggregate) || err.Error() != kerr.Error() || len(got) != 1 || got[0].PartitionKey != "before" {
			t.Fatalf("kpl refuses it (%v); Decode = %d records, %v", kerr, len(got), err)
		}
		return
	case err != nil:
		t.Fatalf("kpl decodes it; Decode refuses it: %v", err)
	}
	want := []Record{dst[0]}
	for i, u := range users {
		want = append(want, Record{Data: u.Data, PartitionKey: u.PartitionKey, ExplicitHashKey: u.ExplicitHashKey,
			SequenceNumber: "5", SubSequenceNumber: int64(i), ArrivalTime: in.ArrivalTime, Aggregated: true})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Decode differs from kpl.Deaggregate (-want +got):\n%s", diff)
	}
}

// kinesisRecords turns Records into GetRecords output records.
func kinesisRecords(rs ...Record) []types.Record {
	out := make([]types.Record, len(rs))
	for i, r := range rs {
		at := r.ArrivalTime
		out[i] = types.Record{Data: r.Data, PartitionKey: aws.String(r.PartitionKey), SequenceNumber: aws.String(r.SequenceNumber), ApproximateArrivalTimestamp: &at}
	}
	return out
}
