package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/pgsink/pgtest"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	if code == 0 {
		// What goleak.VerifyTestMain does, after the cleanup above.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

const streamName = "orders"

var errCrash = errors.New("simulated crash")

// row is one stored record, as the tests compare them.
type row struct {
	Shard, Seq, Data string
}

// newStream returns an in-memory Kinesis (without throughput limits) with
// one stream of the given number of shards.
func newStream(t *testing.T, shards int) *kinesistest.Fake {
	t.Helper()
	f := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(t, f, streamName, shards)
	return f
}

// put writes n records "<prefix>-<i>" with spread partition keys, or on
// the given shard's hash range when shard is not empty, and returns them.
func put(t *testing.T, f *kinesistest.Fake, shard, prefix string, n int) []row {
	t.Helper()
	var hashKey *string
	if shard != "" {
		hashKey = aws.String(startingHashKey(t, f, shard))
	}
	out := make([]row, 0, n)
	for i := range n {
		data := fmt.Sprintf("%s-%03d", prefix, i)
		res, err := f.PutRecord(context.Background(), &kinesis.PutRecordInput{
			StreamName: aws.String(streamName), PartitionKey: aws.String(data), ExplicitHashKey: hashKey, Data: []byte(data),
		})
		if err != nil {
			t.Fatalf("put %s: %v", data, err)
		}
		if shard != "" && aws.ToString(res.ShardId) != shard {
			t.Fatalf("put %s: landed on %s, want %s", data, aws.ToString(res.ShardId), shard)
		}
		out = append(out, row{Shard: aws.ToString(res.ShardId), Seq: aws.ToString(res.SequenceNumber), Data: data})
	}
	return out
}

func listShards(t *testing.T, f *kinesistest.Fake) []string {
	t.Helper()
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(streamName)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range out.Shards {
		ids = append(ids, aws.ToString(s.ShardId))
	}
	return ids
}

func hashRange(t *testing.T, f *kinesistest.Fake, shard string) (lo, hi *big.Int) {
	t.Helper()
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(streamName)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Shards {
		if aws.ToString(s.ShardId) == shard {
			lo, _ = new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
			hi, _ = new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
			return lo, hi
		}
	}
	t.Fatalf("no shard %s", shard)
	return nil, nil
}

func startingHashKey(t *testing.T, f *kinesistest.Fake, shard string) string {
	lo, _ := hashRange(t, f, shard)
	return lo.String()
}

// split splits shard in the middle and returns the two children.
func split(t *testing.T, f *kinesistest.Fake, shard string) []string {
	t.Helper()
	before := listShards(t, f)
	lo, hi := hashRange(t, f, shard)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := f.SplitShard(context.Background(), &kinesis.SplitShardInput{
		StreamName: aws.String(streamName), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(mid.String()),
	}); err != nil {
		t.Fatalf("split %s: %v", shard, err)
	}
	var children []string
	for _, id := range listShards(t, f) {
		if !slices.Contains(before, id) {
			children = append(children, id)
		}
	}
	return children
}

// stored returns every row of the stream, ordered.
func stored(t *testing.T, db *pgxpool.Pool) []row {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT shard, seq, convert_from(data, 'UTF8') FROM tidemark_records WHERE stream = $1 ORDER BY shard, seq::numeric`, streamName)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func count(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM tidemark_records WHERE stream = $1`, streamName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sortRows orders rows as stored does.
func sortRows(rs []row) []row {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b row) int {
		if c := strings.Compare(a.Shard, b.Shard); c != 0 {
			return c
		}
		return scan.CompareSequence(a.Seq, b.Seq)
	})
	return rs
}

