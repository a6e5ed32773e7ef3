package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// TestMain is goleak.VerifyTestMain, and removes the journal the tests
// share.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runInspect runs the program with args.
func runInspect(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// loaderJournal is a journal directory written by a real Loader, and what
// the test knows it must hold.
type loaderJournal struct {
	dir string
	// childSeq is the sequence number of the one record of the first
	// child, delivered and committed.
	childSeq string
	// identity is the stream's identity, as String prints it.
	identity string
}

var (
	buildOnce sync.Once
	built     loaderJournal
	buildErr  error
)

// loaderDir returns a fresh copy of the journal a real Loader wrote (built
// once per test binary): stream "orders", one shard with three records,
// split into two children; the parent is read to its end and COMPLETED,
// and one record of the first child is delivered and committed. The Loader
// is closed gracefully.
func loaderDir(t *testing.T) loaderJournal {
	t.Helper()
	buildOnce.Do(func() { built, buildErr = buildLoaderJournal() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	dir := filepath.Join(t.TempDir(), "journal")
	copyDir(t, built.dir, dir)
	return loaderJournal{dir: dir, childSeq: built.childSeq, identity: built.identity}
}

func buildLoaderJournal() (loaderJournal, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fake := kinesistest.New()
	const stream = "orders"
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		return loaderJournal{}, err
	}
	for i := 1; i <= 3; i++ {
		if _, err := fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte(fmt.Sprint(i))}); err != nil {
			return loaderJournal{}, err
		}
	}
	dir, err := os.MkdirTemp("", "tidemark-inspect-test-")
	if err != nil {
		return loaderJournal{}, err
	}
	got := make(chan string, 16) // "shard seq" of every record delivered
	sink := kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		for _, r := range b.Records {
			got <- b.ShardID + " " + r.SequenceNumber
		}
		return nil
	})
	cfg := kinesisload.DefaultConfig()
	cfg.Stream, cfg.Sink, cfg.Dir = stream, sink, dir
	cfg.StartPosition = scan.TrimHorizon()
	cfg.IdleWait = 200 * time.Millisecond
	l, err := kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return loaderJournal{}, err
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	stop := func() error {
		_ = l.Close(ctx)
		if err := <-done; !errors.Is(err, kinesisload.ErrClosed) {
			return fmt.Errorf("Run: %v", err)
		}
		return nil
	}
	wait := func(want string) error {
		for {
			select {
			case g := <-got:
				if strings.HasPrefix(g, want) {
					return nil
				}
			case err := <-done:
				return fmt.Errorf("Run returned early: %v", err)
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", want, ctx.Err())
			}
		}
	}
	fail := func(err error) (loaderJournal, error) {
		_ = stop()
		return loaderJournal{}, err
	}
	for range 3 { // the parent's three records
		select {
		case <-got:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	mid := new(big.Int).Lsh(big.NewInt(1), 127).String()
	if _, err := fake.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String(mid)}); err != nil {
		return fail(err)
	}
	put, err := fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("0"), Data: []byte("child")})
	if err != nil {
		return fail(err)
	}
	if id := aws.ToString(put.ShardId); id != "shardId-000000000001" {
		return fail(fmt.Errorf("the record went to %s, want shardId-000000000001", id))
	}
	childSeq := aws.ToString(put.SequenceNumber)
	if err := wait("shardId-000000000001 " + childSeq); err != nil {
		return fail(err)
	}
	if err := stop(); err != nil {
		return loaderJournal{}, err
	}
	sum, err := fake.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		return loaderJournal{}, err
	}
	id := kinesisload.StreamIdentity{ARN: *sum.StreamDescriptionSummary.StreamARN, Created: *sum.StreamDescriptionSummary.StreamCreationTimestamp}
	return loaderJournal{dir: dir, childSeq: childSeq, identity: id.String()}, nil
}

// copyDir copies the regular files of src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// section returns the lines of out from the one starting with start up to
// the next blank line.
func section(out, start string) string {
	i := strings.Index(out, start)
	if i < 0 {
		return ""
	}
	s := out[i:]
	if j := strings.Index(s, "\n\n"); j >= 0 {
		s = s[:j+1]
	}
	return s
}

