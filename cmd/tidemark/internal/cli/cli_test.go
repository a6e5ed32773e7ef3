package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// world is the commands' environment in memory: the fake Kinesis on a
// manual clock, a memory table, and a lease table's items.
type world struct {
	t      *testing.T
	clock  *kinesistest.ManualClock
	fake   *kinesistest.Fake
	table  *fleet.MemoryTable
	items  []map[string]ddbtypes.AttributeValue
	sleeps []time.Duration
}

func newWorld(t *testing.T) *world {
	clock := kinesistest.NewManualClock(t0)
	return &world{t: t, clock: clock, fake: kinesistest.New(kinesistest.WithClock(clock), kinesistest.WithoutLimits()), table: fleet.NewMemoryTable()}
}

func (w *world) env() Env {
	return Env{
		Kinesis: func(context.Context, *Options) (scan.Client, error) { return w.fake, nil },
		Table: func(context.Context, *Options, bool) (fleet.Table, error) {
			return w.table, nil
		},
		KCLItems: func(context.Context, *Options) ([]map[string]ddbtypes.AttributeValue, error) { return w.items, nil },
		Now:      w.clock.Now,
		Who:      func() string { return "tester@test" },
		Sleep: func(ctx context.Context, d time.Duration) error {
			w.sleeps = append(w.sleeps, d)
			return nil
		},
	}
}

// run runs the command line and returns its status and output.
func (w *world) run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), w.env(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// put writes data to shard index i of a two-shard stream (by explicit
// hash key) and returns its sequence number.
func (w *world) put(stream string, lowHalf bool, data []byte) string {
	w.t.Helper()
	key := "0"
	if !lowHalf {
		key = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)).String()
	}
	out, err := w.fake.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(stream), Data: data, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(key)})
	if err != nil {
		w.t.Fatal(err)
	}
	return *out.SequenceNumber
}

