package kinesisload

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// revListClient rewrites every ListShards answer.
type revListClient struct {
	scan.Client
	list func([]types.Shard) []types.Shard
}

func (c *revListClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	out, err := c.Client.ListShards(ctx, in, opts...)
	if err != nil || out == nil {
		return out, err
	}
	o := *out
	o.Shards = c.list(append([]types.Shard(nil), out.Shards...))
	return &o, nil
}

// A ListShards answer whose shard names itself as its parent (never in
// Kinesis: an odd proxy or emulator) must not leave the shard waiting for
// itself forever while Run goes on: either it is read, or Run stops with an
// error naming the shard.
func TestAShardListedAsItsOwnParentIsAnOddAnswer(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	c := &revListClient{Client: s.f, list: func(sh []types.Shard) []types.Shard {
		for i := range sh {
			sh[i].ParentShardId = sh[i].ShardId
		}
		return sh
	}}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), KinesisMaxAttempts: 3, KinesisBackoff: time.Millisecond},
		WithClient(c), WithStore(memStore(t, journal.NewMemory())))
	select {
	case err := <-r.done:
		r.done <- err
		t.Logf("Run = %v", err)
		if err == nil || !strings.Contains(err.Error(), shard0) {
			t.Fatalf("Run = %v, want an error naming %s", err, shard0)
		}
		return
	case <-rec.notify:
		return
	case <-time.After(3 * time.Second):
	}
	t.Fatalf("after 3s: nothing delivered and Run still running: shard %s waits for itself; states %+v", shard0, rec.events())
}

// Two shards that name each other as parent (a cycle).
func TestShardsListedInACycleAreAnOddAnswer(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "a")
	s.put(shard1, "b")
	c := &revListClient{Client: s.f, list: func(sh []types.Shard) []types.Shard {
		for i := range sh {
			switch aws.ToString(sh[i].ShardId) {
			case shard0:
				sh[i].ParentShardId = aws.String(shard1)
			case shard1:
				sh[i].ParentShardId = aws.String(shard0)
			}
		}
		return sh
	}}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), KinesisMaxAttempts: 3, KinesisBackoff: time.Millisecond},
		WithClient(c), WithStore(memStore(t, journal.NewMemory())))
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil || !strings.Contains(err.Error(), shard0) && !strings.Contains(err.Error(), shard1) {
			t.Fatalf("Run = %v, want an error naming a shard of the cycle", err)
		}
		return
	case <-rec.notify:
		return
	case <-time.After(3 * time.Second):
	}
	t.Fatalf("after 3s: nothing delivered and Run still running: the cycle waits forever")
}

// A ListShards entry with no ShardId.
func TestAListedShardWithoutAnIDIsNamed(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	c := &revListClient{Client: s.f, list: func(sh []types.Shard) []types.Shard {
		extra := sh[0]
		extra.ShardId = nil
		return append(sh, extra)
	}}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), KinesisMaxAttempts: 3, KinesisBackoff: time.Millisecond},
		WithClient(c), WithStore(memStore(t, journal.NewMemory())))
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil || !strings.Contains(err.Error(), "ListShards") || !strings.Contains(err.Error(), "without a ShardId") {
			t.Fatalf("Run = %v, want an error saying ListShards listed a shard without an ID", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("still running; delivered %q", rec.delivered())
	}
}

// A ListShards answer that hands back the NextToken it was given, forever
// (a broken proxy): listShards must not loop, allocating, until ctx ends.
type loopListClient struct {
	scan.Client
	calls int
}

func (c *loopListClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	c.calls++
	out, err := c.Client.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("orders")}, opts...)
	if err != nil {
		return nil, err
	}
	o := *out
	o.NextToken = aws.String("same-token")
	return &o, nil
}

func TestARepeatedListShardsNextTokenEndsTheListing(t *testing.T) {
	s := newFakeStream(t, 1)
	c := &loopListClient{Client: s.f}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	shards, err := listShards(ctx, c, s.name, time.Second)
	if err == nil || ctx.Err() != nil || c.calls > 10 {
		t.Fatalf("listShards = %d shards, %v after %d calls (ctx %v); want an odd-answer error at the repeated NextToken", len(shards), err, c.calls, ctx.Err())
	}
}

