package kinesistest_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// The conformance suite runs the same cases against the in-memory fake and
// against two emulators written by other people against the real service
// (see /work/shared/EMULATORS.md), so that where the fake departs from them,
// a test says so. Every target runs every case; a check is skipped only for
// a documented quirk of one emulator, and the skip names it.

// quirk is a documented way in which an emulator departs from Kinesis.
type quirk int

const (
	// quirkMillisBehindZero: MillisBehindLatest is 0 on an open shard even
	// in the middle of its history.
	quirkMillisBehindZero quirk = iota + 1
	// quirkNoChildShards: GetRecords at the end of a closed shard lists no
	// ChildShards.
	quirkNoChildShards
	// quirkListShardsPaging: ListShards ignores MaxResults and NextToken.
	quirkListShardsPaging
	// quirkShardFilter: ListShards ignores ShardFilter.
	quirkShardFilter
	// quirkEndingSequenceMax: a closed shard's EndingSequenceNumber is
	// always 9223372036854775807, not a sequence number of the shard.
	quirkEndingSequenceMax
	// quirkInvalidIteratorUntyped: a malformed iterator gives HTTP 500 with
	// an empty body, not InvalidArgumentException.
	quirkInvalidIteratorUntyped
	// quirkAtTrimHorizonAll: ListShards with ShardFilter AT_TRIM_HORIZON
	// returns every retained shard, as FROM_TRIM_HORIZON does, not only the
	// shards open at the trim horizon. Found by this suite; not (yet) in
	// EMULATORS.md.
	quirkAtTrimHorizonAll
	// quirkAtTimestampPastTipHangs: GetShardIterator AT_TIMESTAMP never
	// answers when no record arrived at or after the timestamp (an empty
	// shard, or a time after the last record). Found by this suite; not
	// (yet) in EMULATORS.md.
	quirkAtTimestampPastTipHangs
	// quirkSequenceNumberUnchecked: GetShardIterator answers a
	// StartingSequenceNumber that is not one of the shard's with
	// ResourceNotFoundException (and accepts a parent's number on a child
	// shard), not InvalidArgumentException. Found by this suite; not (yet)
	// in EMULATORS.md.
	quirkSequenceNumberUnchecked
	// quirkForeignSequenceAccepted: GetShardIterator accepts, on a stream
	// deleted and created again under the same name, a sequence number of
	// the deleted stream. Found by this suite; not (yet) in EMULATORS.md.
	quirkForeignSequenceAccepted
	// quirkCreationSeconds: StreamCreationTimestamp has whole seconds, so
	// a stream deleted and created again within one second looks the same.
	// Found by this suite; not (yet) in EMULATORS.md.
	quirkCreationSeconds
	// quirkNoFanOut: no enhanced fan-out (RegisterStreamConsumer,
	// SubscribeToShard).
	quirkNoFanOut
)

// target is one implementation of kinesistest.API under test.
type target struct {
	name   string
	quirks map[quirk]string // the reason, as EMULATORS.md records it
	open   func(t *testing.T) kinesistest.API
}

var targets = []target{
	{
		name: "fake",
		open: func(*testing.T) kinesistest.API {
			return kinesistest.New(kinesistest.WithoutLimits())
		},
	},
	{
		name: "kinesis-local",
		quirks: map[quirk]string{
			quirkEndingSequenceMax:      "kinesis-local 0.6.2 reports EndingSequenceNumber 9223372036854775807 for every closed shard",
			quirkInvalidIteratorUntyped: "kinesis-local 0.6.2 answers a non-base64 iterator with HTTP 500 and an empty body (SDK UnknownError)",
			quirkSequenceNumberUnchecked: "kinesis-local 0.6.2 answers a StartingSequenceNumber that is not one of the shard's " +
				"with ResourceNotFoundException (\"Unable to find record with provided SequenceNumber\"), not InvalidArgumentException",
			quirkAtTrimHorizonAll: "kinesis-local 0.6.2 answers ShardFilter AT_TRIM_HORIZON with every retained shard, like FROM_TRIM_HORIZON, where Kinesis documents only the shards open at the trim horizon",
			quirkForeignSequenceAccepted: "kinesis-local 0.6.2 accepts, on a stream deleted and created again under the same name, " +
				"a StartingSequenceNumber of the deleted stream, where Kinesis refuses it (InvalidArgumentException: it did not come from this stream)",
		},
		open: func(t *testing.T) kinesistest.API {
			return emulator.Start(t, emulator.KinesisLocal).Client
		},
	},
	{
		name: "kinesalite",
		quirks: map[quirk]string{
			quirkMillisBehindZero: "kinesalite 3.3.3 reports MillisBehindLatest 0 on an open shard, even mid-history",
			quirkNoChildShards:    "kinesalite 3.3.3 never returns ChildShards in GetRecords",
			quirkListShardsPaging: "kinesalite 3.3.3 ignores ListShards MaxResults and NextToken",
			quirkShardFilter:      "kinesalite 3.3.3 ignores ListShards ShardFilter",
			quirkCreationSeconds:  "kinesalite 3.3.3 reports StreamCreationTimestamp in whole seconds",
			quirkNoFanOut:         "kinesalite 3.3.3 has no enhanced fan-out",
			quirkAtTimestampPastTipHangs: "kinesalite 3.3.3 never answers GetShardIterator AT_TIMESTAMP when no record arrived at or after the timestamp " +
				"(the request hangs until the client gives up)",
		},
		open: func(t *testing.T) kinesistest.API {
			return emulator.Start(t, emulator.Kinesalite).Client
		},
	},
}

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"CreateStreamBecomesActive", testCreateStream},
	{"ReadBackInOrderFromTrimHorizon", testReadInOrder},
	{"SequenceNumbersIncreasePerShard", testSequencePerShard},
	{"IteratorTypes", testIteratorTypes},
	{"GetRecordsLimit", testGetRecordsLimit},
	{"MillisBehindLatest", testMillisBehindLatest},
	{"EmptyPageAtOpenTip", testEmptyPageAtTip},
	{"SplitShard", testSplitShard},
	{"MergeShards", testMergeShards},
	{"ListShardsPaging", testListShardsPaging},
	{"ShardFilter", testShardFilter},
	{"UnknownStream", testUnknownStream},
	{"InvalidIterator", testInvalidIterator},
	{"InvalidStartingSequenceNumber", testInvalidStartingSequence},
	{"RecreatedStream", testRecreatedStream},
	{"FanOutReadsInOrder", testFanOutReadsInOrder},
}