// journalWith makes a journal directory holding progress.
func journalWith(t *testing.T, stream string, progress ...kinesisload.ShardProgress) string {
	t.Helper()
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(context.Background(), stream, progress); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadJournal reads a journal directory's progress.
func loadJournal(t *testing.T, dir, stream string) (map[string]kinesisload.ShardProgress, map[string]kinesisload.Rewind) {
	t.Helper()
	j, err := journal.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := st.Load(context.Background(), stream)
	rws, _ := st.Rewinds(context.Background(), stream)
	return p, rws
}

func TestUsageErrorsExitWithStatus2(t *testing.T) {
	w := newWorld(t)
	dir := journalWith(t, "s", kinesisload.ShardProgress{ShardID: "a", State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "Usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"status"}, "give --dir"},
		{[]string{"status", "--dir", dir, "--table", "t"}, "not both"},
		{[]string{"status", "--table", "t"}, "--stream is required"},
		{[]string{"rewind", "--dir", dir, "--stream", "s"}, "give --to WHERE or --from FILE"},
		{[]string{"rewind", "--dir", dir, "--stream", "s", "--to", "LATEST"}, "use --to now"},
		{[]string{"rewind", "--dir", dir, "--stream", "s", "--to", "2999-01-01T00:00:00Z"}, "in the future"},
		{[]string{"rewind", "--dir", dir, "--stream", "s", "--to", "AFTER_SEQUENCE_NUMBER:12"}, "name it with --shards"},
		{[]string{"rewind", "--dir", dir, "--stream", "s", "--to", "yesterday"}, `--to "yesterday"`},
		{[]string{"import", "--dir", dir}, "name the export FILE"},
		{[]string{"import-kcl", "--dir", dir, "--stream", "s"}, "--kcl-table is required"},
		{[]string{"import-kcl", "--dir", dir, "--stream", "s", "--kcl-table", "k", "--initial-position", "NOW"}, "--initial-position"},
	} {
		code, _, errOut := w.run(tt.args...)
		if code != ExitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("tidemark %v = %d, %q; want 2 saying %q", tt.args, code, errOut, tt.want)
		}
	}
}

// rewind on a journal moves the positions back, records who and when,
// leaves COMPLETED shards alone, and refuses while a Loader holds the
// directory, writing nothing.
func TestRewindOnAJournal(t *testing.T) {
	w := newWorld(t)
	dir := journalWith(t, "s",
		kinesisload.ShardProgress{ShardID: "a", State: kinesisload.StateActive, Position: scan.AfterSequence("500")},
		kinesisload.ShardProgress{ShardID: "b", State: kinesisload.StateDraining, Position: scan.AfterSequence("700")},
		kinesisload.ShardProgress{ShardID: "done", State: kinesisload.StateCompleted, Position: scan.ShardEnd()})
	at := t0.Add(-time.Hour)

	// Held by a Loader: refused.
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--to", at.Format(time.RFC3339))
	j.Close()
	if code != ExitFailed || !strings.Contains(errOut, "locked") || !strings.Contains(errOut, "stop it first") {
		t.Errorf("rewind of a held journal = %d, %q; want 1 saying it is locked", code, errOut)
	}
	if p, _ := loadJournal(t, dir, "s"); !p["a"].Position.Equal(scan.AfterSequence("500")) {
		t.Fatalf("a refused rewind moved shard a to %v", p["a"].Position)
	}

	// A dry run writes nothing.
	code, out, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--to", at.Format(time.RFC3339), "--dry-run")
	if code != ExitOK || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run = %d, %q, %q", code, out, errOut)
	}
	if p, _ := loadJournal(t, dir, "s"); !p["a"].Position.Equal(scan.AfterSequence("500")) {
		t.Fatalf("a dry run moved shard a to %v", p["a"].Position)
	}

	code, out, errOut = w.run("rewind", "--dir", dir, "--stream", "s", "--to", at.Format(time.RFC3339), "--by", "alice", "--reason", "bad deploy", "--json")
	if code != ExitOK {
		t.Fatalf("rewind = %d, %q", code, errOut)
	}
	var rep RewindReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if len(rep.Rewound) != 2 || rep.Skipped["done"] == "" {
		t.Errorf("report: %+v, want a and b rewound, done skipped", rep)
	}
	p, rws := loadJournal(t, dir, "s")
	for _, id := range []string{"a", "b"} {
		if !p[id].Position.Equal(scan.AtTimestamp(at)) || p[id].State != kinesisload.StateActive {
			t.Errorf("shard %s: %v %v, want ACTIVE at %v", id, p[id].State, p[id].Position, at)
		}
		if rw := rws[id]; rw.By != "alice" || rw.Reason != "bad deploy" || !rw.At.Equal(t0) {
			t.Errorf("shard %s's rewind record: %+v", id, rw)
		}
	}
	if p["done"].State != kinesisload.StateCompleted {
		t.Errorf("the COMPLETED shard became %v", p["done"].State)
	}
	// Naming a COMPLETED shard is refused, naming it.
	code, _, errOut = w.run("rewind", "--dir", dir, "--stream", "s", "--shards", "done", "--to", "TRIM_HORIZON")
	if code != ExitFailed || !strings.Contains(errOut, "shard done is COMPLETED") {
		t.Errorf("rewind of a COMPLETED shard = %d, %q", code, errOut)
	}
}

// rewind --to now resolves every shard's tip at once, concretely; a
// sequence number is checked against its shard.
func TestRewindToNowAndToASequence(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 2)
	var low []string
	for i := range 3 {
		low = append(low, w.put("s", true, []byte{byte(i)}))
	}
	w.clock.Advance(time.Second)
	dir := journalWith(t, "s",
		kinesisload.ShardProgress{ShardID: "shardId-000000000000", State: kinesisload.StateActive, Position: scan.TrimHorizon()},
		kinesisload.ShardProgress{ShardID: "shardId-000000000001", State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	if code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--to", "now"); code != ExitOK {
		t.Fatalf("rewind --to now = %d, %q", code, errOut)
	}
	p, _ := loadJournal(t, dir, "s")
	if got := p["shardId-000000000000"].Position; !got.Equal(scan.AfterSequence(low[2])) {
		t.Errorf("shard 0 at %v, want after its last record %s", got, low[2])
	}
	if got := p["shardId-000000000001"].Position; !got.Equal(scan.TrimHorizon()) {
		t.Errorf("empty shard 1 at %v, want TRIM_HORIZON", got)
	}
	if code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--shards", "shardId-000000000000", "--to", "AFTER_SEQUENCE_NUMBER:"+low[0]); code != ExitOK {
		t.Fatalf("rewind to a sequence = %d, %q", code, errOut)
	}
	if p, _ := loadJournal(t, dir, "s"); !p["shardId-000000000000"].Position.Equal(scan.AfterSequence(low[0])) {
		t.Errorf("shard 0 at %v, want after %s", p["shardId-000000000000"].Position, low[0])
	}
	code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--shards", "shardId-000000000001", "--to", "AT_SEQUENCE_NUMBER:"+low[0])
	if code != ExitFailed || !strings.Contains(errOut, "shardId-000000000001") {
		t.Errorf("rewind to another shard's sequence number = %d, %q; want 1 naming the shard", code, errOut)
	}
}

