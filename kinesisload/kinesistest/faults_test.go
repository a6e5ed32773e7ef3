package kinesistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

var errInjected = errors.New("injected")

func TestFaultFailsNthCall(t *testing.T) {
	tests := []struct {
		name  string
		fault Fault
		calls []string // shard of each GetShardIterator call
		want  []bool   // whether it failed
	}{
		{"third call", Fault{Op: OpGetShardIterator, Nth: 3, Err: errInjected},
			[]string{shard0, shard0, shard0, shard0}, []bool{false, false, true, false}},
		{"every call", Fault{Op: OpGetShardIterator, Err: errInjected},
			[]string{shard0, shard1, shard0}, []bool{true, true, true}},
		{"second call on one shard", Fault{Op: OpGetShardIterator, Shard: shard1, Nth: 2, Err: errInjected},
			[]string{shard1, shard0, shard0, shard1, shard1}, []bool{false, false, false, true, false}},
		{"another stream", Fault{Op: OpGetShardIterator, Stream: "t", Err: errInjected},
			[]string{shard0, shard1}, []bool{false, false}},
		{"this stream", Fault{Op: OpGetShardIterator, Stream: "s", Err: errInjected},
			[]string{shard0, shard1}, []bool{true, true}},
		{"another operation", Fault{Op: OpGetRecords, Err: errInjected},
			[]string{shard0}, []bool{false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t, 2)
			x.f.Inject(tc.fault)
			var got []bool
			for _, shard := range tc.calls {
				_, err := x.iterErr(shard, types.ShardIteratorTypeLatest, "", nil)
				if err != nil && !errors.Is(err, errInjected) {
					t.Fatalf("unexpected error: %v", err)
				}
				got = append(got, err != nil)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("failed calls (-want +got):\n%s", d)
			}
			if n := x.f.Calls(OpGetShardIterator); n != len(tc.calls) {
				t.Errorf("Calls(GetShardIterator) = %d, want %d", n, len(tc.calls))
			}
		})
	}
}

func TestFaultOnGetRecordsOfOneShard(t *testing.T) {
	x := newFixture(t, 2)
	throttle := &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
	x.f.Inject(Fault{Op: OpGetRecords, Shard: shard1, Nth: 1, Err: throttle})
	it0 := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	it1 := x.iter(shard1, types.ShardIteratorTypeTrimHorizon, "", nil)
	if _, err := x.getErr(it0, 0); err != nil {
		t.Errorf("shard 0: %v", err)
	}
	if _, err := x.getErr(it1, 0); errorKind(err) != "ProvisionedThroughputExceeded" {
		t.Errorf("shard 1, first call: %v, want the injected throttle", err)
	}
	if _, err := x.getErr(it1, 0); err != nil {
		t.Errorf("shard 1, second call: %v", err)
	}
	// A failed call never reached the shard.
	if st, _ := x.f.Stats("s", shard1); st.GetRecordsCalls != 1 {
		t.Errorf("shard 1 served %d calls, want 1", st.GetRecordsCalls)
	}
}

func TestFaultRemove(t *testing.T) {
	x := newFixture(t, 1)
	remove := x.f.Inject(Fault{Op: OpPutRecord, Err: errInjected})
	if _, err := x.f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("s"), PartitionKey: aws.String("k"), Data: []byte("x")}); !errors.Is(err, errInjected) {
		t.Fatalf("with the fault: %v", err)
	}
	remove()
	remove() // twice is harmless
	x.put("0", "x")
	x.f.Inject(Fault{Op: OpPutRecord, Err: errInjected})
	x.f.ClearFaults()
	x.put("0", "y")
	if got := data(x.get(x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil), 0).Records); !cmp.Equal([]string{"x", "y"}, got) {
		t.Errorf("records %v, want [x y]: a failed put must write nothing", got)
	}
}

func TestFaultDelay(t *testing.T) {
	x := newFixture(t, 1)
	x.f.Inject(Fault{Op: OpListShards, Nth: 1, Delay: time.Millisecond})
	if got := ids(x.listShards(nil)); !cmp.Equal([]string{shard0}, got) {
		t.Errorf("delayed ListShards: %v", got)
	}
	// A delay ends early when the caller's context does.
	entered := make(chan struct{})
	x.f.Inject(Fault{Op: OpListShards, Nth: 1, Delay: time.Hour, Entered: entered})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := x.f.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("s")})
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during the delay: %v, want context.Canceled", err)
	}
}

func TestFaultBlockUntilRelease(t *testing.T) {
	// The race this replays: a GetRecords call is in flight while a record
	// is written. Released, the call sees the record.
	x := newFixture(t, 1)
	it := x.iter(shard0, types.ShardIteratorTypeLatest, "", nil)
	entered, release := make(chan struct{}), make(chan struct{})
	x.f.Inject(Fault{Op: OpGetRecords, Shard: shard0, Nth: 1, Entered: entered, Block: release})
	type result struct {
		out *kinesis.GetRecordsOutput
		err error
	}
	done := make(chan result)
	go func() {
		out, err := x.getErr(it, 0)
		done <- result{out, err}
	}()
	<-entered
	x.put("0", "written while blocked")
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := cmp.Diff([]string{"written while blocked"}, data(r.out.Records)); d != "" {
		t.Errorf("released call (-want +got):\n%s", d)
	}
}

func TestFaultBlockUntilCancel(t *testing.T) {
	x := newFixture(t, 1)
	entered := make(chan struct{}, 1)
	x.f.Inject(Fault{Op: OpGetShardIterator, Block: make(chan struct{}), Entered: entered})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := x.f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("s"), ShardId: aws.String(shard0), ShardIteratorType: types.ShardIteratorTypeLatest})
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("blocked call after cancel: %v, want context.Canceled", err)
	}
	// An Entered send that nobody receives also gives way to the context.
	x.f.ClearFaults()
	x.f.Inject(Fault{Op: OpGetShardIterator, Entered: make(chan struct{})})
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if _, err := x.f.GetShardIterator(ctx2, &kinesis.GetShardIteratorInput{StreamName: aws.String("s"), ShardId: aws.String(shard0), ShardIteratorType: types.ShardIteratorTypeLatest}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unreceived Entered after the deadline: %v, want context.DeadlineExceeded", err)
	}
}

func TestStats(t *testing.T) {
	x := newFixture(t, 2, WithoutLimits())
	x.put("0", "abc") // 3 bytes + "pk"
	x.put("0", "de")
	x.put(half, "other")
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	out := x.get(it, 1)
	x.get(*out.NextShardIterator, 0)
	got, err := x.f.Stats("s", shard0)
	if err != nil {
		t.Fatal(err)
	}
	want := ShardStats{
		GetRecordsCalls: 2, RecordsRead: 2, BytesRead: 5 + 4,
		GetShardIteratorCalls: 1, RecordsWritten: 2, BytesWritten: 5 + 4,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stats of shard 0 (-want +got):\n%s", d)
	}
	for _, c := range []struct{ stream, shard string }{{"nope", shard0}, {"s", shard4}} {
		if _, err := x.f.Stats(c.stream, c.shard); errorKind(err) != "ResourceNotFound" {
			t.Errorf("Stats(%s, %s): %v, want ResourceNotFound", c.stream, c.shard, err)
		}
	}
}
