package kinesisload

import (
	"crypto/md5"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
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

// kplFrame wraps protobuf bytes in the magic bytes and their MD5.
func kplFrame(body []byte) []byte {
	b := append(append([]byte(nil), kplMagic...), body...)
	sum := md5.Sum(body)
	return append(b, sum[:]...)
}

// pbField appends one length-delimited field.
func pbBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func pbVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// kplRec is one Record message: partition key index 0 and data d.
func kplRec(pk uint64, d string) []byte {
	return pbBytes(pbVarint(nil, 1, pk), 3, []byte(d))
}

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

// Every corrupt input is refused with ErrBadAggregate and leaves dst as it
// was; none panics.
func TestKPLCorrupt(t *testing.T) {
	pkTable := pbBytes(nil, 1, []byte("pk"))
	good := append(append([]byte(nil), pkTable...), pbBytes(nil, 3, kplRec(0, "d"))...)
	cases := []struct {
		name string
		data []byte
	}{
		{"magic only", append([]byte(nil), kplMagic...)},
		{"shorter than magic and MD5", append(append([]byte(nil), kplMagic...), make([]byte, 15)...)},
		{"bad MD5", func() []byte { b := kplFrame(good); b[len(b)-1] ^= 1; return b }()},
		{"flipped protobuf byte (MD5 mismatch)", func() []byte { b := kplFrame(good); b[6] ^= 0x40; return b }()},
		{"truncated protobuf", kplFrame(good[:len(good)-1])},
		{"truncated length", kplFrame(append(append([]byte(nil), pkTable...), 0x1a))},
		{"no records", kplFrame(pkTable)},
		{"empty protobuf", kplFrame(nil)},
		{"partition key index out of range", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, kplRec(1, "d")))},
		{"partition key index 2^64-1", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, kplRec(^uint64(0), "d")))},
		{"no partition key table", kplFrame(pbBytes(nil, 3, kplRec(0, "d")))},
		{"explicit hash key index out of range", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, pbVarint(kplRec(0, "d"), 2, 0)))},
		{"missing partition key index", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, pbBytes(nil, 3, []byte("d"))))},
		{"missing data", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, pbVarint(nil, 1, 0)))},
		{"huge varint index", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3,
			append([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, pbBytes(nil, 3, []byte("d"))...)))},
		{"huge length", kplFrame(append(append([]byte(nil), pkTable...), 0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f))},
		{"table with varint wire type", kplFrame(append(pbVarint(nil, 1, 7), pbBytes(nil, 3, kplRec(0, "d"))...))},
		{"records with varint wire type", kplFrame(pbVarint(append([]byte(nil), pkTable...), 3, 1))},
		{"index with bytes wire type", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, pbBytes(pbBytes(nil, 1, []byte{0}), 3, []byte("d"))))},
		{"data with varint wire type", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, pbVarint(pbVarint(nil, 1, 0), 3, 5)))},
		{"tag without key", kplFrame(pbBytes(append([]byte(nil), pkTable...), 3, pbBytes(kplRec(0, "d"), 4, pbBytes(nil, 2, []byte("v")))))},
		{"field number 0", kplFrame(append(append([]byte(nil), good...), 0x02, 0x00))},
		{"unterminated group", kplFrame(append(append([]byte(nil), good...), 0x2b))},
		{"second record bad", kplFrame(append(append([]byte(nil), good...), pbBytes(nil, 3, kplRec(9, "e"))...))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d kplDecoder
			dst := make([]Record, 1, 8)
			dst[0] = Record{PartitionKey: "before"}
			got, err := d.Decode(dst, Record{Data: c.data, SequenceNumber: "7"})
			if !errors.Is(err, ErrBadAggregate) {
				t.Fatalf("Decode = %d records, %v; want an error wrapping ErrBadAggregate", len(got), err)
			}
			if len(got) != 1 || got[0].PartitionKey != "before" {
				t.Errorf("Decode changed dst: %+v", got)
			}
			// Through the page decoder: delivered as one plain record,
			// and counted.
			var failed []error
			pd := pageDecoder{dec: &d, failed: func(_ Record, err error) { failed = append(failed, err) }}
			out, _ := pd.decode(kinesisRecords(Record{Data: c.data, SequenceNumber: "7", PartitionKey: "k"}))
			if len(out) != 1 || string(out[0].Data) != string(c.data) || out[0].Aggregated || len(failed) != 1 {
				t.Errorf("page decoder: %d records (aggregated %v), %d failures; want the record as read and 1 failure",
					len(out), len(out) > 0 && out[0].Aggregated, len(failed))
			}
		})
	}
	// Unknown fields are skipped, as protobuf does: a good aggregate with
	// extra fields still decodes.
	extra := append(pbVarint(nil, 9, 1), good...)
	extra = append(extra, pbBytes(nil, 15, []byte("x"))...)
	var d kplDecoder
	if got, err := d.Decode(nil, Record{Data: kplFrame(extra)}); err != nil || len(got) != 1 || string(got[0].Data) != "d" {
		t.Errorf("aggregate with unknown fields: %+v, %v; want 1 record", got, err)
	}
	// Tables may follow the records.
	late := append(pbBytes(nil, 3, kplRec(0, "d")), pkTable...)
	if got, err := d.Decode(nil, Record{Data: kplFrame(late)}); err != nil || len(got) != 1 || got[0].PartitionKey != "pk" {
		t.Errorf("aggregate with the table last: %+v, %v; want 1 record with key pk", got, err)
	}
}