// status: a journal no Loader holds is stopped (exit 3); one a Loader
// holds is read from a copy, and a shard whose oldest unread record is
// older than --max-lag is stuck (exit 3); caught up, it is healthy (0).
func TestStatusOfAJournal(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 2)
	first := w.put("s", true, []byte("x"))
	second := w.put("s", true, []byte("y"))
	dir := journalWith(t, "s",
		kinesisload.ShardProgress{ShardID: "shardId-000000000000", State: kinesisload.StateActive, Position: scan.AfterSequence(first)},
		kinesisload.ShardProgress{ShardID: "shardId-000000000001", State: kinesisload.StateActive, Position: scan.TrimHorizon()})
	code, out, _ := w.run("status", "--dir", dir)
	if code != ExitUnhealthy || !strings.Contains(out, "no Loader holds the journal") || !strings.Contains(out, "stopped") {
		t.Errorf("status of a journal no Loader holds = %d:\n%s", code, out)
	}
	if code, _, errOut := w.run("status", "--dir", dir, "--stream", "other"); code != ExitFailed || !strings.Contains(errOut, "holds no progress of stream other") {
		t.Errorf("status of a stream the journal does not hold = %d, %q", code, errOut)
	}
	j, err := journal.Open(dir, journal.DefaultConfig()) // a running Loader
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	w.clock.Advance(time.Hour)
	code, out, _ = w.run("status", "--dir", dir, "--max-lag", "10m", "--json")
	var rep StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if code != ExitUnhealthy || len(rep.Streams) != 1 || !rep.Streams[0].ReadFromCopy || !rep.Streams[0].Running {
		t.Fatalf("status while a Loader runs, a record waiting an hour = %d: %+v", code, rep)
	}
	sh := rep.Streams[0].Shards[0]
	if sh.Health != HealthStuck || sh.Lag == nil || sh.Lag.Records != 1 || sh.Lag.OldestUnreadAge < time.Hour.Milliseconds() {
		t.Errorf("shard 0: %+v lag %+v; want stuck, 1 record an hour old", sh, sh.Lag)
	}
	if sh1 := rep.Streams[0].Shards[1]; sh1.Health != HealthOK || sh1.Lag == nil || sh1.Lag.Records != 0 {
		t.Errorf("empty shard 1: %+v, want ok with nothing behind", sh1)
	}
	code, _, errOut := w.run("status", "--dir", dir, "--max-lag", "2h")
	if code != ExitOK {
		t.Errorf("status with --max-lag 2h = %d, %q; want 0", code, errOut)
	}
	_ = second
}

// status of a fleet: a shard whose owner's heartbeat does not move
// during the wait is stopped; the lineage tree shows children under
// parents.
func TestStatusOfAFleet(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	id := kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:us-east-1:1:stream/s", Created: t0}
	if err := fleet.Import(ctx, w.table, "s", id, []kinesisload.ShardProgress{
		{ShardID: "p", State: kinesisload.StateCompleted, Position: scan.ShardEnd()},
		{ShardID: "c", State: kinesisload.StateActive, Position: scan.TrimHorizon(), Parents: []string{"p"}},
	}); err != nil {
		t.Fatal(err)
	}
	code, out, _ := w.run("status", "--table", "t", "--stream", "s", "--no-lag")
	if code != ExitUnhealthy || !strings.Contains(out, "no host holds its lease") || !strings.Contains(out, "└─ c ACTIVE") {
		t.Errorf("status of a fleet with no host = %d:\n%s", code, out)
	}
	if len(w.sleeps) != 1 || w.sleeps[0] != 3*time.Second {
		t.Errorf("status waited %v, want one heartbeat wait of 3s", w.sleeps)
	}
}

