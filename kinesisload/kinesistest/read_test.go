package kinesistest

import (
	"bytes"
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

func TestShardIteratorTypes(t *testing.T) {
	// Records a, b, c arrive at t0+1s, t0+2s, t0+3s; at t0+4s the test
	// asks for an iterator and puts d.
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	tests := []struct {
		name string
		typ  types.ShardIteratorType
		seq  func(seqs []string) string
		ts   *time.Time
		want []string
	}{
		{"trim horizon", types.ShardIteratorTypeTrimHorizon, nil, nil, []string{"a", "b", "c", "d"}},
		{"latest", types.ShardIteratorTypeLatest, nil, nil, []string{"d"}},
		{"at sequence number", types.ShardIteratorTypeAtSequenceNumber, func(s []string) string { return s[1] }, nil, []string{"b", "c", "d"}},
		{"after sequence number", types.ShardIteratorTypeAfterSequenceNumber, func(s []string) string { return s[1] }, nil, []string{"c", "d"}},
		{"after the last sequence number", types.ShardIteratorTypeAfterSequenceNumber, func(s []string) string { return s[2] }, nil, []string{"d"}},
		{"at timestamp of a record", types.ShardIteratorTypeAtTimestamp, nil, at(2 * time.Second), []string{"b", "c", "d"}},
		{"at timestamp between records", types.ShardIteratorTypeAtTimestamp, nil, at(2500 * time.Millisecond), []string{"c", "d"}},
		{"at timestamp within the millisecond", types.ShardIteratorTypeAtTimestamp, nil, at(2*time.Second + 500*time.Microsecond), []string{"b", "c", "d"}},
		{"at timestamp before all", types.ShardIteratorTypeAtTimestamp, nil, at(-time.Hour), []string{"a", "b", "c", "d"}},
		{"at timestamp after all", types.ShardIteratorTypeAtTimestamp, nil, at(3500 * time.Millisecond), []string{"d"}},
		{"at timestamp now", types.ShardIteratorTypeAtTimestamp, nil, at(4 * time.Second), []string{"d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 1)
			var seqs []string
			for _, d := range []string{"a", "b", "c"} {
				x.clock.Advance(time.Second)
				seqs = append(seqs, x.put("0", d))
			}
			seq := ""
			if tc.seq != nil {
				seq = tc.seq(seqs)
			}
			x.clock.Advance(time.Second)
			it := x.iter(shard0, tc.typ, seq, tc.ts)
			x.put("0", "d")
			got := data(x.get(it, 0).Records)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("records (-want +got):\n%s", d)
			}
		})
	}
}

func TestShardIteratorErrors(t *testing.T) {
	tests := []struct {
		name  string
		shard string
		typ   types.ShardIteratorType
		seq   string
		ts    *time.Time
		want  string
	}{
		{"unknown shard", "shardId-000000000009", types.ShardIteratorTypeLatest, "", nil, "ResourceNotFound"},
		{"malformed shard id", "shard-0", types.ShardIteratorTypeLatest, "", nil, "ResourceNotFound"},
		{"unknown type", shard0, types.ShardIteratorType("NEWEST"), "", nil, "InvalidArgument"},
		{"at sequence without number", shard0, types.ShardIteratorTypeAtSequenceNumber, "", nil, "InvalidArgument"},
		{"after sequence without number", shard0, types.ShardIteratorTypeAfterSequenceNumber, "", nil, "InvalidArgument"},
		{"at timestamp without time", shard0, types.ShardIteratorTypeAtTimestamp, "", nil, "InvalidArgument"},
		{"at timestamp in the future", shard0, types.ShardIteratorTypeAtTimestamp, "", func() *time.Time { v := t0.Add(time.Millisecond); return &v }(), "InvalidArgument"},
		{"sequence number not of Kinesis form", shard0, types.ShardIteratorTypeAtSequenceNumber, "12", nil, "InvalidArgument"},
		{"sequence number of another shard", shard1, types.ShardIteratorTypeAtSequenceNumber, "first", nil, "InvalidArgument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 2)
			seq := tc.seq
			if seq == "first" {
				seq = x.put("0", "a") // lands in shard 0
			}
			_, err := x.iterErr(tc.shard, tc.typ, seq, tc.ts)
			if got := errorKind(err); got != tc.want {
				t.Errorf("error = %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

func TestIteratorExpiresAfter300Seconds(t *testing.T) {
	tests := []struct {
		wait time.Duration
		want string
	}{
		{299 * time.Second, ""},
		{300 * time.Second, ""},
		{300*time.Second + time.Millisecond, "ExpiredIterator"},
		{time.Hour, "ExpiredIterator"},
	}
	for _, tc := range tests {
		t.Run(tc.wait.String(), func(t *testing.T) {
			x := newFixture(t, 1)
			it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
			x.clock.Advance(tc.wait)
			out, err := x.getErr(it, 0)
			if got := errorKind(err); got != tc.want {
				t.Fatalf("error = %q (%v), want %q", got, err, tc.want)
			}
			if err != nil {
				mustContain(t, err, "Iterator expired", "300000 milliseconds")
				return
			}
			// The next iterator is fresh: valid for 300 s from now.
			x.clock.Advance(300 * time.Second)
			if _, err := x.getErr(*out.NextShardIterator, 0); err != nil {
				t.Errorf("next iterator 300 s after its issue: %v", err)
			}
		})
	}
}

func TestInvalidIterators(t *testing.T) {
	x := newFixture(t, 1)
	good := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	raw, err := base64.StdEncoding.DecodeString(good)
	if err != nil {
		t.Fatalf("iterator %q is not base64: %v", good, err)
	}
	tampered := bytes.Clone(raw)
	tampered[10] ^= 1
	other := New(WithClock(x.clock))
	NewStream(t, other, "s", 1)
	foreign, err := other.GetShardIterator(context.Background(), &kinesis.GetShardIteratorInput{StreamName: aws.String("s"), ShardId: aws.String(shard0), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	for name, it := range map[string]string{
		"empty":           "",
		"not base64":      "%%%",
		"truncated":       good[:len(good)-8],
		"tampered":        base64.StdEncoding.EncodeToString(tampered),
		"from other fake": *foreign.ShardIterator,
	} {
		if _, err := x.getErr(it, 0); errorKind(err) != "InvalidArgument" {
			t.Errorf("%s iterator: %v, want InvalidArgument", name, err)
		}
	}
	if _, err := x.f.GetRecords(context.Background(), &kinesis.GetRecordsInput{}); errorKind(err) != "InvalidArgument" {
		t.Errorf("no iterator: %v, want InvalidArgument", err)
	}
}

func TestGetRecordsLimitAndPaging(t *testing.T) {
	x := newFixture(t, 1)
	for i := 0; i < 10; i++ {
		x.put("0", string(rune('a'+i)))
	}
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	var got [][]string
	for i := 0; i < 5; i++ {
		out := x.get(it, 3)
		got = append(got, data(out.Records))
		it = *out.NextShardIterator
	}
	wantPages := [][]string{{"a", "b", "c"}, {"d", "e", "f"}, {"g", "h", "i"}, {"j"}, {}}
	if d := cmp.Diff(wantPages, got); d != "" {
		t.Errorf("pages (-want +got):\n%s", d)
	}
	for _, limit := range []int32{-1, 10001} {
		if _, err := x.f.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String(it), Limit: aws.Int32(limit)}); errorKind(err) != "InvalidArgument" {
			t.Errorf("Limit %d: %v, want InvalidArgument", limit, err)
		}
	}
}

func TestGetRecordsDefaultLimitIs10000(t *testing.T) {
	x := newFixture(t, 1, WithoutLimits())
	entries := make([]types.PutRecordsRequestEntry, 500)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), Data: []byte("x")}
	}
	for i := 0; i < 21; i++ { // 10,500 records
		if _, err := x.f.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: entries}); err != nil {
			t.Fatal(err)
		}
	}
	out := x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0)
	if len(out.Records) != 10000 {
		t.Errorf("first page has %d records, want 10000", len(out.Records))
	}
	if n := len(x.get(*out.NextShardIterator, 0).Records); n != 500 {
		t.Errorf("second page has %d records, want 500", n)
	}
}