// TestConformance starts each target once and runs every case against it,
// the cases of one target in parallel, each on streams of its own.
func TestConformance(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			api := tg.open(t) // stopped by t.Cleanup after every case below
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, &env{api: api, target: tg})
				})
			}
		})
	}
}

// env is what a case gets: the implementation and its quirks.
type env struct {
	api    kinesistest.API
	target target
}

// skipFor skips t when the target has quirk q, naming it and why.
func (e *env) skipFor(t *testing.T, q quirk) {
	t.Helper()
	if reason, ok := e.target.quirks[q]; ok {
		t.Skipf("quirk of %s: %s", e.target.name, reason)
	}
}

func (e *env) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var (
	streamSeq    atomic.Int64
	invalidChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)
)

// createStream creates a stream named after the test and waits until it is
// ACTIVE.
func (e *env) createStream(t *testing.T, ctx context.Context, shards int32) string {
	t.Helper()
	name := invalidChars.ReplaceAllString(t.Name(), "-")
	name = fmt.Sprintf("%d-%s", streamSeq.Add(1), name)
	if len(name) > 128 {
		name = name[:128]
	}
	if _, err := e.api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatalf("CreateStream(%s, %d shards): %v", name, shards, err)
	}
	e.waitActive(t, ctx, name)
	return name
}

func (e *env) waitActive(t *testing.T, ctx context.Context, stream string) {
	t.Helper()
	if err := emulator.WaitStreamActive(ctx, e.api, stream); err != nil {
		t.Fatal(err)
	}
}

// listShards returns every shard of the stream, following NextToken.
func (e *env) listShards(t *testing.T, ctx context.Context, stream string) []types.Shard {
	t.Helper()
	var all []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for range 100 {
		out, err := e.api.ListShards(ctx, in)
		if err != nil {
			t.Fatalf("ListShards(%s): %v", stream, err)
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil {
			return all
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	t.Fatalf("ListShards(%s): still a NextToken after 100 pages", stream)
	return nil
}

// put writes one record; a nil hashKey routes by the partition key "pk".
func (e *env) put(t *testing.T, ctx context.Context, stream, data string, hashKey *big.Int) *kinesis.PutRecordOutput {
	t.Helper()
	in := &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("pk"), Data: []byte(data)}
	if hashKey != nil {
		in.ExplicitHashKey = aws.String(hashKey.String())
	}
	out, err := e.api.PutRecord(ctx, in)
	if err != nil {
		t.Fatalf("PutRecord(%s, %q): %v", stream, data, err)
	}
	return out
}

// putMany writes the records with PutRecords, in order, by partition key "pk".
func (e *env) putMany(t *testing.T, ctx context.Context, stream string, data ...string) []types.PutRecordsResultEntry {
	t.Helper()
	in := &kinesis.PutRecordsInput{StreamName: aws.String(stream)}
	for _, d := range data {
		in.Records = append(in.Records, types.PutRecordsRequestEntry{Data: []byte(d), PartitionKey: aws.String("pk")})
	}
	out, err := e.api.PutRecords(ctx, in)
	if err != nil {
		t.Fatalf("PutRecords(%s, %d records): %v", stream, len(data), err)
	}
	if n := aws.ToInt32(out.FailedRecordCount); n != 0 || len(out.Records) != len(data) {
		t.Fatalf("PutRecords(%s): %d failed, %d results for %d records", stream, n, len(out.Records), len(data))
	}
	return out.Records
}

func (e *env) iterator(t *testing.T, ctx context.Context, in *kinesis.GetShardIteratorInput) string {
	t.Helper()
	out, err := e.api.GetShardIterator(ctx, in)
	if err != nil {
		t.Fatalf("GetShardIterator(%s, %s, %s): %v", aws.ToString(in.StreamName), aws.ToString(in.ShardId), in.ShardIteratorType, err)
	}
	if out.ShardIterator == nil {
		t.Fatalf("GetShardIterator(%s, %s, %s): nil iterator", aws.ToString(in.StreamName), aws.ToString(in.ShardId), in.ShardIteratorType)
	}
	return *out.ShardIterator
}

func (e *env) iter(t *testing.T, ctx context.Context, stream, shard string, typ types.ShardIteratorType) string {
	t.Helper()
	return e.iterator(t, ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard), ShardIteratorType: typ})
}

func (e *env) getRecords(t *testing.T, ctx context.Context, it string, limit int32) *kinesis.GetRecordsOutput {
	t.Helper()
	in := &kinesis.GetRecordsInput{ShardIterator: aws.String(it)}
	if limit > 0 {
		in.Limit = aws.Int32(limit)
	}
	out, err := e.api.GetRecords(ctx, in)
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	return out
}

// readOpen reads an open shard from it until want records have come (or a
// bound on calls is reached, which fails the test) and returns them, every
// page, and the iterator to go on with.
func (e *env) readOpen(t *testing.T, ctx context.Context, it string, want int, limit int32) ([]types.Record, []*kinesis.GetRecordsOutput, string) {
	t.Helper()
	var recs []types.Record
	var pages []*kinesis.GetRecordsOutput
	for calls := 0; len(recs) < want; calls++ {
		if calls == want+20 {
			t.Fatalf("read %d of %d records in %d GetRecords calls", len(recs), want, calls)
		}
		out := e.getRecords(t, ctx, it, limit)
		pages = append(pages, out)
		recs = append(recs, out.Records...)
		if out.NextShardIterator == nil {
			t.Fatalf("open shard: nil NextShardIterator after %d of %d records", len(recs), want)
		}
		it = *out.NextShardIterator
	}
	return recs, pages, it
}