// export then import moves positions and lineage between a journal and a
// table exactly; import refuses a destination that holds the stream, and
// a bad file is refused naming the file and what is wrong.
func TestExportImportBetweenAJournalAndATable(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	progress := []kinesisload.ShardProgress{
		{ShardID: "p", State: kinesisload.StateCompleted, Position: scan.ShardEnd()},
		{ShardID: "c1", State: kinesisload.StateActive, Position: scan.AfterSequence("49590338271490256608559692538361571095921575989136588898"), Parents: []string{"p"}},
		{ShardID: "c2", State: kinesisload.StateActive, Position: scan.AtTimestamp(t0), Parents: []string{"p"}},
	}
	dir := journalWith(t, "s", progress...)
	file := filepath.Join(t.TempDir(), "s.json")
	if code, _, errOut := w.run("export", "--dir", dir, "--out", file); code != ExitOK {
		t.Fatalf("export = %d, %q", code, errOut)
	}
	if code, _, errOut := w.run("import", "--table", "t", file); code != ExitOK {
		t.Fatalf("import = %d, %q", code, errOut)
	}
	info, err := fleet.Inspect(ctx, w.table, "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range progress {
		got := info.Shards[want.ShardID].Progress
		if got.State != want.State || !got.Position.Equal(want.Position) || strings.Join(got.Parents, ",") != strings.Join(want.Parents, ",") {
			t.Errorf("shard %s in the table: %+v, want %+v", want.ShardID, got, want)
		}
	}
	// And back into an empty journal.
	back := filepath.Join(t.TempDir(), "back")
	file2 := filepath.Join(t.TempDir(), "t.json")
	if code, _, errOut := w.run("export", "--table", "t", "--stream", "s", "--out", file2); code != ExitOK {
		t.Fatalf("export of the table = %d, %q", code, errOut)
	}
	if code, _, errOut := w.run("import", "--dir", back, file2); code != ExitOK {
		t.Fatalf("import into a new journal = %d, %q", code, errOut)
	}
	got, _ := loadJournal(t, back, "s")
	for _, want := range progress {
		if p := got[want.ShardID]; p.State != want.State || !p.Position.Equal(want.Position) {
			t.Errorf("shard %s after the round trip: %+v, want %+v", want.ShardID, p, want)
		}
	}
	if code, _, errOut := w.run("import", "--dir", back, file2); code != ExitFailed || !strings.Contains(errOut, "already holds progress") {
		t.Errorf("import into a journal that holds the stream = %d, %q", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	for content, want := range map[string]string{
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [`:                                                          "bad.json",
		`{"format": "kcl", "stream": "s", "shards": []}`:                                                                         `format "kcl"`,
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "a", "state": "ACTIVE", "position": "LATEST"}]}`: "shard a: LATEST is never stored",
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "a", "state": "RUNNING"}]}`:                      "RUNNING",
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "a", "position": "AFTER_SEQUENCE_NUMBER:x"}]}`:   "shard a: position",
		// An open shard stored at SHARD_END would be completed unread; a
		// COMPLETED one short of its end would let its children be read
		// before the rest of it (both were imported).
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "a", "state": "ACTIVE", "position": "SHARD_END"}]}`:                  "shard a: position SHARD_END with state ACTIVE",
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "a", "state": "COMPLETED", "position": "AFTER_SEQUENCE_NUMBER:5"}]}`: "shard a: state COMPLETED at AFTER_SEQUENCE_NUMBER:5",
		// A value a decoder refuses names where it is (it named nothing).
		`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "a", "state": "ACTIVE"}, {"shard": "b", "state": "ACTIV"}]}`: `shards[1] (shard "b")`,
		`{"format": "tidemark-positions/1", "stream": "s", "exported_at": "yesterday", "shards": []}`:                                        "field exported_at",
	} {
		if err := os.WriteFile(bad, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := w.run("import", "--dir", filepath.Join(t.TempDir(), "j"), bad)
		if code != ExitFailed || !strings.Contains(errOut, want) {
			t.Errorf("import of %s = %d, %q; want 1 saying %q", content, code, errOut, want)
		}
	}
}

// rewind --from FILE puts the positions of an export back: the way to
// undo a rewind, or to restore after an operation.
func TestRewindFromAnExportRestoresPositions(t *testing.T) {
	w := newWorld(t)
	dir := journalWith(t, "s",
		kinesisload.ShardProgress{ShardID: "a", State: kinesisload.StateActive, Position: scan.AfterSequence("500")},
		kinesisload.ShardProgress{ShardID: "b", State: kinesisload.StateActive, Position: scan.AfterSequence("600")})
	file := filepath.Join(t.TempDir(), "before.json")
	if code, _, errOut := w.run("export", "--dir", dir, "--out", file); code != ExitOK {
		t.Fatal(code, errOut)
	}
	if code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--to", "TRIM_HORIZON"); code != ExitOK {
		t.Fatal(code, errOut)
	}
	if code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--from", file); code != ExitOK {
		t.Fatal(code, errOut)
	}
	p, _ := loadJournal(t, dir, "s")
	if !p["a"].Position.Equal(scan.AfterSequence("500")) || !p["b"].Position.Equal(scan.AfterSequence("600")) {
		t.Errorf("after rewind --from: a %v, b %v; want 500 and 600", p["a"].Position, p["b"].Position)
	}
}

