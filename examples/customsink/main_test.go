package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 123e6, time.UTC)

// rec makes a record with sequence number seq (a small decimal).
func rec(seq int, data string) kinesisload.Record {
	return kinesisload.Record{
		Data:           []byte(data),
		PartitionKey:   fmt.Sprintf("pk-%d", seq),
		SequenceNumber: fmt.Sprintf("4960%04d", seq),
		ArrivalTime:    t0.Add(time.Duration(seq) * time.Millisecond),
	}
}

func batch(shard string, seqs ...int) kinesisload.Batch {
	b := kinesisload.Batch{Stream: "orders", ShardID: shard}
	for _, s := range seqs {
		b.Records = append(b.Records, rec(s, fmt.Sprintf("r%d", s)))
	}
	return b
}

// line is the Line that rec(seq, "r<seq>") of shard becomes.
func line(shard string, seq int) Line {
	r := rec(seq, fmt.Sprintf("r%d", seq))
	return Line{Stream: "orders", Shard: shard, Seq: r.SequenceNumber, PartitionKey: r.PartitionKey,
		Arrival: r.ArrivalTime.Format(arrivalFormat), Data: r.Data}
}

func lines(shard string, seqs ...int) []Line {
	var out []Line
	for _, s := range seqs {
		out = append(out, line(shard, s))
	}
	return out
}