// readClosed reads a closed shard from it until NextShardIterator is nil
// (following empty pages, within a bound) and returns the records and the
// last page.
func (e *env) readClosed(t *testing.T, ctx context.Context, it string) ([]types.Record, *kinesis.GetRecordsOutput) {
	t.Helper()
	var recs []types.Record
	for range 50 {
		out := e.getRecords(t, ctx, it, 0)
		recs = append(recs, out.Records...)
		if out.NextShardIterator == nil {
			return recs, out
		}
		it = *out.NextShardIterator
	}
	t.Fatalf("closed shard: NextShardIterator still set after 50 GetRecords calls (%d records)", len(recs))
	return nil, nil
}

func data(recs []types.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func seqs(recs []types.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = aws.ToString(r.SequenceNumber)
	}
	return out
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// seqNum parses a sequence number, failing the test on anything but digits.
func seqNum(t *testing.T, s string) *big.Int {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() < 0 {
		t.Fatalf("sequence number %q is not a decimal number", s)
	}
	return n
}

// checkIncreasing fails unless every sequence number is above the one before.
func checkIncreasing(t *testing.T, what string, ss []string) {
	t.Helper()
	for i := 1; i < len(ss); i++ {
		if seqNum(t, ss[i]).Cmp(seqNum(t, ss[i-1])) <= 0 {
			t.Errorf("%s: sequence number %d (%s) is not above the one before (%s)", what, i, ss[i], ss[i-1])
		}
	}
}

var (
	maxHashKey = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)) // 2^128-1
	midHashKey = new(big.Int).Lsh(big.NewInt(1), 127)                                  // 2^127
)

// shardView is the part of a types.Shard the cases compare.
type shardView struct {
	ID, Parent, Adjacent string
	Start, End           string // hash key range
	Closed               bool   // EndingSequenceNumber set
}

func view(s types.Shard) shardView {
	v := shardView{
		ID:       aws.ToString(s.ShardId),
		Parent:   aws.ToString(s.ParentShardId),
		Adjacent: aws.ToString(s.AdjacentParentShardId),
	}
	if s.HashKeyRange != nil {
		v.Start, v.End = aws.ToString(s.HashKeyRange.StartingHashKey), aws.ToString(s.HashKeyRange.EndingHashKey)
	}
	if s.SequenceNumberRange != nil {
		v.Closed = s.SequenceNumberRange.EndingSequenceNumber != nil
	}
	return v
}

func views(shards []types.Shard) []shardView {
	out := make([]shardView, len(shards))
	for i, s := range shards {
		out[i] = view(s)
	}
	slices.SortFunc(out, func(a, b shardView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func ids(shards []types.Shard) []string {
	out := make([]string, len(shards))
	for i, s := range shards {
		out[i] = aws.ToString(s.ShardId)
	}
	slices.Sort(out)
	return out
}

// testCreateStream: a new stream becomes ACTIVE with the shards asked for,
// open, splitting the hash key space evenly and without gaps; the name
// cannot be taken twice.
func testCreateStream(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 3)

	sum, err := e.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("DescribeStreamSummary: %v", err)
	}
	d := sum.StreamDescriptionSummary
	if d == nil {
		t.Fatal("DescribeStreamSummary: no StreamDescriptionSummary")
	}
	if got := [3]string{aws.ToString(d.StreamName), string(d.StreamStatus), fmt.Sprint(aws.ToInt32(d.OpenShardCount))}; got != [3]string{stream, "ACTIVE", "3"} {
		t.Errorf("DescribeStreamSummary (name, status, open shards) = %v, want [%s ACTIVE 3]", got, stream)
	}

	shards := e.listShards(t, ctx, stream)
	if len(shards) != 3 {
		t.Fatalf("ListShards: %d shards, want 3", len(shards))
	}
	vs := make([]shardView, len(shards))
	for i, s := range shards {
		vs[i] = view(s)
		if vs[i].Closed || vs[i].Parent != "" || vs[i].Adjacent != "" {
			t.Errorf("new shard %+v: want open and without parents", vs[i])
		}
		if s.SequenceNumberRange == nil || s.SequenceNumberRange.StartingSequenceNumber == nil {
			t.Errorf("new shard %s: no StartingSequenceNumber", vs[i].ID)
		}
	}
	slices.SortFunc(vs, func(a, b shardView) int { return seqNumCmp(t, a.Start, b.Start) })
	next := big.NewInt(0)
	third := new(big.Int).Div(new(big.Int).Add(maxHashKey, big.NewInt(1)), big.NewInt(3))
	for i, v := range vs {
		start, end := seqNum(t, v.Start), seqNum(t, v.End)
		if start.Cmp(next) != 0 {
			t.Errorf("shard %s starts at hash key %s, want %s (no gap, no overlap)", v.ID, start, next)
		}
		if i < 2 {
			// An even split: each of the first shards spans floor(2^128/3) keys.
			if span := new(big.Int).Sub(end, start); span.Cmp(new(big.Int).Sub(third, big.NewInt(1))) != 0 {
				t.Errorf("shard %s spans %s..%s, want %s keys", v.ID, start, end, third)
			}
		}
		next = new(big.Int).Add(end, big.NewInt(1))
	}
	if last := vs[len(vs)-1].End; last != maxHashKey.String() {
		t.Errorf("last shard ends at hash key %s, want %s", last, maxHashKey)
	}

	_, err = e.api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)})
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Errorf("CreateStream of an existing name = %v, want *types.ResourceInUseException", err)
	}
}

func seqNumCmp(t *testing.T, a, b string) int { return seqNum(t, a).Cmp(seqNum(t, b)) }