// kclItem builds a KCL lease item.
func kclItem(attrs map[string]string, parents ...string) map[string]ddbtypes.AttributeValue {
	it := map[string]ddbtypes.AttributeValue{}
	for k, v := range attrs {
		switch k {
		case "leaseCounter", "checkpointSubSequenceNumber", "ownerSwitchesSinceCheckpoint":
			it[k] = &ddbtypes.AttributeValueMemberN{Value: v}
		default:
			it[k] = &ddbtypes.AttributeValueMemberS{Value: v}
		}
	}
	if len(parents) > 0 {
		it["parentShardId"] = &ddbtypes.AttributeValueMemberSS{Value: parents}
	}
	return it
}

// The lease formats are read as their libraries write them: KCL 1.x/2.x
// and 3.x single-stream, multi-stream (other streams and other entities
// left out), vmware-go-kcl; a bad attribute is named.
func TestParseLeasesReadsEveryFormat(t *testing.T) {
	items := []map[string]ddbtypes.AttributeValue{
		kclItem(map[string]string{"leaseKey": "shardId-000000000001", "checkpoint": "49590338271490256608559692538361571095921575989136588898", "checkpointSubSequenceNumber": "3", "leaseCounter": "7", "leaseOwner": "w1", "ownerSwitchesSinceCheckpoint": "0"}, "shardId-000000000000"),
		kclItem(map[string]string{"leaseKey": "shardId-000000000000", "checkpoint": "SHARD_END", "checkpointSubSequenceNumber": "0", "leaseCounter": "9", "entityType": "LEASE"}),
		kclItem(map[string]string{"leaseKey": "worker-1", "entityType": "WORKER_METRIC_STATS"}),
		kclItem(map[string]string{"leaseKey": "123456789012:s:1700000000:shardId-000000000002", "streamName": "123456789012:s:1700000000", "shardId": "shardId-000000000002", "checkpoint": "LATEST", "leaseCounter": "1"}),
		kclItem(map[string]string{"leaseKey": "123456789012:other:1700000000:shardId-000000000000", "streamName": "123456789012:other:1700000000", "shardId": "shardId-000000000000", "checkpoint": "TRIM_HORIZON", "leaseCounter": "1"}),
		{"ShardID": &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000003"}, "Checkpoint": &ddbtypes.AttributeValueMemberS{Value: "12345"}, "ParentShardId": &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000001"}, "AssignedTo": &ddbtypes.AttributeValueMemberS{Value: "w2"}},
		{"something": &ddbtypes.AttributeValueMemberS{Value: "else"}},
	}
	leases, notes, err := parseLeases(items, "s")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]kclLease{}
	for _, l := range leases {
		got[l.Shard] = l
	}
	if len(got) != 4 {
		t.Fatalf("leases: %+v, want 4 of stream s", leases)
	}
	if l := got["shardId-000000000001"]; l.Format != formatKCL || l.SubSequence != 3 || strings.Join(l.Parents, ",") != "shardId-000000000000" || !strings.HasPrefix(l.Checkpoint, "4959") {
		t.Errorf("KCL lease: %+v", l)
	}
	if l := got["shardId-000000000002"]; l.Format != formatKCLMulti || l.StreamEpoch != 1700000000 || l.Checkpoint != "LATEST" {
		t.Errorf("multi-stream lease: %+v", l)
	}
	if l := got["shardId-000000000003"]; l.Format != formatVMware || l.Checkpoint != "12345" || strings.Join(l.Parents, ",") != "shardId-000000000001" {
		t.Errorf("vmware lease: %+v", l)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"stream other", "WORKER_METRIC_STATS", "neither leaseKey"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q lack %q", joined, want)
		}
	}
	for _, tt := range []struct {
		item map[string]ddbtypes.AttributeValue
		want string
	}{
		{kclItem(map[string]string{"leaseKey": "sh", "checkpointSubSequenceNumber": "1"}), "KCL lease sh: attribute checkpoint is missing"},
		{kclItem(map[string]string{"leaseKey": "sh", "checkpoint": "soon"}), `KCL lease sh: attribute checkpoint = "soon"`},
		{kclItem(map[string]string{"leaseKey": "sh", "checkpoint": "1", "checkpointSubSequenceNumber": "-4"}), "KCL lease sh: attribute checkpointSubSequenceNumber"},
		{map[string]ddbtypes.AttributeValue{"leaseKey": &ddbtypes.AttributeValueMemberS{Value: "sh"}, "checkpoint": &ddbtypes.AttributeValueMemberS{Value: "1"}, "parentShardId": &ddbtypes.AttributeValueMemberBOOL{Value: true}}, "KCL lease sh: attribute parentShardId"},
		{map[string]ddbtypes.AttributeValue{"ShardID": &ddbtypes.AttributeValueMemberS{Value: "v"}, "Checkpoint": &ddbtypes.AttributeValueMemberS{Value: "LATEST"}}, "vmware-go-kcl lease v: attribute Checkpoint"},
	} {
		if _, _, err := parseLeases([]map[string]ddbtypes.AttributeValue{tt.item}, "s"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseLeases(%v) = %v, want an error saying %q", tt.item, err, tt.want)
		}
	}
}

