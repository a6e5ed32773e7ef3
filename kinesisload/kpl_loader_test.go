package kinesisload

import (
	"context"
	"fmt"
	"math/big"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// batchLog is a Sink that keeps every batch (records copied), and a hook
// for decode failures and out-of-range user records.
type batchLog struct {
	mu      sync.Mutex
	batches []Batch
	failed  []DecodeFailed
	outside []HashKeyOutOfRange
	notify  chan struct{}
}

func newBatchLog() *batchLog { return &batchLog{notify: make(chan struct{}, 1)} }

func (s *batchLog) Deliver(_ context.Context, b Batch) error {
	s.mu.Lock()
	b.Records = append([]Record(nil), b.Records...)
	s.batches = append(s.batches, b)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return nil
}

func (s *batchLog) OnDecodeFailed(e DecodeFailed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = append(s.failed, e)
}

func (s *batchLog) OnHashKeyOutOfRange(e HashKeyOutOfRange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outside = append(s.outside, e)
}

// records returns every delivered record, in order.
func (s *batchLog) records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, b := range s.batches {
		out = append(out, b.Records...)
	}
	return out
}

// waitRecords waits until at least n records were delivered.
func (s *batchLog) waitRecords(t *testing.T, n int) []Record {
	t.Helper()
	for range 2000 {
		if rs := s.records(); len(rs) >= n {
			return rs
		}
		select {
		case <-s.notify:
		case <-timeAfter(10):
		}
	}
	t.Fatalf("timed out: %d of %d records delivered", len(s.records()), n)
	return nil
}

// putEntry puts one aggregated entry and returns its sequence number.
func (s *stream) putEntry(e kinesisEntry) string {
	s.t.Helper()
	out, err := s.f.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName: aws.String(s.name), PartitionKey: e.PartitionKey, ExplicitHashKey: e.ExplicitHashKey, Data: e.Data,
	})
	if err != nil {
		s.t.Fatalf("put aggregate: %v", err)
	}
	return aws.ToString(out.SequenceNumber)
}

func mustAggregate(t *testing.T, users []kinesistest.UserRecord) kinesisEntry {
	t.Helper()
	e, err := kinesistest.Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// userRecords makes n user records named prefix-i, with keys k0..k4 and an
// explicit hash key on every third when ehk is set.
func userRecords(prefix string, n int, ehk string) []kinesistest.UserRecord {
	us := make([]kinesistest.UserRecord, n)
	for i := range us {
		us[i] = kinesistest.UserRecord{PartitionKey: "k" + strconv.Itoa(i%5), Data: []byte(fmt.Sprintf("%s-%d", prefix, i))}
		if ehk != "" && i%3 == 0 {
			us[i].ExplicitHashKey = ehk
		}
	}
	return us
}

// The Loader delivers an aggregated record as its user records (keys,
// explicit hash keys, data, sub-sequence numbers, the parent's sequence
// number and arrival time), a plain record as read, and a corrupt
// aggregate as one plain record, counted in the hook.
func TestLoaderDeaggregates(t *testing.T) {
	s := newFakeStream(t, 1)
	ehk := s.startingHashKey("shardId-000000000000")
	users := userRecords("agg", 7, ehk)
	seq1 := s.putEntry(mustAggregate(t, users))
	seq2 := s.put("shardId-000000000000", "plain")
	bad := mustAggregate(t, userRecords("bad", 2, ""))
	bad.Data[len(bad.Data)-1] ^= 1 // break the MD5
	seq3 := s.putEntry(bad)

	log := newBatchLog()
	cfg := Config{Stream: s.name, Sink: log, Dir: t.TempDir(), StartPosition: scan.TrimHorizon()}
	start(t, context.Background(), cfg, WithClient(s.f), WithHooks(log))
	got := log.waitRecords(t, 9)

	var want []Record
	for i, u := range users {
		want = append(want, Record{Data: u.Data, PartitionKey: u.PartitionKey, ExplicitHashKey: u.ExplicitHashKey,
			SequenceNumber: seq1, SubSequenceNumber: int64(i), Aggregated: true})
	}
	want = append(want, Record{Data: []byte("plain"), PartitionKey: "k", SequenceNumber: seq2})
	want = append(want, Record{Data: bad.Data, PartitionKey: aws.ToString(bad.PartitionKey), SequenceNumber: seq3})
	arrival := got[0].ArrivalTime
	if arrival.IsZero() {
		t.Error("user records have no ArrivalTime")
	}
	for i := range got[:len(users)] {
		if !got[i].ArrivalTime.Equal(arrival) {
			t.Errorf("user record %d: ArrivalTime %v, want the aggregate's %v", i, got[i].ArrivalTime, arrival)
		}
	}
	ignoreTime := cmp.Transformer("noTime", func(r Record) Record { r.ArrivalTime = arrival; return r })
	for i := range want {
		want[i].ArrivalTime = arrival
	}
	if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.failed) != 1 || log.failed[0].SequenceNumber != seq3 || log.failed[0].ShardID != "shardId-000000000000" {
		t.Errorf("decode failures = %+v, want one for %s", log.failed, seq3)
	}
	if len(log.outside) != 0 {
		t.Errorf("out-of-range reports = %+v, want none", log.outside)
	}
}