// testReadInOrder: records written with PutRecord and PutRecords read back
// from TRIM_HORIZON in the order written, with their keys, and with the
// sequence numbers the puts returned.
func testReadInOrder(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	var wantSeqs []string
	wantSeqs = append(wantSeqs, aws.ToString(e.put(t, ctx, stream, "r0", nil).SequenceNumber))
	for _, r := range e.putMany(t, ctx, stream, names("r", 12)[1:11]...) {
		wantSeqs = append(wantSeqs, aws.ToString(r.SequenceNumber))
	}
	wantSeqs = append(wantSeqs, aws.ToString(e.put(t, ctx, stream, "r11", nil).SequenceNumber))

	shard := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	recs, _, _ := e.readOpen(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 12, 0)
	if diff := cmp.Diff(names("r", 12), data(recs)); diff != "" {
		t.Errorf("records from TRIM_HORIZON (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSeqs, seqs(recs)); diff != "" {
		t.Errorf("sequence numbers read vs. returned by the puts (-want +got):\n%s", diff)
	}
	for _, r := range recs {
		if aws.ToString(r.PartitionKey) != "pk" || r.ApproximateArrivalTimestamp == nil {
			t.Errorf("record %q: PartitionKey %q, ApproximateArrivalTimestamp %v; want pk and a time", r.Data, aws.ToString(r.PartitionKey), r.ApproximateArrivalTimestamp)
		}
	}
}

// testSequencePerShard: records routed by explicit hash key land on the
// shard that owns the key, and each shard's sequence numbers increase in
// the order of the puts.
func testSequencePerShard(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 2)
	shards := e.listShards(t, ctx, stream)
	owner := func(k *big.Int) string {
		for _, s := range shards {
			if seqNum(t, *s.HashKeyRange.StartingHashKey).Cmp(k) <= 0 && k.Cmp(seqNum(t, *s.HashKeyRange.EndingHashKey)) <= 0 {
				return *s.ShardId
			}
		}
		t.Fatalf("no shard owns hash key %s", k)
		return ""
	}
	keys := []*big.Int{big.NewInt(0), maxHashKey, new(big.Int).Sub(midHashKey, big.NewInt(1)), midHashKey}
	putSeqs := map[string][]string{}
	wantData := map[string][]string{}
	for i := range 12 {
		k := keys[i%len(keys)]
		d := fmt.Sprintf("r%d", i)
		out := e.put(t, ctx, stream, d, k)
		if got, want := aws.ToString(out.ShardId), owner(k); got != want {
			t.Errorf("PutRecord with hash key %s went to %s, want %s", k, got, want)
		}
		putSeqs[*out.ShardId] = append(putSeqs[*out.ShardId], *out.SequenceNumber)
		wantData[owner(k)] = append(wantData[owner(k)], d)
	}
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		checkIncreasing(t, "PutRecord on "+id, putSeqs[id])
		recs, _, _ := e.readOpen(t, ctx, e.iter(t, ctx, stream, id, types.ShardIteratorTypeTrimHorizon), len(wantData[id]), 0)
		if diff := cmp.Diff(wantData[id], data(recs)); diff != "" {
			t.Errorf("records of %s (-want +got):\n%s", id, diff)
		}
		checkIncreasing(t, "GetRecords on "+id, seqs(recs))
	}
}

// testIteratorTypes: each of the five iterator types starts where Kinesis
// says it does.
func testIteratorTypes(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	shard := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	for i := range 6 {
		e.put(t, ctx, stream, fmt.Sprintf("r%d", i), nil)
		time.Sleep(5 * time.Millisecond) // distinct arrival times make AT_TIMESTAMP telling; nothing depends on the exact gap
	}
	all, _, _ := e.readOpen(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 6, 0)
	if diff := cmp.Diff(names("r", 6), data(all)); diff != "" {
		t.Fatalf("TRIM_HORIZON (-want +got):\n%s", diff)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ApproximateArrivalTimestamp.Before(*all[i-1].ApproximateArrivalTimestamp) {
			t.Errorf("ApproximateArrivalTimestamp of r%d (%v) is before r%d's (%v)", i, all[i].ApproximateArrivalTimestamp, i-1, all[i-1].ApproximateArrivalTimestamp)
		}
	}
	seq2 := all[2].SequenceNumber
	ts3 := *all[3].ApproximateArrivalTimestamp
	// AT_TIMESTAMP starts at the first record that arrived at or after the
	// time; records sharing r3's millisecond come too.
	firstAt3 := slices.IndexFunc(all, func(r types.Record) bool { return !r.ApproximateArrivalTimestamp.Before(ts3) })

	read := func(t *testing.T, in *kinesis.GetShardIteratorInput, want []string) {
		t.Helper()
		in.StreamName, in.ShardId = aws.String(stream), aws.String(shard)
		recs, pages, it := e.readOpen(t, ctx, e.iterator(t, ctx, in), len(want), 0)
		if diff := cmp.Diff(want, data(recs), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", in.ShardIteratorType, diff)
		}
		if len(pages) == 0 { // nothing was due: one read to prove the page is empty
			if out := e.getRecords(t, ctx, it, 0); len(out.Records) != 0 {
				t.Errorf("%s: got %q, want no records", in.ShardIteratorType, data(out.Records))
			}
		}
	}
	t.Run("TRIM_HORIZON", func(t *testing.T) {
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeTrimHorizon}, names("r", 6))
	})
	t.Run("AT_SEQUENCE_NUMBER", func(t *testing.T) {
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: seq2}, names("r", 6)[2:])
	})
	t.Run("AFTER_SEQUENCE_NUMBER", func(t *testing.T) {
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: seq2}, names("r", 6)[3:])
	})
	t.Run("AFTER_SEQUENCE_NUMBER of the last record", func(t *testing.T) {
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: all[5].SequenceNumber}, nil)
	})
	t.Run("AT_TIMESTAMP of a record", func(t *testing.T) {
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeAtTimestamp, Timestamp: aws.Time(ts3)}, names("r", 6)[firstAt3:])
	})
	t.Run("AT_TIMESTAMP before the first record", func(t *testing.T) {
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeAtTimestamp, Timestamp: aws.Time(all[0].ApproximateArrivalTimestamp.Add(-time.Hour))}, names("r", 6))
	})
	t.Run("AT_TIMESTAMP after the last record", func(t *testing.T) {
		e.skipFor(t, quirkAtTimestampPastTipHangs)
		// Past, since the puts slept after the last record.
		read(t, &kinesis.GetShardIteratorInput{ShardIteratorType: types.ShardIteratorTypeAtTimestamp, Timestamp: aws.Time(all[5].ApproximateArrivalTimestamp.Add(time.Millisecond))}, nil)
	})
	t.Run("AT_TIMESTAMP in the future is refused", func(t *testing.T) {
		_, err := e.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
			StreamName: aws.String(stream), ShardId: aws.String(shard),
			ShardIteratorType: types.ShardIteratorTypeAtTimestamp, Timestamp: aws.Time(time.Now().Add(time.Hour)),
		})
		var ia *types.InvalidArgumentException
		if !errors.As(err, &ia) {
			t.Errorf("GetShardIterator AT_TIMESTAMP an hour ahead = %v (%T), want *types.InvalidArgumentException", err, err)
		}
	})
	t.Run("LATEST", func(t *testing.T) {
		it := e.iter(t, ctx, stream, shard, types.ShardIteratorTypeLatest)
		e.put(t, ctx, stream, "later0", nil)
		e.put(t, ctx, stream, "later1", nil)
		recs, _, _ := e.readOpen(t, ctx, it, 2, 0)
		if diff := cmp.Diff([]string{"later0", "later1"}, data(recs)); diff != "" {
			t.Errorf("LATEST, then two puts (-want +got):\n%s", diff)
		}
	})
}