// import-kcl plans every kind of checkpoint as documented, writes nothing
// without --apply, and with it imports exactly the plan.
func TestImportKCLPlansEveryCheckpoint(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	kinesistest.NewStream(t, w.fake, "s", 2)
	plain := w.put("s", true, []byte("plain"))
	entry, err := kinesistest.Aggregate([]kinesistest.UserRecord{{PartitionKey: "a", ExplicitHashKey: "0", Data: []byte("1")}, {PartitionKey: "a", ExplicitHashKey: "0", Data: []byte("2")}, {PartitionKey: "a", ExplicitHashKey: "0", Data: []byte("3")}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.fake.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("s"), Records: []types.PutRecordsRequestEntry{entry}})
	if err != nil {
		t.Fatal(err)
	}
	agg := *out.Records[0].SequenceNumber
	high := w.put("s", false, []byte("h"))
	w.clock.Advance(time.Second)

	lease := func(shard, cp, sub string) map[string]ddbtypes.AttributeValue {
		return kclItem(map[string]string{"leaseKey": shard, "checkpoint": cp, "checkpointSubSequenceNumber": sub, "leaseCounter": "3"})
	}
	dir := filepath.Join(t.TempDir(), "j")
	try := func(items ...map[string]ddbtypes.AttributeValue) (int, KCLPlan, string) {
		t.Helper()
		w.items = items
		code, out, errOut := w.run("import-kcl", "--kcl-table", "leases", "--stream", "s", "--dir", dir, "--json")
		var plan KCLPlan
		if code == ExitOK {
			if err := json.Unmarshal([]byte(out), &plan); err != nil {
				t.Fatalf("plan %q: %v", out, err)
			}
		}
		return code, plan, errOut
	}
	positions := func(plan KCLPlan) map[string]string {
		m := map[string]string{}
		for _, sh := range plan.Shards {
			m[sh.Shard] = sh.Position
		}
		return m
	}
	s0, s1 := "shardId-000000000000", "shardId-000000000001"
	for _, tt := range []struct {
		name     string
		items    []map[string]ddbtypes.AttributeValue
		want0    string
		warning  string
		want1    string
		notes1   string
		atFlag   bool
		errorSay string
	}{
		{name: "a whole record", items: []map[string]ddbtypes.AttributeValue{lease(s0, plain, "0"), lease(s1, "TRIM_HORIZON", "0")}, want0: "AFTER_SEQUENCE_NUMBER:" + plain, want1: "TRIM_HORIZON"},
		{name: "the last user record of an aggregate", items: []map[string]ddbtypes.AttributeValue{lease(s0, agg, "2"), lease(s1, "TRIM_HORIZON", "0")}, want0: "AFTER_SEQUENCE_NUMBER:" + agg, want1: "TRIM_HORIZON"},
		// Stored COMPLETED, an open shard's records would never be read
		// (and every Loader then stopped for a lineage of another stream).
		{name: "SHARD_END of a shard Kinesis lists open", items: []map[string]ddbtypes.AttributeValue{lease(s0, plain, "0"), lease(s1, "SHARD_END", "0")}, errorSay: s1 + " (lease " + s1 + ") are checkpointed at SHARD_END, but Kinesis lists them open"},
		{name: "inside an aggregate", items: []map[string]ddbtypes.AttributeValue{lease(s0, agg, "1"), lease(s1, high, "0")}, want0: "AT_SEQUENCE_NUMBER:" + agg, warning: "first 2 user records are delivered again", want1: "AFTER_SEQUENCE_NUMBER:" + high},
		{name: "LATEST", items: []map[string]ddbtypes.AttributeValue{lease(s0, "LATEST", "0"), lease(s1, "LATEST", "0")}, want0: "AFTER_SEQUENCE_NUMBER:" + agg, warning: "were at LATEST", want1: "AFTER_SEQUENCE_NUMBER:" + high},
		{name: "AT_TIMESTAMP without the time", items: []map[string]ddbtypes.AttributeValue{lease(s0, "AT_TIMESTAMP", "0"), lease(s1, "TRIM_HORIZON", "0")}, errorSay: "shard(s) " + s0 + " are at AT_TIMESTAMP"},
		{name: "a lease missing", items: []map[string]ddbtypes.AttributeValue{lease(s0, plain, "0")}, want0: "AFTER_SEQUENCE_NUMBER:" + plain, want1: "TRIM_HORIZON", notes1: "no lease"},
	} {
		code, plan, errOut := try(tt.items...)
		if tt.errorSay != "" {
			if code != ExitFailed || !strings.Contains(errOut, tt.errorSay) {
				t.Errorf("%s: = %d, %q; want 1 saying %q", tt.name, code, errOut, tt.errorSay)
			}
			continue
		}
		if code != ExitOK {
			t.Errorf("%s: = %d, %q", tt.name, code, errOut)
			continue
		}
		got := positions(plan)
		if got[s0] != tt.want0 || got[s1] != tt.want1 {
			t.Errorf("%s: positions %v, want %s and %s", tt.name, got, tt.want0, tt.want1)
		}
		if tt.warning != "" && !strings.Contains(strings.Join(plan.Warnings, "\n"), tt.warning) {
			t.Errorf("%s: warnings %q lack %q", tt.name, plan.Warnings, tt.warning)
		}
		if tt.notes1 != "" && !strings.Contains(plan.Shards[1].Note, tt.notes1) {
			t.Errorf("%s: shard 1's note %q lacks %q", tt.name, plan.Shards[1].Note, tt.notes1)
		}
		if plan.Applied {
			t.Errorf("%s: a dry run applied", tt.name)
		}
	}
	if ok, _ := hasJournal(dir); ok {
		t.Fatal("a dry run wrote a journal")
	}
	// --apply writes the plan.
	w.items = []map[string]ddbtypes.AttributeValue{lease(s0, agg, "1"), lease(s1, "TRIM_HORIZON", "0")}
	if code, out, errOut := w.run("import-kcl", "--kcl-table", "leases", "--stream", "s", "--dir", dir, "--apply"); code != ExitOK || !strings.Contains(out, "Imported 2 shard(s)") {
		t.Fatalf("--apply = %d, %q, %q", code, out, errOut)
	}
	p, _ := loadJournal(t, dir, "s")
	if !p[s0].Position.Equal(scan.AtSequence(agg)) || !p[s1].Position.Equal(scan.TrimHorizon()) || p[s0].State != kinesisload.StateActive {
		t.Errorf("imported: %+v", p)
	}
}