// checkExactlyOnce asserts that the table holds exactly want: every record
// once, nothing else.
func checkExactlyOnce(t *testing.T, db *pgxpool.Pool, want []row) {
	t.Helper()
	if diff := cmp.Diff(sortRows(want), stored(t, db)); diff != "" {
		t.Errorf("stored rows (-want +got):\n%s", diff)
	}
	var n, distinct int
	if err := db.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT (shard, seq)) FROM tidemark_records WHERE stream = $1`, streamName).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(want) || distinct != len(want) {
		t.Errorf("count(*) = %d, distinct (shard, seq) = %d, want %d", n, distinct, len(want))
	}
}

// lastCheckpoints returns AFTER_SEQUENCE_NUMBER of each shard's last row.
func lastCheckpoints(rs []row) map[string]scan.Position {
	out := map[string]scan.Position{}
	for _, r := range sortRows(rs) {
		out[r.Shard] = scan.AfterSequence(r.Seq)
	}
	return out
}

func checkpoints(t *testing.T, s *Sink) map[string]scan.Position {
	t.Helper()
	cps, err := s.Checkpoints(context.Background(), streamName)
	if err != nil {
		t.Fatal(err)
	}
	return cps
}

// process is a simulated process: once dead, its Sink and its journal do
// nothing and fail, as nothing runs in a dead process.
type process struct{ dead atomic.Bool }

func (p *process) die() { p.dead.Store(true) }

// crashJournal is a journal of a process that can die: what was appended
// before survives in the wrapped journal, nothing after.
type crashJournal struct {
	journal.Journal
	p *process
}

func (j *crashJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	if j.p.dead.Load() {
		return 0, errCrash
	}
	return j.Journal.Append(ctx, recs...)
}

func (j *crashJournal) Snapshot(ctx context.Context, index uint64, state []byte) error {
	if j.p.dead.Load() {
		return errCrash
	}
	return j.Journal.Snapshot(ctx, index, state)
}

// testSink wraps the Sink: it fails at once when its process is dead,
// logs every batch it was given, and can cancel a Deliver in flight.
type testSink struct {
	*Sink
	p *process

	mu      sync.Mutex
	batches []kinesisload.Batch
	cancels map[string]context.CancelCauseFunc // of the Deliver in flight, by shard
}

func (s *testSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	if s.p != nil && s.p.dead.Load() {
		return errCrash
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	s.batches = append(s.batches, b)
	if s.cancels == nil {
		s.cancels = map[string]context.CancelCauseFunc{}
	}
	s.cancels[b.ShardID] = cancel
	s.mu.Unlock()
	return s.Sink.Deliver(ctx, b)
}

func (s *testSink) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	if s.p != nil && s.p.dead.Load() {
		return errCrash
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	s.batches = append(s.batches, bs...)
	if s.cancels == nil {
		s.cancels = map[string]context.CancelCauseFunc{}
	}
	for _, b := range bs {
		s.cancels[b.ShardID] = cancel
	}
	s.mu.Unlock()
	return s.Sink.DeliverMulti(ctx, bs)
}

func (s *testSink) log() []kinesisload.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// loaderRun is one running Loader.
type loaderRun struct {
	l    *kinesisload.Loader
	done chan error
}

// testSinkOf returns a Sink with the default Config on db.
func testSinkOf(db *pgxpool.Pool) *Sink {
	s, err := New(db, Config{})
	if err != nil {
		panic(err)
	}
	return s
}

// perShardSink hides a Sink's DeliverMulti: the Loader delivers batch by
// batch (Deliver) as without windows across shards.
type perShardSink struct{ kinesisload.TransactionalSink }

// testConfig is the Config of the tests: the Loader delivers each page
// of a shard with Deliver (a MultiSink's DeliverMulti is hidden).
func testConfig(sink kinesisload.Sink, recordsPerCall int32) kinesisload.Config {
	if tx, ok := sink.(kinesisload.TransactionalSink); ok {
		sink = perShardSink{tx}
	}
	return baseConfig(sink, recordsPerCall)
}

// windowConfig is the Config of the tests with windows across shards:
// sink, a MultiSink, gets one DeliverMulti per window of up to maxRecords
// records, or of what arrived within 20 ms.
func windowConfig(sink kinesisload.MultiSink, recordsPerCall int32, maxRecords int) kinesisload.Config {
	cfg := baseConfig(sink, recordsPerCall)
	cfg.MaxBatchRecords, cfg.MaxBatchWait = maxRecords, 20*time.Millisecond
	return cfg
}

func baseConfig(sink kinesisload.Sink, recordsPerCall int32) kinesisload.Config {
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = streamName
	cfg.Sink = sink
	cfg.StartPosition = scan.TrimHorizon()
	cfg.RecordsPerCall = recordsPerCall
	cfg.IdleWait = 200 * time.Millisecond
	cfg.ListShardsInterval = 200 * time.Millisecond
	cfg.SinkBackoff = 10 * time.Millisecond
	return cfg
}

// startLoader runs a Loader on f with store; it is stopped when the test
// ends if the test did not stop it.
func startLoader(t *testing.T, f *kinesistest.Fake, cfg kinesisload.Config, store kinesisload.PositionStore, hooks ...kinesisload.Hook) *loaderRun {
	t.Helper()
	l, err := kinesisload.New(cfg, kinesisload.WithClient(f), kinesisload.WithStore(store),
		kinesisload.WithHooks(hooks...), kinesisload.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	r := &loaderRun{l: l, done: make(chan error, 1)}
	go func() { r.done <- l.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		<-r.done
	})
	return r
}

// stop closes the Loader and checks that it had not stopped by itself.
func (r *loaderRun) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.l.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-r.done; !errors.Is(err, kinesisload.ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
	r.done <- kinesisload.ErrClosed // for the cleanup
}

// crashed waits for the Loader to stop by itself after a simulated crash.
func (r *loaderRun) crashed(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		if !errors.Is(err, errCrash) {
			t.Fatalf("Run = %v, want the simulated crash", err)
		}
		r.done <- err
	case <-time.After(20 * time.Second):
		t.Fatal("the Loader did not stop after the simulated crash")
	}
}

// waitCount waits until the stream has n rows, failing early if the Loader
// stops.
func waitCount(t *testing.T, db *pgxpool.Pool, r *loaderRun, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := count(t, db)
		if got == n {
			return
		}
		if got > n {
			t.Fatalf("%d rows, want %d", got, n)
		}
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("the Loader stopped (%v) with %d of %d rows stored", err, got, n)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out with %d of %d rows stored", got, n)
		}
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("TIDEMARK_PG_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newJournalStore(t *testing.T, j journal.Journal) *kinesisload.JournalStore {
	t.Helper()
	s, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestExactlyOnce loads records from three shards, several batches each,
// and finds every record exactly once in the table, and each shard's
// checkpoint after its last record.
func TestExactlyOnce(t *testing.T) {
	db := startPostgres(t)
	f := newStream(t, 3)
	want := put(t, f, "", "r", 150)
	sink := testSinkOf(db)
	r := startLoader(t, f, testConfig(sink, 10), newJournalStore(t, journal.NewMemory()))
	waitCount(t, db, r, len(want))
	r.stop(t)
	checkExactlyOnce(t, db, want)
	if diff := cmp.Diff(lastCheckpoints(want), checkpoints(t, sink)); diff != "" {
		t.Errorf("Checkpoints (-want +got):\n%s", diff)
	}
}

// TestCrashBetweenInsertAndCommit: the process dies in a Deliver after the
// INSERT and before the COMMIT. A new Loader on the same journal and
// database loads everything: nothing lost, nothing twice.
func TestCrashBetweenInsertAndCommit(t *testing.T) {
	for _, how := range []string{"backend terminated", "context cancelled"} {
		t.Run(how, func(t *testing.T) {
			db := startPostgres(t)
			f := newStream(t, 2)
			want := put(t, f, "", "r", 40)
			inner := journal.NewMemory()
			proc := &process{}

			sink1 := &testSink{Sink: testSinkOf(db), p: proc}
			var (
				calls      atomic.Int32
				crashBatch kinesisload.Batch
				inTx       int
			)
			sink1.afterInsert = func(ctx context.Context, tx pgx.Tx, b kinesisload.Batch) error {
				if len(b.Records) == 0 || calls.Add(1) != 3 { // the third batch of records
					return nil
				}
				// The rows are inserted, visible inside the transaction.
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM tidemark_records WHERE stream = $1 AND shard = $2 AND seq = ANY($3)`,
					b.Stream, b.ShardID, seqs(b)).Scan(&inTx); err != nil {
					return err
				}
				crashBatch = b
				proc.die()
				switch how {
				case "backend terminated":
					// The server sees its client vanish with the
					// transaction open.
					if _, err := db.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, tx.Conn().PgConn().PID()); err != nil {
						return err
					}
					return errCrash
				default:
					sink1.mu.Lock()
					cancel := sink1.cancels[b.ShardID]
					sink1.mu.Unlock()
					cancel(errCrash)
					return context.Cause(ctx)
				}
			}
			cfg := testConfig(sink1, 4)
			cfg.SinkRetries = kinesisload.SinkNoRetries
			r1 := startLoader(t, f, cfg, newJournalStore(t, &crashJournal{Journal: inner, p: proc}))
			r1.crashed(t)
			if inTx != len(crashBatch.Records) || inTx == 0 {
				t.Fatalf("the crash came with %d of the batch's %d rows inserted, want all", inTx, len(crashBatch.Records))
			}
			var left int
			if err := db.QueryRow(context.Background(), `SELECT count(*) FROM tidemark_records WHERE stream = $1 AND shard = $2 AND seq = ANY($3)`,
				streamName, crashBatch.ShardID, seqs(crashBatch)).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Fatalf("%d rows of the batch that crashed before COMMIT are in the table", left)
			}
			before := count(t, db)
			if before == 0 || before >= len(want) {
				t.Fatalf("%d rows stored before the restart; the crash should come after some batches and before the last", before)
			}

			sink2 := &testSink{Sink: testSinkOf(db)}
			r2 := startLoader(t, f, testConfig(sink2, 4), newJournalStore(t, inner))
			waitCount(t, db, r2, len(want))
			r2.stop(t)
			checkExactlyOnce(t, db, want)
			if diff := cmp.Diff(lastCheckpoints(want), checkpoints(t, sink2.Sink)); diff != "" {
				t.Errorf("Checkpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func seqs(b kinesisload.Batch) []string {
	out := make([]string, len(b.Records))
	for i, r := range b.Records {
		out[i] = r.SequenceNumber
	}
	return out
}

// TestCrashAfterCommitBeforeJournal: the process dies after the Sink's
// COMMIT and before the Loader journals the batch, so the journal lags the
// database. The restarted Loader resumes from the database's checkpoint:
// it is not even offered a record the database holds.
func TestCrashAfterCommitBeforeJournal(t *testing.T) {
	db := startPostgres(t)
	f := newStream(t, 2)
	want := put(t, f, "", "r", 40)
	inner := journal.NewMemory()
	proc := &process{}

	sink1 := &testSink{Sink: testSinkOf(db), p: proc}
	var calls atomic.Int32
	var crashBatch kinesisload.Batch
	sink1.afterCommit = func(ctx context.Context, b kinesisload.Batch) error {
		if len(b.Records) > 0 && calls.Add(1) == 3 { // the third batch of records
			crashBatch = b
			proc.die()
			return errCrash
		}
		return nil
	}
	cfg := testConfig(sink1, 4)
	cfg.SinkRetries = kinesisload.SinkNoRetries
	r1 := startLoader(t, f, cfg, newJournalStore(t, &crashJournal{Journal: inner, p: proc}))
	r1.crashed(t)

	// The scenario: the database holds the batch, the journal does not.
	dbCP := checkpoints(t, sink1.Sink)
	if !dbCP[crashBatch.ShardID].Equal(crashBatch.Checkpoint) {
		t.Fatalf("database checkpoint of %s = %v, want the crashed batch's %v", crashBatch.ShardID, dbCP[crashBatch.ShardID], crashBatch.Checkpoint)
	}
	store2 := newJournalStore(t, inner)
	journaled, err := store2.Load(context.Background(), streamName)
	if err != nil {
		t.Fatal(err)
	}
	if jp := journaled[crashBatch.ShardID].Position; jp.Kind == scan.KindAfterSequence &&
		scan.CompareSequence(jp.Sequence, crashBatch.Checkpoint.Sequence) >= 0 {
		t.Fatalf("journal position of %s = %v: not behind the database's %v, the crash did not happen where intended", crashBatch.ShardID, jp, crashBatch.Checkpoint)
	}
	before := count(t, db)

	sink2 := &testSink{Sink: testSinkOf(db)}
	r2 := startLoader(t, f, testConfig(sink2, 4), store2)
	waitCount(t, db, r2, len(want))
	r2.stop(t)
	checkExactlyOnce(t, db, want)
	// Resumed from the database: no batch of run 2 holds a record at or
	// before a checkpoint the database had at the restart.
	offered := 0
	for _, b := range sink2.log() {
		cp, ok := dbCP[b.ShardID]
		for _, rec := range b.Records {
			offered++
			if ok && (cp.Kind == scan.KindShardEnd || scan.CompareSequence(rec.SequenceNumber, cp.Sequence) <= 0) {
				t.Errorf("run 2 was offered %s/%s, which the database held at the restart (checkpoint %v)", b.ShardID, rec.SequenceNumber, cp)
			}
		}
	}
	if offered != len(want)-before {
		t.Errorf("run 2 was offered %d records, want the %d the database lacked", offered, len(want)-before)
	}
}

// TestRetryAfterLostCommit: a COMMIT succeeds but its answer is lost (the
// Sink returns an error), so the Loader delivers the same batch again. The
// Sink finds its checkpoint stored and skips it: nothing twice.
func TestRetryAfterLostCommit(t *testing.T) {
	db := startPostgres(t)
	f := newStream(t, 1)
	want := put(t, f, "", "r", 20)
	sink := &testSink{Sink: testSinkOf(db)}
	var calls atomic.Int32
	var lost kinesisload.Batch
	sink.afterCommit = func(ctx context.Context, b kinesisload.Batch) error {
		if len(b.Records) > 0 && calls.Add(1) == 2 { // the second batch of records
			lost = b
			return errors.New("connection reset while reading the COMMIT's answer")
		}
		return nil
	}
	r := startLoader(t, f, testConfig(sink, 4), newJournalStore(t, journal.NewMemory()))
	waitCount(t, db, r, len(want))
	r.stop(t)
	checkExactlyOnce(t, db, want)
	given := 0
	for _, b := range sink.log() {
		if b.Checkpoint.Equal(lost.Checkpoint) {
			given++
		}
	}
	if given != 2 {
		t.Errorf("the batch ending at %v was given to the Sink %d times, want 2 (the lost commit and the retry)", lost.Checkpoint, given)
	}
}

// TestCheckpointsAfterSplit: after a split, the parent's checkpoint is
// SHARD_END, stored by the batch that ends it: with its last records, or
// empty when they were delivered before the split. A Loader on a new
// journal then resumes from the database alone and never reads the
// parent again.
func TestCheckpointsAfterSplit(t *testing.T) {
	for _, when := range []string{"split before the load", "split after the parent was loaded"} {
		t.Run(when, func(t *testing.T) {
			db := startPostgres(t)
			f := newStream(t, 1)
			parent := listShards(t, f)[0]
			want := put(t, f, parent, "p", 5)
			sink := &testSink{Sink: testSinkOf(db)}
			var r *loaderRun
			var children []string
			if when == "split before the load" {
				children = split(t, f, parent)
				r = startLoader(t, f, testConfig(sink, 2), newJournalStore(t, journal.NewMemory()))
			} else {
				r = startLoader(t, f, testConfig(sink, 2), newJournalStore(t, journal.NewMemory()))
				waitCount(t, db, r, len(want))
				children = split(t, f, parent)
			}
			for i, c := range children {
				want = append(want, put(t, f, c, fmt.Sprintf("c%d", i), 3)...)
			}
			waitCount(t, db, r, len(want))
			r.stop(t)
			checkExactlyOnce(t, db, want)

			wantCP := lastCheckpoints(want)
			wantCP[parent] = scan.ShardEnd()
			if diff := cmp.Diff(wantCP, checkpoints(t, sink.Sink)); diff != "" {
				t.Errorf("Checkpoints (-want +got):\n%s", diff)
			}
			var ends []kinesisload.Batch
			for _, b := range sink.log() {
				if b.Checkpoint.Kind == scan.KindShardEnd {
					ends = append(ends, b)
				}
			}
			if len(ends) != 1 || ends[0].ShardID != parent {
				t.Fatalf("batches ending a shard: %+v, want one, of %s", ends, parent)
			}
			if empty := len(ends[0].Records) == 0; empty != (when != "split before the load") {
				t.Errorf("the batch that ended %s had %d records", parent, len(ends[0].Records))
			}

			// The journal is lost: a Loader on a new one resumes from the
			// database alone. The parent is complete and never read again;
			// the children go on after their checkpoints.
			sink2 := &testSink{Sink: testSinkOf(db)}
			r2 := startLoader(t, f, testConfig(sink2, 2), newJournalStore(t, journal.NewMemory()))
			for i, c := range children {
				want = append(want, put(t, f, c, fmt.Sprintf("more%d", i), 2)...)
			}
			waitCount(t, db, r2, len(want))
			r2.stop(t)
			checkExactlyOnce(t, db, want)
			for _, b := range sink2.log() {
				if b.ShardID == parent {
					t.Errorf("the completed parent %s was read again: batch ending at %v", parent, b.Checkpoint)
				}
			}

		})
	}
}

// TestDeliverRefusesWhatTheCheckpointCovers: without a fleet (epoch 0), a
// batch overlapping the stored checkpoint is an error and changes nothing;
// the same batch again, or one behind the checkpoint, is a no-op.
func TestDeliverRefusesWhatTheCheckpointCovers(t *testing.T) {
	db := startPostgres(t)
	s := testSinkOf(db)
	ctx := context.Background()
	rec := func(seq string) kinesisload.Record {
		return kinesisload.Record{Data: []byte("d" + seq), PartitionKey: "k", SequenceNumber: seq, ArrivalTime: time.UnixMilli(1700000000000)}
	}
	batch := func(cp scan.Position, seqs ...string) kinesisload.Batch {
		b := kinesisload.Batch{Stream: streamName, ShardID: "shardId-000000000000", Checkpoint: cp}
		for _, q := range seqs {
			b.Records = append(b.Records, rec(q))
		}
		return b
	}
	if err := s.Deliver(ctx, batch(scan.AfterSequence("200"), "100", "200")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		b    kinesisload.Batch
		want error
	}{
		{"same batch again", batch(scan.AfterSequence("200"), "100", "200"), nil},
		{"behind", batch(scan.AfterSequence("100"), "100"), nil},
		{"overlapping", batch(scan.AfterSequence("300"), "200", "300"), ErrOverlap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Deliver(ctx, tt.b)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Deliver = %v, want %v", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), "shard shardId-000000000000") {
				t.Errorf("error %q does not name the shard", err)
			}
			want := []row{{"shardId-000000000000", "100", "d100"}, {"shardId-000000000000", "200", "d200"}}
			if diff := cmp.Diff(want, stored(t, db)); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]scan.Position{"shardId-000000000000": scan.AfterSequence("200")}, checkpoints(t, s)); diff != "" {
				t.Errorf("Checkpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeliverAggregate: the user records of a KPL aggregate share one
// sequence number; the sub-sequence number keeps their rows apart.
func TestDeliverAggregate(t *testing.T) {
	db := startPostgres(t)
	s := testSinkOf(db)
	b := kinesisload.Batch{Stream: streamName, ShardID: "shardId-000000000000", Checkpoint: scan.AfterSequence("100")}
	for i, d := range []string{"a", "b", "c"} {
		b.Records = append(b.Records, kinesisload.Record{Data: []byte(d), PartitionKey: "k", SequenceNumber: "100",
			SubSequenceNumber: int64(i), Aggregated: true, ArrivalTime: time.UnixMilli(1700000000000)})
	}
	if err := s.Deliver(context.Background(), b); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(DISTINCT subseq) FROM tidemark_records WHERE stream = $1 AND seq = '100'`, streamName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d distinct user records stored, want 3", n)
	}
}

// initHook signals when a Loader's initialisation is done.
type initHook chan kinesisload.InitResolved

func (h initHook) OnInitResolved(e kinesisload.InitResolved) { h <- e }

// TestLostJournalBeforeFirstRecord: the database alone knows where every
// shard starts. A Loader at LATEST initialises and stops before any record
// arrives; records arrive; the journal is lost. A Loader with an empty
// journal loads every one of them (and nothing from before the start),
// because the starts were stored in the database before any shard was read.
func TestLostJournalBeforeFirstRecord(t *testing.T) {
	db := startPostgres(t)
	f := newStream(t, 2)
	put(t, f, "", "history", 10)
	// LATEST resolves at T0, Kinesis's Date floored to the second: let the
	// history be older than the second before the start.
	time.Sleep(2 * time.Second)
	sink := testSinkOf(db)
	cfg := testConfig(sink, 10)
	cfg.StartPosition = scan.Latest()
	ih := make(initHook, 4)
	r1 := startLoader(t, f, cfg, newJournalStore(t, journal.NewMemory()), ih)
	select {
	case <-ih:
	case <-time.After(20 * time.Second):
		t.Fatal("initialisation did not finish")
	}
	r1.stop(t)
	cps := checkpoints(t, sink)
	for _, sh := range listShards(t, f) {
		if cps[sh].Kind != scan.KindAfterSequence {
			t.Errorf("the database's checkpoint of %s after initialisation = %v, want the resolved start", sh, cps[sh])
		}
	}

	want := put(t, f, "", "r", 30)
	r2 := startLoader(t, f, cfg, newJournalStore(t, journal.NewMemory())) // the journal is lost
	waitCount(t, db, r2, len(want))
	r2.stop(t)
	checkExactlyOnce(t, db, want)
}