// With Config.Decoder = RawDecoder the aggregate is delivered as read.
func TestLoaderRawDecoder(t *testing.T) {
	s := newFakeStream(t, 1)
	e := mustAggregate(t, userRecords("agg", 3, ""))
	s.putEntry(e)
	log := newBatchLog()
	cfg := Config{Stream: s.name, Sink: log, Dir: t.TempDir(), StartPosition: scan.TrimHorizon(), Decoder: RawDecoder}
	start(t, context.Background(), cfg, WithClient(s.f))
	got := log.waitRecords(t, 1)
	if len(got) != 1 || string(got[0].Data) != string(e.Data) || got[0].Aggregated {
		t.Fatalf("delivered %d records; want the aggregate as read", len(got))
	}
}

// A custom decoder's error and panic deliver the record as read and are
// counted; its records are delivered otherwise.
func TestLoaderCustomDecoder(t *testing.T) {
	s := newFakeStream(t, 1)
	for _, d := range []string{"split:a,b", "fail", "panic", "plain"} {
		s.put("shardId-000000000000", d)
	}
	dec := DecoderFunc(func(dst []Record, r Record) ([]Record, error) {
		switch d := string(r.Data); {
		case d == "fail":
			dst = append(dst, Record{Data: []byte("half-written")}) // dropped by the Loader
			return dst[:len(dst)-1], fmt.Errorf("cannot")
		case d == "panic":
			panic("boom")
		case len(d) > 6 && d[:6] == "split:":
			for i, part := range []string{"a", "b"} {
				u := r
				u.Data, u.SubSequenceNumber = []byte(part), int64(i)
				dst = append(dst, u)
			}
			return dst, nil
		}
		return append(dst, r), nil
	})
	log := newBatchLog()
	cfg := Config{Stream: s.name, Sink: log, Dir: t.TempDir(), StartPosition: scan.TrimHorizon(), Decoder: dec}
	start(t, context.Background(), cfg, WithClient(s.f), WithHooks(log))
	got := log.waitRecords(t, 5)
	var data []string
	for _, r := range got {
		data = append(data, string(r.Data))
	}
	if diff := cmp.Diff([]string{"a", "b", "fail", "panic", "plain"}, data); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.failed) != 2 {
		t.Errorf("decode failures = %+v, want 2 (error and panic)", log.failed)
	}
}