// testGetRecordsLimit: Limit caps every page, and the pages together are
// the shard in order.
func testGetRecordsLimit(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	e.putMany(t, ctx, stream, names("r", 7)...)
	shard := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	recs, pages, _ := e.readOpen(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 7, 3)
	if diff := cmp.Diff(names("r", 7), data(recs)); diff != "" {
		t.Errorf("records read with Limit 3 (-want +got):\n%s", diff)
	}
	var sizes []int
	for _, p := range pages {
		sizes = append(sizes, len(p.Records))
	}
	if diff := cmp.Diff([]int{3, 3, 1}, sizes); diff != "" {
		t.Errorf("page sizes with Limit 3 (-want +got):\n%s", diff)
	}
}

// testMillisBehindLatest: a page with records still behind it reports
// MillisBehindLatest > 0; a page at the tip reports 0.
func testMillisBehindLatest(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	shard := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	for i := range 4 {
		e.put(t, ctx, stream, fmt.Sprintf("r%d", i), nil)
		time.Sleep(10 * time.Millisecond) // the unread records must have an age; nothing depends on the exact gap
	}
	_, pages, it := e.readOpen(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 4, 1)
	tip := e.getRecords(t, ctx, it, 0)

	t.Run("behind", func(t *testing.T) {
		e.skipFor(t, quirkMillisBehindZero)
		for i, p := range pages[:3] {
			if aws.ToInt64(p.MillisBehindLatest) <= 0 {
				t.Errorf("page %d (record r%d of 4): MillisBehindLatest = %v, want > 0", i, i, fmtInt64(p.MillisBehindLatest))
			}
		}
	})
	t.Run("at tip", func(t *testing.T) {
		if p := pages[3]; p.MillisBehindLatest == nil || *p.MillisBehindLatest != 0 {
			t.Errorf("page with the last record: MillisBehindLatest = %v, want 0", fmtInt64(p.MillisBehindLatest))
		}
		if len(tip.Records) != 0 || tip.MillisBehindLatest == nil || *tip.MillisBehindLatest != 0 {
			t.Errorf("page past the last record: %d records, MillisBehindLatest = %v; want 0 and 0", len(tip.Records), fmtInt64(tip.MillisBehindLatest))
		}
	})
}

func fmtInt64(p *int64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// testEmptyPageAtTip: at the tip of an open shard, an empty stream's or one
// read to its end, GetRecords returns no records and a next iterator, which
// then sees a record written later.
func testEmptyPageAtTip(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	shard := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)

	empty := e.getRecords(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 0)
	if len(empty.Records) != 0 || empty.NextShardIterator == nil {
		t.Fatalf("empty shard: %d records, NextShardIterator %v; want 0 and an iterator", len(empty.Records), empty.NextShardIterator != nil)
	}
	e.put(t, ctx, stream, "r0", nil)
	recs, _, it := e.readOpen(t, ctx, *empty.NextShardIterator, 1, 0)
	if diff := cmp.Diff([]string{"r0"}, data(recs)); diff != "" {
		t.Errorf("through the empty page's iterator (-want +got):\n%s", diff)
	}
	for i := range 3 {
		out := e.getRecords(t, ctx, it, 0)
		if len(out.Records) != 0 || out.NextShardIterator == nil {
			t.Fatalf("read %d at the tip: %d records, NextShardIterator %v; want 0 and an iterator", i, len(out.Records), out.NextShardIterator != nil)
		}
		it = *out.NextShardIterator
	}
}