// A user record outside the shard's hash key range is delivered like the
// others, and reported once per aggregate with a count.
func TestKPLOutsideHashRangeDelivered(t *testing.T) {
	lo, hi := hashKey{0, 1000}, hashKey{0, 2000}
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
	// The MD5 of a partition key is its hash key.
	e := md5.Sum([]byte("e"))
	if k, want := partitionHashKey([]byte("e")), new(big.Int).SetBytes(e[:]); k.String() != want.String() {
		t.Errorf("partitionHashKey(e) = %s, want %s", k, want)
	}
}

func TestParseHashKey(t *testing.T) {
	max := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))
	for _, s := range []string{"0", "1", "18446744073709551615", "18446744073709551616", "170141183460469231731687303715884105728", max.String()} {
		k, ok := parseHashKey(s)
		if !ok || k.String() != s {
			t.Errorf("parseHashKey(%s) = %s, %v", s, k, ok)
		}
	}
	over := new(big.Int).Add(max, big.NewInt(1)).String()
	for _, s := range []string{"", "-1", "1a", over, strings.Repeat("9", 39), strings.Repeat("1", 40)} {
		if k, ok := parseHashKey(s); ok {
			t.Errorf("parseHashKey(%q) = %s, want not ok", s, k)
		}
	}
}

// FuzzKPLDecode: no input panics; a decoded aggregate re-encodes (with the
// kinesistest helper) to one that decodes to the same user records; a
// refused one leaves dst as it was. Each input is decoded as is, and with
// the magic bytes and a matching MD5 around it (so that mutations reach
// the protobuf decoder). Seeds are in testdata/fuzz.
func FuzzKPLDecode(f *testing.F) {
	e, _ := kinesistest.Aggregate([]kinesistest.UserRecord{{PartitionKey: "a", Data: []byte("x")}, {PartitionKey: "b", ExplicitHashKey: "5", Data: []byte("yy")}})
	f.Add(e.Data)
	f.Add(e.Data[len(kplMagic) : len(e.Data)-md5.Size])
	f.Fuzz(func(t *testing.T, data []byte) {
		checkKPLDecode(t, data)
		checkKPLDecode(t, kplFrame(data))
	})
}

func checkKPLDecode(t *testing.T, data []byte) {
	var d kplDecoder
	d.keys = hashRange{start: hashKey{0, 0}, end: hashKey{1 << 63, 0}, known: true}
	d.outside = func(Record, int, Record, hashKey, bool) {}
	dst := []Record{{PartitionKey: "before"}}
	got, err := d.Decode(dst, Record{Data: data, SequenceNumber: "5"})
	if err != nil {
		if !errors.Is(err, ErrBadAggregate) || len(got) != 1 {
			t.Fatalf("Decode failed with %v and %d records", err, len(got))
		}
		return
	}
	got = got[1:]
	if len(got) == 0 {
		t.Fatal("Decode succeeded with no records")
	}
	if !got[0].Aggregated {
		if len(got) != 1 || string(got[0].Data) != string(data) {
			t.Fatalf("plain record changed")
		}
		return
	}
	var users []kinesistest.UserRecord
	for i, r := range got {
		if r.SubSequenceNumber != int64(i) || r.SequenceNumber != "5" {
			t.Fatalf("record %d: sub %d seq %s", i, r.SubSequenceNumber, r.SequenceNumber)
		}
		users = append(users, kinesistest.UserRecord{PartitionKey: r.PartitionKey, ExplicitHashKey: r.ExplicitHashKey, Data: r.Data})
	}
	if got[0].PartitionKey == "" {
		return // the helper refuses empty keys; the format allows them
	}
	for _, u := range users {
		if u.PartitionKey == "" {
			return
		}
	}
	again, err := kinesistest.Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	var d2 kplDecoder
	got2, err := d2.Decode(nil, Record{Data: again.Data, SequenceNumber: "5"})
	if err != nil {
		t.Fatalf("re-encoded aggregate refused: %v", err)
	}
	if diff := cmp.Diff(got, got2, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })); diff != "" {
		t.Fatalf("re-encoded aggregate decodes differently (-first +second):\n%s", diff)
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