// No limit splits an aggregate: a page is delivered as one batch whatever
// its size (decode.go), so an aggregate of more user records than
// RecordsPerCall allows Kinesis records, read one Kinesis record per call,
// is one batch whose checkpoint is after the whole aggregate; a restart
// resumes after it, never inside it.
func TestAggregateNeverSplit(t *testing.T) {
	s := newFakeStream(t, 1)
	const big = 12000 // more than the largest RecordsPerCall (10,000)
	s.putEntry(mustAggregate(t, userRecords("a", big, "")))
	s.putEntry(mustAggregate(t, userRecords("b", 3, "")))
	log := newBatchLog()
	cfg := Config{Stream: s.name, Sink: log, Dir: t.TempDir(), StartPosition: scan.TrimHorizon(), RecordsPerCall: 1}
	r := start(t, context.Background(), cfg, WithClient(s.f))
	log.waitRecords(t, big+3)
	if err := r.stop(t); err != ErrClosed {
		t.Fatalf("Run = %v", err)
	}
	s.putEntry(mustAggregate(t, userRecords("c", 4, "")))
	r = start(t, context.Background(), cfg, WithClient(s.f))
	log.waitRecords(t, big+3+4)
	if err := r.stop(t); err != ErrClosed {
		t.Fatalf("Run = %v", err)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	wantSizes := []int{big, 3, 4}
	if len(log.batches) != len(wantSizes) {
		t.Fatalf("%d batches, want %d (one per aggregate, none repeated)", len(log.batches), len(wantSizes))
	}
	for i, b := range log.batches {
		if len(b.Records) != wantSizes[i] {
			t.Errorf("batch %d: %d records, want the whole aggregate of %d", i, len(b.Records), wantSizes[i])
		}
		seq := b.Records[0].SequenceNumber
		for j, r := range b.Records {
			if r.SequenceNumber != seq || r.SubSequenceNumber != int64(j) {
				t.Fatalf("batch %d record %d: (%s, %d), want (%s, %d)", i, j, r.SequenceNumber, r.SubSequenceNumber, seq, j)
			}
		}
		if want := scan.AfterSequence(seq); b.Checkpoint != want {
			t.Errorf("batch %d: checkpoint %v, want %v (after the whole aggregate)", i, b.Checkpoint, want)
		}
	}
}

// A user record whose hash key is outside the shard's range (a stale
// producer after a reshard) is delivered, never dropped, and reported.
func TestLoaderOutOfRangeDelivered(t *testing.T) {
	s := newFakeStream(t, 2)
	_, hi0 := s.shardInfo("shardId-000000000000")
	inShard1 := new(big.Int).Add(hi0, big.NewInt(1)).String()
	users := []kinesistest.UserRecord{
		{PartitionKey: "p", ExplicitHashKey: s.startingHashKey("shardId-000000000000"), Data: []byte("mine")},
		{PartitionKey: "p", ExplicitHashKey: inShard1, Data: []byte("foreign-1")},
		{PartitionKey: "p", ExplicitHashKey: inShard1, Data: []byte("foreign-2")},
	}
	seq := s.putEntry(mustAggregate(t, users)) // routed by the first user record: shard 0
	log := newBatchLog()
	cfg := Config{Stream: s.name, Sink: log, Dir: t.TempDir(), StartPosition: scan.TrimHorizon()}
	start(t, context.Background(), cfg, WithClient(s.f), WithHooks(log))
	got := log.waitRecords(t, 3)
	if len(got) != 3 || string(got[1].Data) != "foreign-1" || string(got[2].Data) != "foreign-2" {
		t.Fatalf("delivered %d records, want all 3", len(got))
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	want := []HashKeyOutOfRange{{Stream: s.name, ShardID: "shardId-000000000000", SequenceNumber: seq, Records: 2, SubSequenceNumber: 1,
		HashKey: inShard1, StartingHashKey: "0", EndingHashKey: hi0.String()}}
	if diff := cmp.Diff(want, log.outside); diff != "" {
		t.Errorf("out-of-range reports (-want +got):\n%s", diff)
	}
}

type kinesisEntry = types.PutRecordsRequestEntry

func timeAfter(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }

// The buffer budget (Config.MaxBufferedBytes) counts the user records of
// aggregates while the Sink holds them, not only the Kinesis records read:
// an aggregate of 2,000 tiny user records is about 16 KB on the wire and
// 2,000 Records in memory.
func TestBufferedBytesCountUserRecords(t *testing.T) {
	s := newFakeStream(t, 1)
	const n = 2000
	users := make([]kinesistest.UserRecord, n)
	for i := range users {
		users[i] = kinesistest.UserRecord{PartitionKey: "k" + strconv.Itoa(i%5), Data: []byte{byte(i)}}
	}
	e := mustAggregate(t, users)
	s.putEntry(e)
	var (
		mu    sync.Mutex
		l     *Loader
		inUse int64
	)
	sink := &batchLog{notify: make(chan struct{}, 1)}
	spy := SinkFunc(func(ctx context.Context, b Batch) error {
		mu.Lock()
		if l == nil {
			mu.Unlock()
			return fmt.Errorf("not started yet") // retried
		}
		inUse = max(inUse, l.buffered.inUse())
		mu.Unlock()
		return sink.Deliver(ctx, b)
	})
	cfg := Config{Stream: s.name, Sink: spy, Dir: t.TempDir(), StartPosition: scan.TrimHorizon(), MaxBufferedBytes: 64 << 10}
	r := start(t, context.Background(), cfg, WithClient(s.f))
	mu.Lock()
	l = r.l
	mu.Unlock()
	sink.waitRecords(t, n)
	mu.Lock()
	if want := int64(n-1) * recordOverhead; inUse < want {
		t.Errorf("buffer in use during Deliver = %d bytes, want at least %d for %d user records (the aggregate is %d bytes)", inUse, want, n, len(e.Data))
	}
	mu.Unlock()
	// Once Deliver returned, only the reader's next reservation (at most
	// the whole budget) is held.
	got := l.buffered.inUse()
	for i := 0; i < 500 && got > 64<<10; i++ {
		time.Sleep(10 * time.Millisecond)
		got = l.buffered.inUse()
	}
	if got > 64<<10 {
		t.Errorf("after Deliver, %d bytes still counted: the user records' share was not given back", got)
	}
}