// testSplitShard: SplitShard closes the parent and opens two children with
// the parent's lineage and halves of its hash range; the parent reads to
// its end, where GetRecords names the children and gives no next iterator;
// new records go to the children.
func testSplitShard(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	parent := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	var lastSeq string
	for _, r := range e.putMany(t, ctx, stream, names("p", 5)...) {
		lastSeq = aws.ToString(r.SequenceNumber)
	}
	if _, err := e.api.SplitShard(ctx, &kinesis.SplitShardInput{
		StreamName: aws.String(stream), ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String(midHashKey.String()),
	}); err != nil {
		t.Fatalf("SplitShard(%s): %v", parent, err)
	}
	e.waitActive(t, ctx, stream)

	shards := e.listShards(t, ctx, stream)
	var children []types.Shard
	var parentShard types.Shard
	for _, s := range shards {
		if aws.ToString(s.ShardId) == parent {
			parentShard = s
		} else {
			children = append(children, s)
		}
	}
	slices.SortFunc(children, func(a, b types.Shard) int {
		return seqNumCmp(t, *a.HashKeyRange.StartingHashKey, *b.HashKeyRange.StartingHashKey)
	})
	if len(shards) != 3 || len(children) != 2 || parentShard.ShardId == nil {
		t.Fatalf("ListShards after a split: %+v, want the parent %s and two children", views(shards), parent)
	}
	lo, hi := aws.ToString(children[0].ShardId), aws.ToString(children[1].ShardId)
	want := []shardView{
		{ID: parent, Start: "0", End: maxHashKey.String(), Closed: true},
		{ID: lo, Parent: parent, Start: "0", End: new(big.Int).Sub(midHashKey, big.NewInt(1)).String()},
		{ID: hi, Parent: parent, Start: midHashKey.String(), End: maxHashKey.String()},
	}
	slices.SortFunc(want, func(a, b shardView) int { return strings.Compare(a.ID, b.ID) })
	if diff := cmp.Diff(want, views(shards)); diff != "" {
		t.Errorf("ListShards after the split (-want +got):\n%s", diff)
	}
	t.Run("parent EndingSequenceNumber covers its records", func(t *testing.T) {
		e.skipFor(t, quirkEndingSequenceMax)
		end := aws.ToString(parentShard.SequenceNumberRange.EndingSequenceNumber)
		if seqNumCmp(t, end, lastSeq) < 0 {
			t.Errorf("parent EndingSequenceNumber %s is below its last record %s", end, lastSeq)
		}
	})

	recs, last := e.readClosed(t, ctx, e.iter(t, ctx, stream, parent, types.ShardIteratorTypeTrimHorizon))
	if diff := cmp.Diff(names("p", 5), data(recs)); diff != "" {
		t.Errorf("records of the closed parent (-want +got):\n%s", diff)
	}
	t.Run("ChildShards at the parent's end", func(t *testing.T) {
		e.skipFor(t, quirkNoChildShards)
		want := []childView{
			{ID: lo, Parents: []string{parent}, Start: want[1].Start, End: want[1].End},
			{ID: hi, Parents: []string{parent}, Start: want[2].Start, End: want[2].End},
		}
		if diff := cmp.Diff(want, childViews(last.ChildShards)); diff != "" {
			t.Errorf("ChildShards of the last page (-want +got):\n%s", diff)
		}
	})

	out := e.put(t, ctx, stream, "c-lo", big.NewInt(1))
	if got := aws.ToString(out.ShardId); got != lo {
		t.Errorf("PutRecord with hash key 1 after the split went to %s, want %s", got, lo)
	}
	out = e.put(t, ctx, stream, "c-hi", maxHashKey)
	if got := aws.ToString(out.ShardId); got != hi {
		t.Errorf("PutRecord with hash key 2^128-1 after the split went to %s, want %s", got, hi)
	}
	recs, _, _ = e.readOpen(t, ctx, e.iter(t, ctx, stream, hi, types.ShardIteratorTypeTrimHorizon), 1, 0)
	if diff := cmp.Diff([]string{"c-hi"}, data(recs)); diff != "" {
		t.Errorf("records of child %s (-want +got):\n%s", hi, diff)
	}
}

// childView is the part of a types.ChildShard the cases compare.
type childView struct {
	ID         string
	Parents    []string
	Start, End string
}

func childViews(cs []types.ChildShard) []childView {
	out := make([]childView, len(cs))
	for i, c := range cs {
		out[i] = childView{ID: aws.ToString(c.ShardId), Parents: slices.Sorted(slices.Values(c.ParentShards))}
		if c.HashKeyRange != nil {
			out[i].Start, out[i].End = aws.ToString(c.HashKeyRange.StartingHashKey), aws.ToString(c.HashKeyRange.EndingHashKey)
		}
	}
	slices.SortFunc(out, func(a, b childView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// testMergeShards: MergeShards closes both parents and opens one child whose
// ParentShardId is the shard to merge and AdjacentParentShardId the
// adjacent one; each parent reads to its end, naming the child.
func testMergeShards(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 2)
	before := e.listShards(t, ctx, stream)
	slices.SortFunc(before, func(a, b types.Shard) int {
		return seqNumCmp(t, *a.HashKeyRange.StartingHashKey, *b.HashKeyRange.StartingHashKey)
	})
	lo, hi := aws.ToString(before[0].ShardId), aws.ToString(before[1].ShardId)
	e.put(t, ctx, stream, "lo0", big.NewInt(0))
	e.put(t, ctx, stream, "hi0", maxHashKey)
	e.put(t, ctx, stream, "lo1", big.NewInt(0))
	if _, err := e.api.MergeShards(ctx, &kinesis.MergeShardsInput{
		StreamName: aws.String(stream), ShardToMerge: aws.String(lo), AdjacentShardToMerge: aws.String(hi),
	}); err != nil {
		t.Fatalf("MergeShards(%s, %s): %v", lo, hi, err)
	}
	e.waitActive(t, ctx, stream)

	shards := e.listShards(t, ctx, stream)
	var child string
	for _, s := range shards {
		if id := aws.ToString(s.ShardId); id != lo && id != hi {
			child = id
		}
	}
	want := []shardView{
		{ID: lo, Start: "0", End: aws.ToString(before[0].HashKeyRange.EndingHashKey), Closed: true},
		{ID: hi, Start: aws.ToString(before[1].HashKeyRange.StartingHashKey), End: maxHashKey.String(), Closed: true},
		{ID: child, Parent: lo, Adjacent: hi, Start: "0", End: maxHashKey.String()},
	}
	slices.SortFunc(want, func(a, b shardView) int { return strings.Compare(a.ID, b.ID) })
	if diff := cmp.Diff(want, views(shards)); diff != "" {
		t.Fatalf("ListShards after the merge (-want +got):\n%s", diff)
	}

	for _, p := range []struct {
		id   string
		want []string
	}{{lo, []string{"lo0", "lo1"}}, {hi, []string{"hi0"}}} {
		recs, last := e.readClosed(t, ctx, e.iter(t, ctx, stream, p.id, types.ShardIteratorTypeTrimHorizon))
		if diff := cmp.Diff(p.want, data(recs)); diff != "" {
			t.Errorf("records of the closed parent %s (-want +got):\n%s", p.id, diff)
		}
		t.Run("ChildShards at the end of "+p.id, func(t *testing.T) {
			e.skipFor(t, quirkNoChildShards)
			want := []childView{{ID: child, Parents: slices.Sorted(slices.Values([]string{lo, hi})), Start: "0", End: maxHashKey.String()}}
			if diff := cmp.Diff(want, childViews(last.ChildShards)); diff != "" {
				t.Errorf("ChildShards of the last page (-want +got):\n%s", diff)
			}
		})
	}
	if out := e.put(t, ctx, stream, "merged", midHashKey); aws.ToString(out.ShardId) != child {
		t.Errorf("PutRecord after the merge went to %s, want %s", aws.ToString(out.ShardId), child)
	}
}

// testListShardsPaging: MaxResults cuts the listing into pages joined by
// NextToken, which together are the whole listing.
func testListShardsPaging(t *testing.T, e *env) {
	e.skipFor(t, quirkListShardsPaging)
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 5)
	all, err := e.api.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatalf("ListShards: %v", err)
	}
	if len(all.Shards) != 5 || all.NextToken != nil {
		t.Fatalf("ListShards without MaxResults: %d shards, NextToken %v; want 5 and none", len(all.Shards), all.NextToken != nil)
	}
	var sizes []int
	var paged []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream), MaxResults: aws.Int32(2)}
	for range 10 {
		out, err := e.api.ListShards(ctx, in)
		if err != nil {
			t.Fatalf("ListShards page %d: %v", len(sizes), err)
		}
		sizes = append(sizes, len(out.Shards))
		paged = append(paged, out.Shards...)
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken, MaxResults: aws.Int32(2)}
	}
	if diff := cmp.Diff([]int{2, 2, 1}, sizes); diff != "" {
		t.Errorf("page sizes with MaxResults 2 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(views(all.Shards), views(paged)); diff != "" {
		t.Errorf("paged listing vs. one page (-want +got):\n%s", diff)
	}
}

