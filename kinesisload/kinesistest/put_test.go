package kinesistest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

func TestPutRecordRoutesByHashKey(t *testing.T) {
	// MD5("a") = 0cc175b9..., below 2^127: the lower half.
	// MD5("b") = 92eb5ffe..., above 2^127: the upper half.
	tests := []struct {
		name     string
		key      string
		explicit *string
		want     string
	}{
		{"md5 low", "a", nil, shard0},
		{"md5 high", "b", nil, shard1},
		{"explicit zero", "b", aws.String("0"), shard0},
		{"explicit last of lower half", "b", aws.String("170141183460469231731687303715884105727"), shard0},
		{"explicit first of upper half", "a", aws.String("170141183460469231731687303715884105728"), shard1},
		{"explicit max", "a", aws.String("340282366920938463463374607431768211455"), shard1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 2)
			out, err := x.f.PutRecord(context.Background(), &kinesis.PutRecordInput{
				StreamName: aws.String("s"), PartitionKey: aws.String(tc.key), ExplicitHashKey: tc.explicit, Data: []byte("d"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if *out.ShardId != tc.want {
				t.Errorf("shard = %s, want %s", *out.ShardId, tc.want)
			}
		})
	}
}

func TestSequenceNumbersGrowPerShard(t *testing.T) {
	x := newFixture(t, 2)
	ctx := context.Background()
	perShard := map[string][]string{}
	for i := 0; i < 50; i++ {
		key := string(rune('a' + i%26))
		out, err := x.f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String(key), Data: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		if len(*out.SequenceNumber) != 56 || strings.HasPrefix(*out.SequenceNumber, "0") {
			t.Errorf("sequence number %q is not a 56-digit decimal", *out.SequenceNumber)
		}
		perShard[*out.ShardId] = append(perShard[*out.ShardId], *out.SequenceNumber)
	}
	if len(perShard) != 2 {
		t.Fatalf("records went to %d shards, want 2", len(perShard))
	}
	for shard, seqs := range perShard {
		if !increasing(seqs) {
			t.Errorf("shard %s: sequence numbers do not grow: %v", shard, seqs)
		}
		// GetRecords returns the same numbers in the same order.
		var got []string
		for _, r := range x.get(x.iter(shard, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records {
			got = append(got, *r.SequenceNumber)
		}
		if d := cmp.Diff(seqs, got); d != "" {
			t.Errorf("shard %s: read sequence numbers (-want +got):\n%s", shard, d)
		}
	}
}

func TestArrivalTimestampFromClock(t *testing.T) {
	x := newFixture(t, 1)
	x.clock.Set(t0.Add(1234567 * time.Microsecond)) // 1.234567 s
	x.put("0", "a")
	x.clock.Set(t0.Add(time.Second)) // the clock goes back
	x.put("0", "b")
	x.clock.Set(t0.Add(3 * time.Second))
	x.put("0", "c")
	var got []time.Time
	for _, r := range x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records {
		got = append(got, *r.ApproximateArrivalTimestamp)
	}
	want := []time.Time{
		t0.Add(1234 * time.Millisecond), // truncated to the millisecond
		t0.Add(1234 * time.Millisecond), // never earlier than the record before
		t0.Add(3 * time.Second),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("arrival timestamps (-want +got):\n%s", d)
	}
}

func TestPutValidation(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	tests := []struct {
		name string
		in   kinesis.PutRecordInput
		want string
	}{
		{"no partition key", kinesis.PutRecordInput{Data: []byte("x")}, "InvalidArgument"},
		{"empty partition key", kinesis.PutRecordInput{PartitionKey: aws.String(""), Data: []byte("x")}, "InvalidArgument"},
		{"partition key too long", kinesis.PutRecordInput{PartitionKey: aws.String(strings.Repeat("k", 257)), Data: []byte("x")}, "InvalidArgument"},
		{"partition key of 256 characters", kinesis.PutRecordInput{PartitionKey: aws.String(strings.Repeat("é", 256)), Data: []byte("x")}, ""},
		{"record of 1 MiB", kinesis.PutRecordInput{PartitionKey: aws.String("k"), Data: big[:1<<20-1]}, ""},
		{"record over 1 MiB", kinesis.PutRecordInput{PartitionKey: aws.String("k"), Data: big}, "InvalidArgument"},
		{"explicit hash key negative", kinesis.PutRecordInput{PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("-1"), Data: []byte("x")}, "InvalidArgument"},
		{"explicit hash key 2^128", kinesis.PutRecordInput{PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("340282366920938463463374607431768211456"), Data: []byte("x")}, "InvalidArgument"},
		{"explicit hash key with a sign", kinesis.PutRecordInput{PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("+1"), Data: []byte("x")}, "InvalidArgument"},
		{"explicit hash key not a number", kinesis.PutRecordInput{PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("12a"), Data: []byte("x")}, "InvalidArgument"},
		{"empty data", kinesis.PutRecordInput{PartitionKey: aws.String("k")}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := New(WithoutLimits())
			NewStream(t, f, "s", 1)
			in := tc.in
			in.StreamName = aws.String("s")
			_, err := f.PutRecord(context.Background(), &in)
			if got := errorKind(err); got != tc.want {
				t.Errorf("error = %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

func TestPutRecords(t *testing.T) {
	ctx := context.Background()
	entries := func(n int) []types.PutRecordsRequestEntry {
		out := make([]types.PutRecordsRequestEntry, n)
		for i := range out {
			out[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String(string(rune('a' + i%26))), Data: []byte{byte(i)}}
		}
		return out
	}
	t.Run("request limits", func(t *testing.T) {
		tests := []struct {
			name    string
			records []types.PutRecordsRequestEntry
			want    string
		}{
			{"none", nil, "InvalidArgument"},
			{"500", entries(500), ""},
			{"501", entries(501), "InvalidArgument"},
			{"over 5 MiB", func() []types.PutRecordsRequestEntry {
				e := entries(6)
				for i := range e {
					e[i].Data = bytes.Repeat([]byte("x"), 1<<20-10)
				}
				return e
			}(), "InvalidArgument"},
			{"one invalid entry", append(entries(3), types.PutRecordsRequestEntry{Data: []byte("x")}), "InvalidArgument"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				f := New(WithoutLimits())
				NewStream(t, f, "s", 2)
				out, err := f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: tc.records})
				if got := errorKind(err); got != tc.want {
					t.Fatalf("error = %q (%v), want %q", got, err, tc.want)
				}
				if err == nil && (len(out.Records) != len(tc.records) || *out.FailedRecordCount != 0) {
					t.Errorf("PutRecords returned %d results, %d failed; want %d, 0", len(out.Records), *out.FailedRecordCount, len(tc.records))
				}
			})
		}
	})
	t.Run("entries keep order per shard", func(t *testing.T) {
		x := newFixture(t, 2)
		out, err := x.f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: entries(40)})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{}
		for i, r := range out.Records {
			if r.ErrorCode != nil {
				t.Fatalf("entry %d failed: %s", i, *r.ErrorCode)
			}
			want[*r.ShardId] = append(want[*r.ShardId], string([]byte{byte(i)}))
		}
		for shard, w := range want {
			got := data(x.get(x.iter(shard, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records)
			if d := cmp.Diff(w, got); d != "" {
				t.Errorf("shard %s (-want +got):\n%s", shard, d)
			}
		}
	})
}