// oddSeqClient spoils the sequence number of the last record of the
// first non-empty GetRecords page.
type oddSeqClient struct {
	scan.Client
	seq     *string
	spoiled bool
}

func (c *oddSeqClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.Client.GetRecords(ctx, in, opts...)
	if err != nil || out == nil || len(out.Records) == 0 || c.spoiled {
		return out, err
	}
	c.spoiled = true
	o := *out
	o.Records = append([]types.Record(nil), out.Records...)
	o.Records[len(o.Records)-1].SequenceNumber = c.seq
	return &o, nil
}

// A record whose sequence number is missing or not one must not reach
// the Sink (whose Checkpoint would not be a position) nor stop the Loader
// as a journal failure: it is an odd answer, like the scan treats it.
func TestARecordWithoutASequenceNumberIsNotDelivered(t *testing.T) {
	for _, seq := range []*string{nil, aws.String("not-a-number")} {
		t.Run(aws.ToString(seq), func(t *testing.T) {
			s := newFakeStream(t, 1)
			s.put(shard0, "a")
			s.put(shard0, "b")
			c := &oddSeqClient{Client: s.f, seq: seq}
			rec := newRecorder()
			start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2, KinesisBackoff: time.Millisecond},
				WithClient(c), WithStore(memStore(t, journal.NewMemory())))
			rec.waitFor(t, "a", "b")
			for _, e := range rec.events() {
				if e.kind == "deliver" && (scan.ValidateSequence(e.seq) != nil || e.cp.Validate() != nil) {
					t.Errorf("the Sink got record %q with sequence number %q, checkpoint %+v", e.data, e.seq, e.cp)
				}
			}
		})
	}
}

// With a TransactionalSink the bad checkpoint is stored by the Sink, and
// every later Run refuses to start, even once Kinesis answers well.
func TestARecordWithoutASequenceNumberNeverReachesATransactionalSink(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	s.put(shard0, "b")
	store := memStore(t, journal.NewMemory())
	sink := &txSink{recorder: *newRecorder()}
	c := &oddSeqClient{Client: s.f, seq: aws.String("not-a-number")}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2},
		WithClient(c), WithStore(store))
	select {
	case err := <-r.done:
		r.done <- err
		t.Logf("first Run = %v", err)
	case <-time.After(2 * time.Second):
		_ = r.stop(t)
	}
	// Kinesis answers well now.
	s.put(shard0, "c")
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2},
		WithClient(s.f), WithStore(store))
	select {
	case err := <-r2.done:
		r2.done <- err
		t.Fatalf("second Run, on good answers = %v; the Sink holds checkpoint %v", err, sink.cps)
	case <-time.After(2 * time.Second):
	}
	if got := sink.delivered(); !slicesContains(got, "c") {
		t.Fatalf("delivered %q, want c", got)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// revOrderClient reverses the records of the first page of two or more.
type revOrderClient struct {
	scan.Client
	spoiled bool
}

func (c *revOrderClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.Client.GetRecords(ctx, in, opts...)
	if err != nil || out == nil || len(out.Records) < 2 || c.spoiled {
		return out, err
	}
	c.spoiled = true
	o := *out
	o.Records = append([]types.Record(nil), out.Records...)
	slices.Reverse(o.Records)
	return &o, nil
}

// A page whose records go back in sequence is never delivered out of order.
func TestAPageOutOfOrderIsNotDelivered(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	s.put(shard0, "b")
	c := &revOrderClient{Client: s.f}
	rec := newRecorder()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2, KinesisBackoff: time.Millisecond},
		WithClient(c), WithStore(memStore(t, journal.NewMemory())))
	rec.waitFor(t, "a", "b")
	if got := rec.delivered(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("delivered %q, want a, b", got)
	}
}

// A Stream Kinesis cannot have is refused by New, naming the field: with a
// fleet, Join is the first thing Run does, before Kinesis refuses the name.
func TestNewRefusesAStreamNameKinesisCannotHave(t *testing.T) {
	for _, name := range []string{"orders#gen1", "orders/x", "a b", "ordérs"} {
		_, err := New(Config{Stream: name, Sink: newRecorder(), Dir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "Stream") {
			t.Errorf("New(Stream %q) = %v, want an error naming Stream", name, err)
		}
	}
}