// TestLoaderJournal inspects a journal a real Loader wrote and checks the
// shards, their states, positions and lineage exactly.
func TestLoaderJournal(t *testing.T) {
	lj := loaderDir(t)
	code, out, errOut := runInspect("-dir", lj.dir, "-records", "2")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, errOut)
	}
	want := "Stream orders: 3 shards (2 ACTIVE, 1 COMPLETED)\n" +
		"  identity: " + lj.identity + "\n" +
		"  shardId-000000000000     COMPLETED       SHARD_END\n" +
		"  ├─ shardId-000000000001  ACTIVE          AFTER_SEQUENCE_NUMBER:" + lj.childSeq + "  parents: shardId-000000000000\n" +
		"  └─ shardId-000000000002  ACTIVE          TRIM_HORIZON  parents: shardId-000000000000\n"
	if diff := cmp.Diff(want, section(out, "Stream orders")); diff != "" {
		t.Errorf("stream section (-want +got):\n%s\nwhole output:\n%s", diff, out)
	}

	// The last two records, by index, and the files.
	last := lastIndex(t, lj.dir)
	recs := regexp.MustCompile(`(?m)^  #(\d+)  stream orders$`).FindAllStringSubmatch(out, -1)
	var idx []string
	for _, m := range recs {
		idx = append(idx, m[1])
	}
	if diff := cmp.Diff([]string{strconv.FormatUint(last-1, 10), strconv.FormatUint(last, 10)}, idx); diff != "" {
		t.Errorf("records printed with -records 2 (-want +got):\n%s\n%s", diff, out)
	}
	if !strings.Contains(out, fmt.Sprintf("records: %d records (1 to %d)", last, last)) {
		t.Errorf("output does not say the journal holds records 1 to %d:\n%s", last, out)
	}
	segs, _ := filepath.Glob(filepath.Join(lj.dir, "*.seg"))
	if len(segs) != 1 || !strings.Contains(out, "files:   1 segment ("+filepath.Base(segs[0])) {
		t.Errorf("output does not list the segment %v:\n%s", segs, out)
	}
}

// lastIndex replays dir and returns its last record index.
func lastIndex(t *testing.T, dir string) uint64 {
	t.Helper()
	j, err := journal.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var last uint64
	if err := j.Replay(context.Background(), func(e journal.Entry) error { last = e.Index; return nil }); err != nil {
		t.Fatal(err)
	}
	return last
}

