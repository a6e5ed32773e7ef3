package kinesistest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

func TestGetRecordsCallLimit(t *testing.T) {
	x := newFixture(t, 2) // default limits: 5 calls per second per shard
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	other := x.iter(shard1, types.ShardIteratorTypeTrimHorizon, "", nil)
	var got []string
	for i := 0; i < 6; i++ {
		_, err := x.getErr(it, 0)
		got = append(got, errorKind(err))
	}
	want := []string{"", "", "", "", "", "ProvisionedThroughputExceeded"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("six calls in one instant (-want +got):\n%s", d)
	}
	_, err := x.getErr(it, 0)
	mustContain(t, err, "Rate exceeded for shard "+shard0+" in stream s under account 000000000000")
	if _, err := x.getErr(other, 0); err != nil {
		t.Errorf("another shard is throttled too: %v", err)
	}
	x.clock.Advance(999 * time.Millisecond)
	if _, err := x.getErr(it, 0); errorKind(err) != "ProvisionedThroughputExceeded" {
		t.Errorf("999 ms later: %v, want ProvisionedThroughputExceeded", err)
	}
	x.clock.Advance(time.Millisecond)
	if _, err := x.getErr(it, 0); err != nil {
		t.Errorf("one second later: %v", err)
	}
	st, err := x.f.Stats("s", shard0)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetRecordsCalls != 6 || st.GetRecordsThrottled != 3 {
		t.Errorf("stats: %d calls, %d throttled; want 6, 3", st.GetRecordsCalls, st.GetRecordsThrottled)
	}
}

func TestReadThroughputLimit(t *testing.T) {
	x := newFixture(t, 1, WithLimits(Limits{ReadBytesPerSecond: 2 << 20}))
	payload := bytes.Repeat([]byte("x"), 1<<20-2) // 1 MiB with the key
	for i := 0; i < 3; i++ {
		x.put("0", string(payload))
	}
	out := x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0)
	if len(out.Records) != 3 {
		t.Fatalf("a read over the budget returns %d records, want all 3", len(out.Records))
	}
	// 3 MiB read from a 2 MiB/s budget: the next 0.5 s are refused.
	next := *out.NextShardIterator
	steps := []struct {
		at   time.Duration
		want string
	}{
		{0, "ProvisionedThroughputExceeded"},
		{500 * time.Millisecond, "ProvisionedThroughputExceeded"},
		{501 * time.Millisecond, ""},
	}
	for _, s := range steps {
		x.clock.Set(t0.Add(s.at))
		_, err := x.getErr(next, 0)
		if got := errorKind(err); got != s.want {
			t.Errorf("%v after the read: %q, want %q", s.at, got, s.want)
		}
	}
}

func TestWriteLimits(t *testing.T) {
	ctx := context.Background()
	t.Run("records per second", func(t *testing.T) {
		x := newFixture(t, 2, WithLimits(Limits{WriteRecordsPerSecond: 1000}))
		for i := 0; i < 1000; i++ {
			x.put("0", "r")
		}
		_, err := x.f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("0"), Data: []byte("x")})
		if errorKind(err) != "ProvisionedThroughputExceeded" {
			t.Fatalf("1001st record in a second: %v, want ProvisionedThroughputExceeded", err)
		}
		x.put(half, "other shard") // shard 1 has its own budget
		x.clock.Advance(time.Millisecond)
		x.put("0", "one more, a millisecond later")
		st, _ := x.f.Stats("s", shard0)
		if st.RecordsWritten != 1001 || st.WritesThrottled != 1 {
			t.Errorf("stats: %d written, %d throttled; want 1001, 1", st.RecordsWritten, st.WritesThrottled)
		}
	})
	t.Run("bytes per second", func(t *testing.T) {
		x := newFixture(t, 1, WithLimits(Limits{WriteBytesPerSecond: 1 << 20}))
		x.put("0", string(bytes.Repeat([]byte("x"), 1<<20-2)))
		if _, err := x.f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String("pk"), Data: []byte("x")}); errorKind(err) != "ProvisionedThroughputExceeded" {
			t.Fatalf("a byte more in the same second: %v, want ProvisionedThroughputExceeded", err)
		}
		x.clock.Advance(time.Second)
		x.put("0", "x")
	})
	t.Run("PutRecords fails single entries", func(t *testing.T) {
		x := newFixture(t, 1, WithLimits(Limits{WriteRecordsPerSecond: 1000}))
		entries := make([]types.PutRecordsRequestEntry, 500)
		for i := range entries {
			entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), Data: []byte("x")}
		}
		for i := 0; i < 2; i++ {
			if out, err := x.f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: entries}); err != nil || *out.FailedRecordCount != 0 {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		out, err := x.f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: entries[:3]})
		if err != nil {
			t.Fatal(err)
		}
		if *out.FailedRecordCount != 3 {
			t.Errorf("FailedRecordCount = %d, want 3", *out.FailedRecordCount)
		}
		for i, r := range out.Records {
			if aws.ToString(r.ErrorCode) != "ProvisionedThroughputExceededException" || r.SequenceNumber != nil || r.ErrorMessage == nil {
				t.Errorf("entry %d: %+v, want a ProvisionedThroughputExceededException entry", i, r)
			}
		}
	})
}

func TestWithoutLimits(t *testing.T) {
	x := newFixture(t, 1, WithoutLimits())
	entries := make([]types.PutRecordsRequestEntry, 500)
	for i := range entries {
		entries[i] = types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), Data: bytes.Repeat([]byte("x"), 4000)}
	}
	for i := 0; i < 4; i++ { // 2,000 records, 8 MB, in one instant
		out, err := x.f.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: entries})
		if err != nil || *out.FailedRecordCount != 0 {
			t.Fatalf("batch %d: %v, %v", i, out, err)
		}
	}
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	for i := 0; i < 20; i++ {
		out, err := x.getErr(it, 0)
		if err != nil {
			t.Fatalf("call %d in one instant: %v", i, err)
		}
		it = *out.NextShardIterator
	}
}

func TestGetShardIteratorLimit(t *testing.T) {
	x := newFixture(t, 1, WithLimits(Limits{GetShardIteratorPerSecond: 5}))
	var got []string
	for i := 0; i < 6; i++ {
		_, err := x.iterErr(shard0, types.ShardIteratorTypeLatest, "", nil)
		got = append(got, errorKind(err))
	}
	want := []string{"", "", "", "", "", "ProvisionedThroughputExceeded"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("six calls in one instant (-want +got):\n%s", d)
	}
	x.clock.Advance(time.Second)
	if _, err := x.iterErr(shard0, types.ShardIteratorTypeLatest, "", nil); err != nil {
		t.Errorf("a second later: %v", err)
	}
	st, _ := x.f.Stats("s", shard0)
	if st.GetShardIteratorCalls != 6 || st.GetShardIteratorThrottled != 1 {
		t.Errorf("stats: %d issued, %d throttled; want 6, 1", st.GetShardIteratorCalls, st.GetShardIteratorThrottled)
	}
	// Off by default.
	y := newFixture(t, 1)
	for i := 0; i < 20; i++ {
		if _, err := y.iterErr(shard0, types.ShardIteratorTypeLatest, "", nil); err != nil {
			t.Fatalf("default limits, call %d: %v", i, err)
		}
	}
}