// testShardFilter: after a split, each ShardFilter type selects the shards
// Kinesis documents for it.
func testShardFilter(t *testing.T, e *env) {
	e.skipFor(t, quirkShardFilter)
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	parent := aws.ToString(e.listShards(t, ctx, stream)[0].ShardId)
	if _, err := e.api.SplitShard(ctx, &kinesis.SplitShardInput{
		StreamName: aws.String(stream), ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String(midHashKey.String()),
	}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	e.waitActive(t, ctx, stream)
	all := ids(e.listShards(t, ctx, stream))
	children := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == parent })
	if len(all) != 3 {
		t.Fatalf("ListShards after a split: %v, want 3 shards", all)
	}
	for _, tc := range []struct {
		name   string
		filter types.ShardFilter
		want   []string
		quirk  quirk
	}{
		{"AT_LATEST", types.ShardFilter{Type: types.ShardFilterTypeAtLatest}, children, 0},
		{"AT_TRIM_HORIZON", types.ShardFilter{Type: types.ShardFilterTypeAtTrimHorizon}, []string{parent}, quirkAtTrimHorizonAll},
		{"FROM_TRIM_HORIZON", types.ShardFilter{Type: types.ShardFilterTypeFromTrimHorizon}, all, 0},
		{"AFTER_SHARD_ID", types.ShardFilter{Type: types.ShardFilterTypeAfterShardId, ShardId: aws.String(parent)}, children, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.skipFor(t, tc.quirk)
			out, err := e.api.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream), ShardFilter: &tc.filter})
			if err != nil {
				t.Fatalf("ListShards: %v", err)
			}
			if diff := cmp.Diff(tc.want, ids(out.Shards)); diff != "" {
				t.Errorf("ListShards with ShardFilter %s (-want +got):\n%s", tc.name, diff)
			}
		})
	}
}

// testUnknownStream: every call on a stream that does not exist fails with
// *types.ResourceNotFoundException.
func testUnknownStream(t *testing.T, e *env) {
	ctx := e.ctx(t)
	name := aws.String(fmt.Sprintf("%d-no-such-stream", streamSeq.Add(1)))
	for _, tc := range []struct {
		call string
		do   func() error
	}{
		{"DescribeStreamSummary", func() error {
			_, err := e.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: name})
			return err
		}},
		{"ListShards", func() error {
			_, err := e.api.ListShards(ctx, &kinesis.ListShardsInput{StreamName: name})
			return err
		}},
		{"GetShardIterator", func() error {
			_, err := e.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: name, ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
			return err
		}},
		{"PutRecord", func() error {
			_, err := e.api.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: name, PartitionKey: aws.String("pk"), Data: []byte("x")})
			return err
		}},
		{"PutRecords", func() error {
			_, err := e.api.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: name, Records: []types.PutRecordsRequestEntry{{PartitionKey: aws.String("pk"), Data: []byte("x")}}})
			return err
		}},
		{"DeleteStream", func() error {
			_, err := e.api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: name})
			return err
		}},
	} {
		t.Run(tc.call, func(t *testing.T) {
			err := tc.do()
			var nf *types.ResourceNotFoundException
			if !errors.As(err, &nf) {
				t.Errorf("%s on a missing stream = %v (%T), want *types.ResourceNotFoundException", tc.call, err, err)
			}
		})
	}
	t.Run("GetShardIterator of an unknown shard", func(t *testing.T) {
		stream := e.createStream(t, ctx, 1)
		_, err := e.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String("shardId-000000000099"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		var nf *types.ResourceNotFoundException
		if !errors.As(err, &nf) {
			t.Errorf("GetShardIterator of a missing shard = %v (%T), want *types.ResourceNotFoundException", err, err)
		}
	})
}

// testInvalidIterator: GetRecords with an iterator no implementation could
// have issued fails.
func testInvalidIterator(t *testing.T, e *env) {
	ctx := e.ctx(t)
	noRetry := func(o *kinesis.Options) { o.RetryMaxAttempts = 1 }
	_, err := e.api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("not an iterator!")}, noRetry)
	if err == nil {
		t.Fatal("GetRecords with a malformed iterator succeeded")
	}
	t.Run("InvalidArgumentException", func(t *testing.T) {
		e.skipFor(t, quirkInvalidIteratorUntyped)
		var ia *types.InvalidArgumentException
		if !errors.As(err, &ia) {
			t.Errorf("GetRecords with a malformed iterator = %v (%T), want *types.InvalidArgumentException", err, err)
		}
	})
}