// TestHandMadeStore checks the whole output for a store with a snapshot,
// records after it, two streams and a merge.
func TestHandMadeStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	store, err := kinesisload.NewJournalStore(ctx, j, 3) // a snapshot after the third save
	if err != nil {
		t.Fatal(err)
	}
	saves := []struct {
		stream  string
		updates []kinesisload.ShardProgress
	}{
		{"m", []kinesisload.ShardProgress{
			{ShardID: "p1", State: kinesisload.StateCompleted, Position: scan.ShardEnd()},
			{ShardID: "p2", State: kinesisload.StateCompleted, Position: scan.ShardEnd()},
		}},
		{"m", []kinesisload.ShardProgress{{ShardID: "c", Parents: []string{"p1", "p2"}, State: kinesisload.StateActive, Position: scan.TrimHorizon()}}},
		{"m", []kinesisload.ShardProgress{{ShardID: "c", Position: scan.AfterSequence("42")}}},
		{"a", []kinesisload.ShardProgress{{ShardID: "s0", State: kinesisload.StateDiscovered, Position: scan.Latest()}}},
	}
	for _, s := range saves {
		if err := store.Save(ctx, s.stream, s.updates); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	snaps, _ := filepath.Glob(filepath.Join(dir, "*.snap"))
	if len(segs) != 1 || len(snaps) != 1 {
		t.Fatalf("the store left segments %v and snapshots %v, want one of each", segs, snaps)
	}
	size := func(p string) int64 {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}

	code, out, errOut := runInspect("-dir", dir, "-records", "5")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, errOut)
	}
	want := fmt.Sprintf("Journal %s\n", dir) +
		fmt.Sprintf("  files:   1 segment (%s, %d bytes); 1 snapshot (0000000000000003.snap, %d bytes)\n", filepath.Base(segs[0]), size(segs[0]), size(snaps[0])) +
		"  records: a snapshot covering 1 to 3, then 1 record (4)\n" +
		"\n" +
		"Stream a: 1 shard (1 DISCOVERED)\n" +
		"  identity: unknown (stored before identities were journaled; the next Run adopts the stream's)\n" +
		"  s0  DISCOVERED      LATEST\n" +
		"\n" +
		"Stream m: 3 shards (1 ACTIVE, 2 COMPLETED)\n" +
		"  identity: unknown (stored before identities were journaled; the next Run adopts the stream's)\n" +
		"  p1    COMPLETED       SHARD_END\n" +
		"  └─ c  ACTIVE          AFTER_SEQUENCE_NUMBER:42  parents: p1, p2\n" +
		"  p2    COMPLETED       SHARD_END\n" +
		"\n" +
		"Last journal record after the snapshot (each is one durable Save: the updates it merged):\n" +
		"  #4  stream a\n" +
		"        s0  DISCOVERED  LATEST\n"
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// TestStartedOverStream: a stream started over after it was re-created
// shows its new identity and progress, and the old progress archived under
// the old identity; the records that journaled them are decoded.
func TestStartedOverStream(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	store, err := kinesisload.NewJournalStore(ctx, j, 0)
	if err != nil {
		t.Fatal(err)
	}
	const arn = "arn:aws:kinesis:us-east-1:000000000000:stream/orders"
	oldID := kinesisload.StreamIdentity{ARN: arn, Created: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	newID := kinesisload.StreamIdentity{ARN: arn, Created: time.Date(2026, 3, 2, 8, 30, 0, 500e6, time.UTC)}
	steps := []func() error{
		func() error { return store.SetIdentity(ctx, "orders", oldID) },
		func() error {
			return store.Save(ctx, "orders", []kinesisload.ShardProgress{{ShardID: "shardId-000000000000", State: kinesisload.StateCompleted, Position: scan.ShardEnd()}})
		},
		func() error { return store.StartOver(ctx, "orders", newID) },
		func() error {
			return store.Save(ctx, "orders", []kinesisload.ShardProgress{{ShardID: "shardId-000000000000", State: kinesisload.StateActive, Position: scan.AfterSequence("7")}})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInspect("-dir", dir, "-records", "4")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, errOut)
	}
	want := "Stream orders: 1 shard (1 ACTIVE)\n" +
		"  identity: " + arn + " created 2026-03-02T08:30:00.5Z\n" +
		"  shardId-000000000000  ACTIVE          AFTER_SEQUENCE_NUMBER:7\n" +
		"  archived 1: the progress of " + arn + " created 2026-03-01T12:00:00Z, 1 shard (1 COMPLETED), when it was replaced by " + arn + " created 2026-03-02T08:30:00.5Z\n" +
		"    shardId-000000000000  COMPLETED       SHARD_END\n"
	if diff := cmp.Diff(want, section(out, "Stream orders")); diff != "" {
		t.Errorf("stream section (-want +got):\n%s\nwhole output:\n%s", diff, out)
	}
	for _, line := range []string{
		"        identity: " + arn + " created 2026-03-01T12:00:00Z\n",
		"        started over: the progress was archived; the stream is now " + arn + " created 2026-03-02T08:30:00.5Z\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("the records do not show %q:\n%s", line, out)
		}
	}
}

// segmentOf returns the only segment of dir.
func segmentOf(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments of %s: %v, %v; want exactly one", dir, segs, err)
	}
	return segs[0]
}

// listing returns every file of dir with its contents.
func listing(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}