func TestGetRecordsAtMost10MiB(t *testing.T) {
	x := newFixture(t, 1, WithoutLimits())
	payload := bytes.Repeat([]byte("x"), 1<<20-2) // with the key "pk": exactly 1 MiB
	for i := 0; i < 12; i++ {
		if _, err := x.f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String("pk"), Data: payload}); err != nil {
			t.Fatal(err)
		}
	}
	out := x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0)
	if len(out.Records) != 10 {
		t.Errorf("first page has %d records of 1 MiB, want 10", len(out.Records))
	}
	if n := len(x.get(*out.NextShardIterator, 0).Records); n != 2 {
		t.Errorf("second page has %d records, want 2", n)
	}
}

func TestMillisBehindLatest(t *testing.T) {
	// Records arrive at t0+1s .. t0+4s; the read happens at t0+10s.
	tests := []struct {
		name  string
		limit int32
		empty bool
		want  int64
	}{
		{"whole shard: at the tip", 0, false, 0},
		{"first two of four: behind by the age of the third", 2, false, 7000},
		{"first three of four", 3, false, 6000},
		{"empty shard", 0, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 1)
			if !tc.empty {
				for _, d := range []string{"a", "b", "c", "d"} {
					x.clock.Advance(time.Second)
					x.put("0", d)
				}
			}
			x.clock.Set(t0.Add(10 * time.Second))
			out := x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), tc.limit)
			if got := *out.MillisBehindLatest; got != tc.want {
				t.Errorf("MillisBehindLatest = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("behind is never 0 while records remain", func(t *testing.T) {
		x := newFixture(t, 1)
		x.put("0", "a")
		x.put("0", "b") // same millisecond, clock still
		out := x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 1)
		if got := *out.MillisBehindLatest; got != 1 {
			t.Errorf("MillisBehindLatest = %d with a record left, want 1", got)
		}
	})
}

func TestOpenShardAtTipReturnsEmptyPageWithIterator(t *testing.T) {
	x := newFixture(t, 1)
	x.put("0", "a")
	out := x.get(x.iter(shard0, types.ShardIteratorTypeLatest, "", nil), 0)
	if len(out.Records) != 0 || out.NextShardIterator == nil || out.ChildShards != nil || *out.MillisBehindLatest != 0 {
		t.Fatalf("page at the tip: %d records, next %v, children %v, behind %d; want empty, an iterator, no children, 0",
			len(out.Records), out.NextShardIterator != nil, out.ChildShards, *out.MillisBehindLatest)
	}
	// Empty pages keep their place: a record put now is read next.
	out = x.get(*out.NextShardIterator, 0)
	x.put("0", "b")
	if d := cmp.Diff([]string{"b"}, data(x.get(*out.NextShardIterator, 0).Records)); d != "" {
		t.Errorf("after empty pages (-want +got):\n%s", d)
	}
}