// testInvalidStartingSequence: GetShardIterator refuses a sequence number
// that is not one of the shard's with *types.InvalidArgumentException.
func testInvalidStartingSequence(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 2)
	shards := e.listShards(t, ctx, stream)
	slices.SortFunc(shards, func(a, b types.Shard) int {
		return seqNumCmp(t, *a.HashKeyRange.StartingHashKey, *b.HashKeyRange.StartingHashKey)
	})
	lo := aws.ToString(shards[0].ShardId)
	e.put(t, ctx, stream, "lo", big.NewInt(0))
	hiSeq := e.put(t, ctx, stream, "hi", maxHashKey).SequenceNumber
	for _, tc := range []struct {
		name string
		typ  types.ShardIteratorType
		seq  *string
	}{
		{"AT_SEQUENCE_NUMBER of another shard's record", types.ShardIteratorTypeAtSequenceNumber, hiSeq},
		{"AFTER_SEQUENCE_NUMBER of another shard's record", types.ShardIteratorTypeAfterSequenceNumber, hiSeq},
		{"AT_SEQUENCE_NUMBER 1", types.ShardIteratorTypeAtSequenceNumber, aws.String("1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.skipFor(t, quirkSequenceNumberUnchecked)
			_, err := e.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
				StreamName: aws.String(stream), ShardId: aws.String(lo), ShardIteratorType: tc.typ, StartingSequenceNumber: tc.seq,
			})
			var ia *types.InvalidArgumentException
			if !errors.As(err, &ia) {
				t.Errorf("GetShardIterator(%s, %s %s) = %v (%T), want *types.InvalidArgumentException", lo, tc.typ, aws.ToString(tc.seq), err, err)
			}
		})
	}
}

// testRecreatedStream: a stream deleted and created again under the same
// name is another stream. DescribeStreamSummary gives it a later
// StreamCreationTimestamp (the ARN is built from the name, so the pair of
// the two identifies a stream), its shard IDs start at shardId-000000000000
// again, and it holds none of the old stream's records.
func testRecreatedStream(t *testing.T, e *env) {
	ctx := e.ctx(t)
	stream := e.createStream(t, ctx, 1)
	describe := func() *types.StreamDescriptionSummary {
		t.Helper()
		out, err := e.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		if err != nil {
			t.Fatalf("DescribeStreamSummary(%s): %v", stream, err)
		}
		d := out.StreamDescriptionSummary
		if d == nil || d.StreamARN == nil || d.StreamCreationTimestamp == nil {
			t.Fatalf("DescribeStreamSummary(%s) = %+v: want StreamARN and StreamCreationTimestamp", stream, d)
		}
		if !strings.HasSuffix(*d.StreamARN, ":stream/"+stream) {
			t.Errorf("StreamARN %s does not name stream %s", *d.StreamARN, stream)
		}
		return d
	}
	before := describe()
	oldSeq := aws.ToString(e.put(t, ctx, stream, "old", nil).SequenceNumber)

	if _, err := e.api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)}); err != nil {
		t.Fatalf("DeleteStream(%s): %v", stream, err)
	}
	// The emulators delete in the background: wait until the name is free.
	for {
		_, err := e.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s still there after DeleteStream: %v", stream, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatalf("CreateStream(%s) again: %v", stream, err)
	}
	e.waitActive(t, ctx, stream)
	after := describe()

	for _, d := range []*types.StreamDescriptionSummary{before, after} {
		if c := *d.StreamCreationTimestamp; !c.Equal(c.Truncate(time.Millisecond)) {
			t.Errorf("StreamCreationTimestamp %v has more than millisecond precision, which the API does not carry", c)
		}
	}
	switch c0, c1 := *before.StreamCreationTimestamp, *after.StreamCreationTimestamp; {
	case c1.After(c0):
	case c1.Equal(c0) && e.target.quirks[quirkCreationSeconds] != "":
		t.Logf("both streams were created at %v: quirk of %s: %s", c0, e.target.name, e.target.quirks[quirkCreationSeconds])
	default:
		t.Errorf("StreamCreationTimestamp of the re-created stream = %v, want after the first one's %v", c1, c0)
	}
	t.Logf("%s: first %s created %v; again %s created %v", e.target.name,
		*before.StreamARN, before.StreamCreationTimestamp.UTC().Format(time.RFC3339Nano),
		*after.StreamARN, after.StreamCreationTimestamp.UTC().Format(time.RFC3339Nano))

	shards := e.listShards(t, ctx, stream)
	if got := ids(shards); !slices.Equal(got, []string{"shardId-000000000000"}) {
		t.Fatalf("shards of the re-created stream = %v, want [shardId-000000000000]", got)
	}
	const shard = "shardId-000000000000"
	if recs, _, _ := e.readOpen(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 0, 0); len(recs) != 0 {
		t.Errorf("the re-created stream holds the old stream's records %q", data(recs))
	}
	e.put(t, ctx, stream, "new", nil)
	recs, _, _ := e.readOpen(t, ctx, e.iter(t, ctx, stream, shard, types.ShardIteratorTypeTrimHorizon), 1, 0)
	if got := data(recs); !slices.Equal(got, []string{"new"}) {
		t.Errorf("the re-created stream holds %q, want [new]", got)
	}

	// The old stream's sequence number is not one of the new shard's:
	// Kinesis (and kinesalite) say it "did not come from this stream".
	t.Run("old sequence number refused", func(t *testing.T) {
		e.skipFor(t, quirkForeignSequenceAccepted)
		_, err := e.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard),
			ShardIteratorType: types.ShardIteratorTypeAfterSequenceNumber, StartingSequenceNumber: aws.String(oldSeq)})
		var ia *types.InvalidArgumentException
		if !errors.As(err, &ia) {
			t.Errorf("GetShardIterator AFTER_SEQUENCE_NUMBER of the old stream's record = %v (%T), want *types.InvalidArgumentException", err, err)
		}
	})
}