// TestCorruptJournal flips a byte in the middle of a segment: inspect
// reports the file, offset and reason and changes nothing; with -repair it
// cuts the journal, reports the cut and its backup, and prints the state.
func TestCorruptJournal(t *testing.T) {
	lj := loaderDir(t)
	seg := segmentOf(t, lj.dir)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// A letter of a record's JSON in the middle of the file: covered by a
	// CRC, and well before the last record (not a torn tail).
	at := len(data) / 2
	for at < len(data) && !(data[at] >= 'a' && data[at] <= 'z') {
		at++
	}
	if at == len(data) {
		t.Fatal("no letter after the middle of the segment")
	}
	data[at] ^= 0x20
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := listing(t, lj.dir)

	code, out, errOut := runInspect("-dir", lj.dir)
	if code != 1 {
		t.Fatalf("exit status %d, want 1; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`(?m)^  file:   (.*)\n  offset: (\d+)\n  reason: (.+)$`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("stderr does not give file, offset and reason:\n%s", errOut)
	}
	offset, _ := strconv.Atoi(m[2])
	if m[1] != seg || offset > at || offset < 8 {
		t.Errorf("reported %s at offset %d, want %s at an offset in 8..%d (the flipped byte)", m[1], offset, seg, at)
	}
	if !strings.Contains(errOut, "inspect -dir "+lj.dir+" -repair") || !strings.Contains(errOut, "Nothing was changed") {
		t.Errorf("stderr does not say how to repair:\n%s", errOut)
	}
	if out != "" {
		t.Errorf("stdout is not empty:\n%s", out)
	}
	if diff := cmp.Diff(before, listing(t, lj.dir)); diff != "" {
		t.Errorf("inspect changed the directory (-before +after):\n%s", diff)
	}

	code, out, errOut = runInspect("-dir", lj.dir, "-repair", "-records", "0")
	if code != 0 {
		t.Fatalf("with -repair: exit status %d, want 0; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	backups, _ := filepath.Glob(seg + ".corrupt-*")
	if len(backups) != 1 {
		t.Fatalf("backups of %s: %v, want one", seg, backups)
	}
	// The cut is at the start of the write (a batch of records) that holds
	// the damaged record: at the damage, or before it.
	cm := regexp.MustCompile(`(?m)^     what:   truncated at offset (\d+) `).FindStringSubmatch(out)
	if cm == nil {
		t.Fatalf("the repair report does not say where it cut:\n%s", out)
	}
	cut, _ := strconv.Atoi(cm[1])
	if cut > offset || cut < 8 {
		t.Errorf("cut at offset %d, want at the damage (%d) or before it, after the segment header", cut, offset)
	}
	wantRepair := fmt.Sprintf("Repair of %s:\n", lj.dir) +
		fmt.Sprintf("  1. %s\n", seg) +
		fmt.Sprintf("     why:    damage at offset %d of %s: %s\n", offset, seg, m[3]) +
		fmt.Sprintf("     what:   truncated at offset %d (%d bytes cut)\n", cut, len(data)-cut) +
		fmt.Sprintf("     backup: %s\n", backups[0])
	if got := section(out, "Repair of"); !strings.HasPrefix(got, wantRepair) {
		t.Errorf("repair report does not start as expected (-want +got):\n%s", cmp.Diff(wantRepair, got))
	}
	if got, err := os.ReadFile(backups[0]); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the backup %s does not hold the damaged segment (err %v)", backups[0], err)
	}
	if st, err := os.Stat(seg); err != nil || st.Size() != int64(cut) {
		t.Errorf("the segment after repair: %v, %v; want %d bytes", st, err, cut)
	}
	if !strings.Contains(out, "Stream orders: ") || strings.Contains(out, "Last ") {
		t.Errorf("after the repair, the state is not printed (or records are, despite -records 0):\n%s", out)
	}

	// The repaired journal opens without -repair.
	if code, _, errOut := runInspect("-dir", lj.dir); code != 0 {
		t.Errorf("after the repair: exit status %d, stderr:\n%s", code, errOut)
	}
}

// TestLockedDirectory holds the journal open, as a running Loader does:
// inspect, with or without -repair, says the directory is locked and
// changes nothing.
func TestLockedDirectory(t *testing.T) {
	lj := loaderDir(t)
	j, err := journal.Open(lj.dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before := listing(t, lj.dir)
	for _, args := range [][]string{{"-dir", lj.dir}, {"-dir", lj.dir, "-repair"}} {
		code, out, errOut := runInspect(args...)
		if code != 1 {
			t.Errorf("%q: exit status %d, want 1", args, code)
		}
		if want := lj.dir + " is locked: a running Loader"; !strings.Contains(errOut, want) || !strings.Contains(errOut, journal.ErrLocked.Error()) {
			t.Errorf("%q: stderr %q does not contain %q and %q", args, errOut, want, journal.ErrLocked)
		}
		if out != "" {
			t.Errorf("%q: stdout is not empty:\n%s", args, out)
		}
	}
	if diff := cmp.Diff(before, listing(t, lj.dir)); diff != "" {
		t.Errorf("inspect changed the directory (-before +after):\n%s", diff)
	}
}

// TestNoJournal checks that a directory without a journal is reported and
// left empty (journal.Open would create one).
func TestNoJournal(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runInspect("-dir", dir)
	if code != 1 || !strings.Contains(errOut, dir+" holds no journal") {
		t.Errorf("exit status %d, stderr %q; want 1 and %q", code, errOut, dir+" holds no journal")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("inspect wrote into %s: %v", dir, entries)
	}
	missing := filepath.Join(dir, "missing")
	if code, _, errOut := runInspect("-dir", missing); code != 1 || !strings.Contains(errOut, missing) {
		t.Errorf("missing directory: exit status %d, stderr %q; want 1 and the path", code, errOut)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("inspect created %s", missing)
	}
}

// TestBadFlags checks the usage errors.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-dir is required"},
		{[]string{"-dir", "x", "-records", "-1"}, "-records -1"},
		{[]string{"-dir", "x", "y"}, `unexpected argument "y"`},
	} {
		code, _, errOut := runInspect(tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit status %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