// dirContents returns, per shard, every line of every complete file of
// dir, and the names of all entries of dir.
func dirContents(t *testing.T, dir string) (map[string][]Line, []string) {
	t.Helper()
	files, err := ListFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]Line{}
	for _, f := range files {
		ls, err := ReadLines(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		got[f.Shard] = append(got[f.Shard], ls...)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return got, names
}

func mustName(t *testing.T, shard string, first, last int) string {
	t.Helper()
	n, err := FileName("orders", shard, fmt.Sprintf("4960%04d", first), fmt.Sprintf("4960%04d", last))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFileSinkWritesLines checks the exact bytes of a file and the lines
// and names of every file.
func TestFileSinkWritesLines(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileSink(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := kinesisload.Batch{Stream: "orders", ShardID: "shardId-000000000000", Records: []kinesisload.Record{
		{Data: []byte("<a&b>"), PartitionKey: "k1", SequenceNumber: "49600001", ArrivalTime: t0},
		{Data: []byte{0xff, 0x00, 0x01}, PartitionKey: "k2", SequenceNumber: "49600002", SubSequenceNumber: 3,
			ArrivalTime: time.Date(2026, 11, 30, 9, 0, 0, 5e6, time.FixedZone("X", 3600))},
	}}
	if err := s.Deliver(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, batch("shardId-000000000001", 7, 8, 9)); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, batch("shardId-000000000001", 10)); err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(filepath.Join(dir, "orders.shardId-000000000000.49600001-49600002.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"stream":"orders","shard":"shardId-000000000000","seq":"49600001","subseq":0,"partition_key":"k1","arrival":"2026-11-30T08:00:00.123Z","data":"PGEmYj4="}` + "\n" +
		`{"stream":"orders","shard":"shardId-000000000000","seq":"49600002","subseq":3,"partition_key":"k2","arrival":"2026-11-30T08:00:00.005Z","data":"/wAB"}` + "\n"
	if diff := cmp.Diff(want, string(raw)); diff != "" {
		t.Errorf("file bytes (-want +got):\n%s", diff)
	}

	got, names := dirContents(t, dir)
	wantNames := []string{
		"orders.shardId-000000000000.49600001-49600002.ndjson",
		mustName(t, "shardId-000000000001", 7, 9),
		mustName(t, "shardId-000000000001", 10, 10),
	}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("directory (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(lines("shardId-000000000001", 7, 8, 9, 10), got["shardId-000000000001"]); diff != "" {
		t.Errorf("shard 1 lines (-want +got):\n%s", diff)
	}
	wantData := [][]byte{[]byte("<a&b>"), {0xff, 0x00, 0x01}}
	var gotData [][]byte
	for _, l := range got["shardId-000000000000"] {
		gotData = append(gotData, l.Data)
	}
	if diff := cmp.Diff(wantData, gotData); diff != "" {
		t.Errorf("shard 0 data after a round trip (-want +got):\n%s", diff)
	}
}

// TestFileSinkRedelivery checks that delivering records again, as the
// Loader does after a failed Deliver or a crash before its commit, never
// duplicates a line, with the same sink and with a new one on the same
// directory (a restart).
func TestFileSinkRedelivery(t *testing.T) {
	const sh = "shardId-000000000000"
	for _, tc := range []struct {
		name      string
		first     []kinesisload.Batch
		restart   bool
		again     []kinesisload.Batch
		wantLines []Line
		wantFiles []string
	}{
		{
			name:      "same batch, same sink",
			first:     []kinesisload.Batch{batch(sh, 1, 2, 3)},
			again:     []kinesisload.Batch{batch(sh, 1, 2, 3)},
			wantLines: lines(sh, 1, 2, 3),
			wantFiles: []string{mustName(t, sh, 1, 3)},
		},
		{
			name:      "same batch after a restart",
			first:     []kinesisload.Batch{batch(sh, 1, 2, 3)},
			restart:   true,
			again:     []kinesisload.Batch{batch(sh, 1, 2, 3)},
			wantLines: lines(sh, 1, 2, 3),
			wantFiles: []string{mustName(t, sh, 1, 3)},
		},
		{
			// After a crash the Loader reads again from its last
			// commit and may get a longer page: other boundaries.
			name:      "longer batch after a restart",
			first:     []kinesisload.Batch{batch(sh, 1, 2), batch(sh, 3, 4)},
			restart:   true,
			again:     []kinesisload.Batch{batch(sh, 3, 4, 5, 6)},
			wantLines: lines(sh, 1, 2, 3, 4, 5, 6),
			wantFiles: []string{mustName(t, sh, 1, 2), mustName(t, sh, 3, 4), mustName(t, sh, 5, 6)},
		},
		{
			name:      "shorter batch after a restart",
			first:     []kinesisload.Batch{batch(sh, 1, 2, 3, 4)},
			restart:   true,
			again:     []kinesisload.Batch{batch(sh, 1, 2), batch(sh, 3, 4, 5)},
			wantLines: lines(sh, 1, 2, 3, 4, 5),
			wantFiles: []string{mustName(t, sh, 1, 4), mustName(t, sh, 5, 5)},
		},
		{
			name:      "other shards are independent",
			first:     []kinesisload.Batch{batch(sh, 1, 2), batch("shardId-000000000001", 5)},
			restart:   true,
			again:     []kinesisload.Batch{batch(sh, 1, 2, 3)},
			wantLines: lines(sh, 1, 2, 3),
			wantFiles: []string{mustName(t, sh, 1, 2), mustName(t, sh, 3, 3), mustName(t, "shardId-000000000001", 5, 5)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s, err := NewFileSink(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range tc.first {
				if err := s.Deliver(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			if tc.restart {
				if s, err = NewFileSink(dir); err != nil {
					t.Fatal(err)
				}
			}
			for _, b := range tc.again {
				if err := s.Deliver(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			got, names := dirContents(t, dir)
			if diff := cmp.Diff(tc.wantLines, got[sh]); diff != "" {
				t.Errorf("lines of %s (-want +got):\n%s", sh, diff)
			}
			slices.Sort(tc.wantFiles)
			if diff := cmp.Diff(tc.wantFiles, names); diff != "" {
				t.Errorf("directory (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFileSinkFailures checks that a Deliver that fails leaves no partial
// file under a final name and no temporary file, returns its error, and
// that delivering the batch again stores every line once.
func TestFileSinkFailures(t *testing.T) {
	const sh = "shardId-000000000000"
	errInjected := errors.New("injected")
	for _, tc := range []struct {
		name string
		// fail sets up the failure on s; ctx is the Deliver context.
		fail func(s *FileSink, cancel context.CancelFunc)
		// visible is the final file the failed Deliver leaves visible.
		visible []string
	}{
		{
			name: "rename fails",
			fail: func(s *FileSink, _ context.CancelFunc) {
				s.ops.rename = func(string, string) error { return errInjected }
			},
		},
		{
			// The file is complete but its name may not be durable:
			// Deliver fails and the retry overwrites the same name.
			name: "directory sync fails after the rename",
			fail: func(s *FileSink, _ context.CancelFunc) {
				s.ops.syncDir = func(string) error { return errInjected }
			},
			visible: []string{mustName(t, sh, 3, 4)},
		},
		{
			name: "context cancelled before the rename",
			fail: func(s *FileSink, cancel context.CancelFunc) {
				s.ops.rename = func(o, n string) error { return errInjected } // must not be reached
				cancel()
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := NewFileSink(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Deliver(context.Background(), batch(sh, 1, 2)); err != nil {
				t.Fatal(err)
			}
			good := s.ops
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc.fail(s, cancel)
			err = s.Deliver(ctx, batch(sh, 3, 4))
			if err == nil {
				t.Fatal("Deliver returned nil, want the injected error")
			}
			if !errors.Is(err, errInjected) && !errors.Is(err, context.Canceled) {
				t.Fatalf("Deliver: %v, want the injected error or context.Canceled", err)
			}
			if !strings.Contains(err.Error(), sh) {
				t.Errorf("Deliver error %q does not name the shard %s", err, sh)
			}
			_, names := dirContents(t, dir)
			wantNames := append([]string{mustName(t, sh, 1, 2)}, tc.visible...)
			slices.Sort(wantNames)
			if diff := cmp.Diff(wantNames, names); diff != "" {
				t.Errorf("directory after the failure (-want +got):\n%s", diff)
			}
			if last, _ := s.LastStored("orders", sh); last != rec(2, "").SequenceNumber {
				t.Errorf("LastStored after the failure = %s, want %s (record 2)", last, rec(2, "").SequenceNumber)
			}

			s.ops = good
			if err := s.Deliver(context.Background(), batch(sh, 3, 4)); err != nil {
				t.Fatalf("Deliver again: %v", err)
			}
			got, names := dirContents(t, dir)
			if diff := cmp.Diff(lines(sh, 1, 2, 3, 4), got[sh]); diff != "" {
				t.Errorf("lines after the retry (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{mustName(t, sh, 1, 2), mustName(t, sh, 3, 4)}, names); diff != "" {
				t.Errorf("directory after the retry (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFileNameRoundTrip checks that names parse back, that odd IDs are
// refused, and that temporary names never match.
func TestFileNameRoundTrip(t *testing.T) {
	for _, tc := range []struct{ stream, shard string }{
		{"orders", "shardId-000000000000"},
		{"a.b.c", "shardId-000000000001"},
		{"x-y_z.1", "s"},
	} {
		name, err := FileName(tc.stream, tc.shard, "1", "22")
		if err != nil {
			t.Fatal(err)
		}
		f, ok := ParseFileName(name)
		want := File{Path: name, Stream: tc.stream, Shard: tc.shard, First: "1", Last: "22"}
		if diff := cmp.Diff(want, f); !ok || diff != "" {
			t.Errorf("ParseFileName(%q) ok=%v (-want +got):\n%s", name, ok, diff)
		}
		if _, ok := ParseFileName("." + name + ".tmp-12345"); ok {
			t.Errorf("the temporary name of %q matches the final pattern", name)
		}
	}
	for _, tc := range []struct{ stream, shard, first, last, wantErr string }{
		{"or/ders", "s", "1", "2", `stream name "or/ders"`},
		{"orders", "shard.1", "1", "2", `shard ID "shard.1"`},
		{"orders", "s", "1x", "2", `sequence number "1x"`},
	} {
		_, err := FileName(tc.stream, tc.shard, tc.first, tc.last)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("FileName(%q, %q, %q, %q) = %v, want an error containing %s", tc.stream, tc.shard, tc.first, tc.last, err, tc.wantErr)
		}
	}
}

// readShards reads every record of every shard of stream from Kinesis,
// the truth the files are checked against.
func readShards(t *testing.T, api kinesistest.API, stream string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	shards, err := api.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, sh := range shards.Shards {
		id := aws.ToString(sh.ShardId)
		it, err := api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		iter := it.ShardIterator
		for iter != nil {
			page, err := api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			var throttled *types.ProvisionedThroughputExceededException
			if errors.As(err, &throttled) {
				time.Sleep(200 * time.Millisecond) // the fake keeps the real 5 calls/s per shard
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Records {
				out[id] = append(out[id], aws.ToString(r.SequenceNumber)+" "+string(r.Data))
			}
			if len(page.Records) == 0 && aws.ToInt64(page.MillisBehindLatest) == 0 {
				break
			}
			iter = page.NextShardIterator
		}
	}
	return out
}

// fileRecords returns, per shard, "seq data" of every line in dir.
func fileRecords(t *testing.T, dir string) map[string][]string {
	t.Helper()
	got, _ := dirContents(t, dir)
	out := map[string][]string{}
	for shard, ls := range got {
		for _, l := range ls {
			out[shard] = append(out[shard], l.Seq+" "+string(l.Data))
		}
	}
	return out
}

// TestEndToEndWithInjectedFailures runs the demo over the in-memory
// Kinesis with a failure injected on every second batch after it was
// stored, and checks that the files hold every record of the stream
// exactly once, in shard order.
func TestEndToEndWithInjectedFailures(t *testing.T) {
	t.Parallel()
	fake := kinesistest.New()
	out := t.TempDir()
	var buf bytes.Buffer
	o := options{out: out, dir: t.TempDir(), stream: "e2e", start: scan.TrimHorizon(),
		records: 16, failEvery: 2, closeTimeout: 10 * time.Second}
	res, err := demo(context.Background(), o, fake, &printer{w: &buf})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, buf.String())
	}
	if !errors.Is(res.runErr, kinesisload.ErrClosed) {
		t.Errorf("Run returned %v, want ErrClosed", res.runErr)
	}
	if n := strings.Count(buf.String(), "injected failure"); n == 0 {
		t.Fatalf("no failure was injected, so the test shows nothing; output:\n%s", buf.String())
	}
	want := readShards(t, fake, "e2e")
	if len(want) != 2 || len(want["shardId-000000000000"])+len(want["shardId-000000000001"]) != len(res.produced) {
		t.Fatalf("the stream holds %v, want the %d records produced in 2 shards", want, len(res.produced))
	}
	if diff := cmp.Diff(want, fileRecords(t, out)); diff != "" {
		t.Errorf("records in the files (-want Kinesis +got files):\n%s", diff)
	}
	if !strings.Contains(buf.String(), fmt.Sprintf("Check: all %d records written are stored", len(res.produced))) {
		t.Errorf("the demo's own check is not reported:\n%s", buf.String())
	}
}

// TestCrashBeforeCommit stops a Loader hard after its Sink stored a batch
// and before the Loader committed it; a new Loader on the same journal, with
// a new FileSink on the same directory, reads those records again (in a
// longer page) and the files still hold every record exactly once.
func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := kinesistest.New()
	const stream = "crash"
	if _, err := fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	put := func(from, to int) {
		for i := from; i <= to; i++ {
			if _, err := fake.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte(fmt.Sprintf("r%d", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, dir := t.TempDir(), t.TempDir()
	newLoader := func(sink kinesisload.Sink) *kinesisload.Loader {
		cfg := kinesisload.DefaultConfig()
		cfg.Stream, cfg.Sink, cfg.Dir, cfg.StartPosition = stream, sink, dir, scan.TrimHorizon()
		cfg.IdleWait = 200 * time.Millisecond
		l, err := kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	put(1, 3)

	// The first Loader's Sink stores the batch, then hangs until the
	// Loader is stopped hard: the batch is never committed.
	fs1, err := NewFileSink(out)
	if err != nil {
		t.Fatal(err)
	}
	stored := make(chan int, 1)
	hang := kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		if err := fs1.Deliver(ctx, b); err != nil {
			return err
		}
		stored <- len(b.Records)
		<-ctx.Done()
		return ctx.Err()
	})
	l1 := newLoader(hang)
	runCtx, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l1.Run(runCtx) }()
	if n := <-stored; n != 3 {
		t.Fatalf("the first batch has %d records, want 3", n)
	}
	kill()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Run: %v, want context.Canceled", err)
	}
	put(4, 6) // the next read from the last commit gets r1..r6 at once

	fs2, err := NewFileSink(out)
	if err != nil {
		t.Fatal(err)
	}
	end := lastSeq(t, fake, stream)
	var mu sync.Mutex
	var firstRedelivery []string
	var l2 *kinesisload.Loader
	sink := kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		mu.Lock()
		if firstRedelivery == nil {
			for _, r := range b.Records {
				firstRedelivery = append(firstRedelivery, string(r.Data))
			}
		}
		mu.Unlock()
		if err := fs2.Deliver(ctx, b); err != nil {
			return err
		}
		if last, _ := fs2.LastStored(stream, b.ShardID); last == end {
			go l2.Close(context.Background())
		}
		return nil
	})
	l2 = newLoader(sink)
	if err := l2.Run(ctx); !errors.Is(err, kinesisload.ErrClosed) {
		t.Fatalf("second Run: %v, want ErrClosed", err)
	}
	if diff := cmp.Diff([]string{"r1", "r2", "r3", "r4", "r5", "r6"}, firstRedelivery); diff != "" {
		t.Errorf("the restarted Loader's first batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(readShards(t, fake, stream), fileRecords(t, out)); diff != "" {
		t.Errorf("records in the files (-want Kinesis +got files):\n%s", diff)
	}
}

// lastSeq is the sequence number of the newest record of the stream's only
// shard.
func lastSeq(t *testing.T, api kinesistest.API, stream string) string {
	t.Helper()
	recs := readShards(t, api, stream)["shardId-000000000000"]
	if len(recs) == 0 {
		return ""
	}
	seq, _, _ := strings.Cut(recs[len(recs)-1], " ")
	return seq
}

// TestSignalClosesGracefully runs the program as main does, cancels its
// context (what SIGINT or SIGTERM do through signal.NotifyContext) once a
// file is stored, and checks the graceful stop: exit status 0, Run returned
// ErrClosed, and every batch stored was committed (the journal's position
// of each shard is just after its last stored record).
func TestSignalClosesGracefully(t *testing.T) {
	t.Parallel()
	out, dir := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-out", out, "-dir", dir, "-stream", "sig", "-duration", "0", "-fail-every", "0"}, &stdout, &stderr)
	}()
	for {
		files, err := ListFiles(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) >= 2 {
			break
		}
		select {
		case c := <-code:
			t.Fatalf("run returned %d before it was stopped\nstdout:\n%s\nstderr:\n%s", c, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("run returned %d, want 0\nstdout:\n%s\nstderr:\n%s", c, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		"Signal received: stopping gracefully.",
		"Close: in-flight batches finished and committed.",
		"Run returned: kinesisload: loader closed",
		"each in exactly one line, in shard order, none skipped",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}

	// Every stored batch is committed: the journal resumes each shard just
	// after its last stored record.
	files, err := ListFiles(out)
	if err != nil {
		t.Fatal(err)
	}
	wantPos := map[string]string{}
	for _, f := range files {
		wantPos[f.Shard] = scan.AfterSequence(f.Last).String()
	}
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	store, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	progress, err := store.Load(context.Background(), "sig")
	if err != nil {
		t.Fatal(err)
	}
	gotPos := map[string]string{}
	for id, p := range progress {
		if _, ok := wantPos[id]; ok || p.Position.Kind != scan.KindTrimHorizon {
			gotPos[id] = p.Position.String()
		}
	}
	if diff := cmp.Diff(wantPos, gotPos); diff != "" {
		t.Errorf("committed positions (-want from the files +got from the journal):\n%s", diff)
	}
}

// TestRunDefaults runs the program as `go run ./examples/customsink` does
// (shorter) and checks it ends by itself with its check passed.
func TestRunDefaults(t *testing.T) {
	t.Parallel()
	var stdout, stderr syncBuffer
	if c := run(context.Background(), []string{"-duration", "500ms"}, &stdout, &stderr); c != 0 {
		t.Fatalf("run returned %d, want 0\nstdout:\n%s\nstderr:\n%s", c, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "Check: all ") {
		t.Errorf("output lacks the check:\n%s", stdout.String())
	}
}

// TestAggregatedProducer: with -aggregate, the producer writes KPL
// aggregated records, and the files hold every user record once, keyed by
// sequence and sub-sequence number, with injected Sink failures on.
func TestAggregatedProducer(t *testing.T) {
	t.Parallel()
	fake := kinesistest.New()
	out := t.TempDir()
	var buf bytes.Buffer
	o := options{out: out, dir: t.TempDir(), stream: "kpl", start: scan.TrimHorizon(),
		records: 8, failEvery: 2, closeTimeout: 10 * time.Second, aggregate: 3}
	res, err := demo(context.Background(), o, fake, &printer{w: &buf})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, buf.String())
	}
	subs := map[int64]int{}
	for _, p := range res.produced {
		subs[p.sub]++
	}
	if len(res.produced) == 0 || subs[0] != subs[2] || subs[0]*3 != len(res.produced) {
		t.Fatalf("produced %d user records with sub-sequence numbers %v, want whole aggregates of 3", len(res.produced), subs)
	}
	lines := 0
	for _, f := range listFiles(t, out) {
		ls, err := ReadLines(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		lines += len(ls)
	}
	if lines != len(res.produced) {
		t.Errorf("%d lines in the files, want %d (one per user record)", lines, len(res.produced))
	}
	if !strings.Contains(buf.String(), fmt.Sprintf("Check: all %d records written are stored", len(res.produced))) {
		t.Errorf("the demo's own check is not reported:\n%s", buf.String())
	}
}

// TestBadFlags checks that bad flags exit with status 2 and name the flag.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "-1s"}, "-duration -1s"},
		{[]string{"-fail-every", "-2"}, "-fail-every -2"},
		{[]string{"-aggregate", "-1"}, "-aggregate -1"},
		{[]string{"-records", "-3"}, "-records -3"},
		{[]string{"-start", "SHARD_END"}, "-start SHARD_END"},
		{[]string{"-start", "SOMEWHERE"}, "-start"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		if c := run(context.Background(), tc.args, &stdout, &stderr); c != 2 {
			t.Errorf("run(%q) = %d, want 2", tc.args, c)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run(%q) stderr %q does not contain %q", tc.args, stderr.String(), tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*syncBuffer)(nil)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestRunAgainstKinesisLocal runs the program with -endpoint against a
// real emulator, as a user with a kinesis-local started by hand would: it
// creates the stream, produces, loads and checks. It stops on a count of
// records, not after a time (a loaded machine may take seconds for the
// first put), and checks the files against the stream itself too: every
// record in it, each once, in order, and nothing else.
func TestRunAgainstKinesisLocal(t *testing.T) {
	e := emulator.Start(t, emulator.KinesisLocal)
	// No credentials anywhere: the program's dummy ones are under test.
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_REGION", "")
	out := t.TempDir()
	const records = 16
	var stdout, stderr syncBuffer
	args := []string{"-endpoint", e.Endpoint, "-out", out, "-records", fmt.Sprint(records), "-duration", "0", "-fail-every", "2"}
	if c := run(context.Background(), args, &stdout, &stderr); c != 0 {
		t.Fatalf("run returned %d, want 0\nstdout:\n%s\nstderr:\n%s", c, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		"Kinesis: " + e.Endpoint + " (region us-east-1)",
		"stream:  tidemark-customsink",
		fmt.Sprintf("-records %d written", records),
		"injected failure",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	m := regexp.MustCompile(`Check: all (\d+) records written are stored`).FindStringSubmatch(stdout.String())
	if n, _ := strconv.Atoi(firstGroup(m)); n < records {
		t.Errorf("the program's check covered %q records, want at least %d:\n%s", firstGroup(m), records, stdout.String())
	}
	want := readShards(t, e.Client, "tidemark-customsink")
	if len(want) != 2 || len(want["shardId-000000000000"]) == 0 || len(want["shardId-000000000001"]) == 0 {
		t.Errorf("the stream holds %v, want records in both shards", want)
	}
	if diff := cmp.Diff(want, fileRecords(t, out)); diff != "" {
		t.Errorf("records in the files (-want Kinesis +got files):\n%s", diff)
	}
}

// firstGroup returns the first group of a regexp match, or "" when there is none.
func firstGroup(m []string) string {
	if len(m) < 2 {
		return ""
	}
	return m[1]
}

// TestCheck checks the checker on the cases the guarantee names: what it
// must accept (a put without an answer that landed, even on a shard with
// no acknowledged record, or that did not) and what it must refuse (a lost
// or skipped record, a record never put, a duplicate, a record out of
// order).
func TestCheck(t *testing.T) {
	const s0, s1 = "shardId-000000000000", "shardId-000000000001"
	ack := func(shard string, seq int, data string) produced {
		return produced{shard: shard, seq: fmt.Sprintf("4960%04d", seq), data: data}
	}
	doubtful := func(data string) produced { return produced{data: data} }
	ln := func(seq int, data string) Line { return Line{Seq: fmt.Sprintf("4960%04d", seq), Data: []byte(data)} }
	required := []produced{ack(s0, 1, "a"), ack(s0, 3, "b"), ack(s1, 2, "c")}
	for _, tc := range []struct {
		name      string
		lines     map[string][]Line
		required  []produced
		doubtful  []produced
		all       bool
		wantErr   string // "" for none
		wantExtra int
	}{
		{name: "all stored", all: true,
			lines: map[string][]Line{s0: {ln(1, "a"), ln(3, "b")}, s1: {ln(2, "c")}}},
		{name: "an acknowledged record lost", all: true,
			lines:   map[string][]Line{s0: {ln(1, "a")}, s1: {ln(2, "c")}},
			wantErr: `record 49600003/0 "b" was written but is not stored: lost`},
		{name: "a shard with nothing stored", all: true,
			lines:   map[string][]Line{s0: {ln(1, "a"), ln(3, "b")}},
			wantErr: `shard shardId-000000000001: record 49600002/0 "c" was written but is not stored: lost`},
		{name: "not all: the first records stored",
			lines: map[string][]Line{s0: {ln(1, "a")}}},
		{name: "not all: a record skipped",
			lines:   map[string][]Line{s0: {ln(3, "b")}},
			wantErr: `record 49600001/0 "a" is not stored, but the later record 49600003/0 is: skipped`},
		{name: "a put without an answer that landed on a shard with no acknowledged record", all: true,
			required: []produced{ack(s0, 1, "a")}, doubtful: []produced{doubtful("d")},
			lines:     map[string][]Line{s0: {ln(1, "a")}, s1: {ln(7, "d")}},
			wantExtra: 1},
		{name: "a put without an answer that landed after the acknowledged ones", all: true,
			doubtful:  []produced{doubtful("d")},
			lines:     map[string][]Line{s0: {ln(1, "a"), ln(3, "b"), ln(4, "d")}, s1: {ln(2, "c")}},
			wantExtra: 1},
		{name: "a put without an answer that did not land", all: true,
			doubtful: []produced{doubtful("d")},
			lines:    map[string][]Line{s0: {ln(1, "a"), ln(3, "b")}, s1: {ln(2, "c")}}},
		{name: "a put without an answer found in the stream but not stored", all: true,
			required: append(slices.Clone(required), ack(s1, 5, "d")),
			lines:    map[string][]Line{s0: {ln(1, "a"), ln(3, "b")}, s1: {ln(2, "c")}},
			wantErr:  `record 49600005/0 "d" was written but is not stored: lost`},
		{name: "a record never put", all: true,
			lines:   map[string][]Line{s0: {ln(1, "a"), ln(3, "b")}, s1: {ln(2, "c"), ln(4, "x")}},
			wantErr: `shard shardId-000000000001 line 2 is record 49600004/0 "x", which the producer never put`},
		{name: "a put without an answer stored twice", all: true,
			doubtful: []produced{doubtful("d")},
			lines:    map[string][]Line{s0: {ln(1, "a"), ln(3, "b"), ln(4, "d"), ln(5, "d")}, s1: {ln(2, "c")}},
			wantErr:  `line 4 is record 49600005/0 "d", which the producer never put`},
		{name: "a duplicate line", all: true,
			lines:   map[string][]Line{s0: {ln(1, "a"), ln(1, "a"), ln(3, "b")}, s1: {ln(2, "c")}},
			wantErr: "shard shardId-000000000000 line 2 repeats record 49600001/0: a duplicate"},
		{name: "out of order", all: true,
			lines:   map[string][]Line{s0: {ln(3, "b"), ln(1, "a")}, s1: {ln(2, "c")}},
			wantErr: "line 2 is record 49600001/0, after 49600003/0: out of order"},
		{name: "the wrong data", all: true,
			lines:   map[string][]Line{s0: {ln(1, "a"), ln(3, "z")}, s1: {ln(2, "c")}},
			wantErr: `line 2 is record 49600003/0 with data "z", want "b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.required
			if req == nil {
				req = required
			}
			_, extra, err := check(tc.lines, req, tc.doubtful, tc.all)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check: %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("check: %v, want an error containing %q", err, tc.wantErr)
			case err == nil && extra != tc.wantExtra:
				t.Errorf("check counted %d stored records of puts without an answer, want %d", extra, tc.wantExtra)
			}
		})
	}
}

// TestReportCatchesALostRecord runs the demo, then takes one stored file
// away, as a Sink that lost a batch would: the demo's own check, run
// again on what is left, must fail and name the record.
func TestReportCatchesALostRecord(t *testing.T) {
	t.Parallel()
	fake := kinesistest.New()
	out := t.TempDir()
	var buf bytes.Buffer
	o := options{out: out, dir: t.TempDir(), stream: "lost", start: scan.TrimHorizon(), records: 8, closeTimeout: 10 * time.Second}
	res, err := demo(context.Background(), o, fake, &printer{w: &buf})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, buf.String())
	}
	if err := report(&printer{w: io.Discard}, out, o.stream, res.produced, nil, true, true, false); err != nil {
		t.Fatalf("the check fails before anything was taken away: %v", err)
	}
	files := listFiles(t, out)
	victim := files[len(files)/2]
	if err := os.Remove(victim.Path); err != nil {
		t.Fatal(err)
	}
	err = report(&printer{w: io.Discard}, out, o.stream, res.produced, nil, true, true, false)
	if err == nil || !strings.Contains(err.Error(), "lost") || !strings.Contains(err.Error(), victim.First) {
		t.Errorf("after removing %s: the check returned %v, want the loss of record %s", victim.Path, err, victim.First)
	}
}

func listFiles(t *testing.T, dir string) []File {
	t.Helper()
	fs, err := ListFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}