// A lease table that moves while import-kcl reads it (workers still
// run) is not imported.
func TestImportKCLRefusesWhileWorkersRun(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	calls := 0
	env := w.env()
	env.KCLItems = func(context.Context, *Options) ([]map[string]ddbtypes.AttributeValue, error) {
		calls++
		return []map[string]ddbtypes.AttributeValue{kclItem(map[string]string{"leaseKey": "shardId-000000000000", "checkpoint": "TRIM_HORIZON", "leaseCounter": string(rune('0' + calls))})}, nil
	}
	dir := filepath.Join(t.TempDir(), "j")
	var out, errOut bytes.Buffer
	code := Run(context.Background(), env, []string{"import-kcl", "--kcl-table", "leases", "--stream", "s", "--dir", dir, "--apply"}, &out, &errOut)
	if code != ExitFailed || !strings.Contains(errOut.String(), "KCL workers still run") {
		t.Errorf("import of a moving lease table = %d, %q", code, errOut.String())
	}
	if ok, _ := hasJournal(dir); ok {
		t.Error("the refused import wrote a journal")
	}
}

// rewind --to TIME refuses to move a shard forward past records it has
// not read (a shard behind, as one stuck on a failing Sink is): the
// operator asked to read again since TIME, and those records would never
// be read. It said "rewound" and moved the shard on. With --forward it
// does so on purpose, and says so.
func TestRewindToATimeRefusesToPassOverRecordsNotRead(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	r1 := w.put("s", true, []byte("r1"))
	w.clock.Advance(30 * time.Minute)
	w.put("s", true, []byte("r2")) // not read, arrived before the time
	w.clock.Advance(30 * time.Minute)
	w.put("s", true, []byte("r3"))
	w.clock.Advance(time.Minute)
	const shard = "shardId-000000000000"
	dir := journalWith(t, "s", kinesisload.ShardProgress{ShardID: shard, State: kinesisload.StateActive, Position: scan.AfterSequence(r1)})
	at := t0.Add(45 * time.Minute).Format(time.RFC3339)
	code, _, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--to", at)
	if code != ExitFailed || !strings.Contains(errOut, shard) || !strings.Contains(errOut, "forward, past records not read yet") {
		t.Fatalf("rewind --to %s of a shard behind it = %d, %q; want 1 naming the shard it would move forward", at, code, errOut)
	}
	if p, _ := loadJournal(t, dir, "s"); !p[shard].Position.Equal(scan.AfterSequence(r1)) {
		t.Fatalf("the refused rewind moved %s to %v", shard, p[shard].Position)
	}
	code, out, errOut := w.run("rewind", "--dir", dir, "--stream", "s", "--to", at, "--forward")
	if code != ExitOK || !strings.Contains(out, "warning: --to") {
		t.Fatalf("rewind --forward = %d, %q, %q; want 0 with a warning", code, out, errOut)
	}
	if p, _ := loadJournal(t, dir, "s"); p[shard].Position.Kind != scan.KindAtTimestamp {
		t.Errorf("after rewind --forward %s is at %v, want AT_TIMESTAMP", shard, p[shard].Position)
	}
}

// emptyPages answers the first n GetRecords calls with no records while
// MillisBehindLatest says the shard is far behind, as Kinesis does over a
// gap in a shard.
type emptyPages struct {
	*kinesistest.Fake
	n      int
	behind int64
}

func (e *emptyPages) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if e.n > 0 {
		e.n--
		return &kinesis.GetRecordsOutput{NextShardIterator: in.ShardIterator, MillisBehindLatest: &e.behind}, nil
	}
	return e.Fake.GetRecords(ctx, in, o...)
}

// status does not call a shard healthy when it could not see its lag: a
// shard whose lag it could not measure (status shares the shard's reads
// with the Loader: throttled) is "unknown", and one whose first pages are
// empty while Kinesis says it is hours behind is stuck. Both were "ok",
// with exit status 0. Found by a review.
func TestStatusCallsNoShardHealthyWhoseLagItDidNotSee(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		client     func(w *world) scan.Client
	}{
		{"throttled", HealthUnknown, func(w *world) scan.Client {
			w.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}})
			return w.fake
		}},
		{"empty pages, hours behind", HealthStuck, func(w *world) scan.Client {
			return &emptyPages{Fake: w.fake, n: 5, behind: (5 * time.Hour).Milliseconds()}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			w.put("s", true, []byte("x"))
			dir := journalWith(t, "s", kinesisload.ShardProgress{ShardID: "shardId-000000000000", State: kinesisload.StateActive, Position: scan.TrimHorizon()})
			j, err := journal.Open(dir, journal.DefaultConfig()) // a Loader holds it
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			w.clock.Advance(5 * time.Hour)
			env := w.env()
			client := tt.client(w)
			env.Kinesis = func(context.Context, *Options) (scan.Client, error) { return client, nil }
			var out, errOut strings.Builder
			code := Run(context.Background(), env, []string{"status", "--dir", dir, "--json"}, &out, &errOut)
			var rep StatusReport
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("status output %q: %v", out.String(), err)
			}
			if sh := rep.Streams[0].Shards[0]; code != ExitUnhealthy || sh.Health != tt.want {
				t.Errorf("status = %d, shard health %q (%s); want %d and %q", code, sh.Health, sh.Why, ExitUnhealthy, tt.want)
			}
		})
	}
}

// initialisedFleet joins host "a" to stream "s" of w's table on w's clock
// (rounds run by hand), initialises the stream with shards, and leaves at
// the end of the test.
func initialisedFleet(t *testing.T, w *world, shards []kinesisload.ShardProgress) (*fleet.Coordinator, kinesisload.Membership) {
	t.Helper()
	ctx := context.Background()
	c, err := fleet.New(w.table, fleet.Config{HostID: "a", ManualRounds: true, Clock: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(ctx) })
	if err := m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", shards)
	}); err != nil {
		t.Fatal(err)
	}
	return c, m
}
