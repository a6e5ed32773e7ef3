// Command customsink shows how to write a Sink for tidemark: FileSink (in
// filesink.go, ready to copy) stores every delivered batch as one NDJSON
// file, atomically and durably, and is idempotent, so at-least-once delivery
// never leaves a duplicate line.
//
//	go run ./examples/customsink
//
// It needs no AWS account: by default it creates a 2-shard stream in the
// in-memory Kinesis of package kinesistest, writes a few records per second
// into it from a producer goroutine, loads it with a kinesisload.Loader into
// a FileSink for -duration (or until -records are written), then stops the
// producer, waits until every record written is stored, closes the Loader
// gracefully and checks the files: every record written is in exactly one
// line, in shard order, and no line holds a record that was not written.
// A put that got no answer (it failed, or a signal cancelled it) may or may
// not have landed: the program reads the stream to find out, and a record
// that landed is owed like any other.
//
// What it demonstrates:
//   - Deliver returns nil only once the batch's file and its name are durable
//     (write to a temporary file in the same directory, fsync, rename, fsync
//     the directory): the Loader commits a batch only after that.
//   - A failing Deliver returns its error, and the Loader delivers the same
//     batch again (Config.SinkRetries, with backoff). With -fail-every N
//     (default 4) the first attempt of every Nth batch fails after the file
//     was stored, as if the acknowledgement were lost: the worst case for
//     duplicates. The retry finds the records stored and writes nothing.
//   - A graceful stop on SIGINT or SIGTERM (signal.NotifyContext): the
//     producer stops, Loader.Close lets in-flight batches finish and commit
//     (or gives up after -close-timeout), and Run returns
//     kinesisload.ErrClosed.
//
// Each line of a file is one record:
//
//	{"stream":"...","shard":"shardId-000000000000","seq":"4960...","subseq":0,
//	 "partition_key":"key-3","arrival":"2026-11-30T08:18:16.123Z","data":"b3JkZXItMDAwMDAx"}
//
// data is always base64 (lossless and unambiguous; see Line). Files are named
// STREAM.SHARD.FIRST-LAST.ndjson from the sequence numbers of their first and
// last records.
//
// Flags:
//
//	-out DIR         write the files into DIR (default: a temporary directory,
//	                 removed at exit; the program prints a sample first)
//	-dir DIR         keep the Loader's journal in DIR (default: a temporary
//	                 directory, removed at exit); with -endpoint, run again
//	                 with the same -dir, -out and -stream to resume where it
//	                 stopped (inspect it with examples/inspect)
//	-endpoint URL    use the Kinesis at URL, e.g. a kinesis-local on its
//	                 plain port http://127.0.0.1:4568 (4567 is its TLS
//	                 port), instead of the in-memory one
//	                 (credentials from the environment, or dummy ones; region
//	                 from the environment, or us-east-1)
//	-stream NAME     the stream to load (default: a new name each run in
//	                 memory, "tidemark-customsink" with -endpoint); it is
//	                 created with 2 shards if it does not exist, and the
//	                 producer runs only on a stream the program created.
//	                 The in-memory Kinesis is new every run, sequence
//	                 numbers included: do not give it the -dir or -out of
//	                 an earlier run
//	-start POS       where shards with no stored progress start: LATEST,
//	                 TRIM_HORIZON, ... (default TRIM_HORIZON)
//	-duration D      stop by itself after D (default 3s; 0 runs until
//	                 SIGINT or SIGTERM, or -records)
//	-records N       stop by itself once the producer has written N records
//	                 (acknowledged puts; with -aggregate, N aggregated
//	                 records), or after -duration if that comes first
//	                 (default 0: no limit)
//	-fail-every N    fail the first attempt of every Nth batch (default 4;
//	                 0 never)
//	-close-timeout D how long Close waits for in-flight batches (default 10s)
//	-aggregate N     the producer writes KPL aggregated records of N user
//	                 records each, as a Kinesis Producer Library producer
//	                 would (kinesistest.Aggregate); the Loader delivers the
//	                 user records, and each line's seq and subseq identify
//	                 one (default 0: plain records)
//	-v               show the Loader's own logs
//
// Exit status: 0 when the run and the check succeeded, 1 on an error or a
// failed check, 2 on a bad flag.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command-line flags.
type options struct {
	out, dir     string
	endpoint     string
	stream       string
	start        scan.Position
	duration     time.Duration
	failEvery    int
	closeTimeout time.Duration
	verbose      bool
	aggregate    int // user records per KPL aggregated record; 0: plain
	records      int // stop once the producer wrote this many records; 0: no limit
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var start string
	fs := flag.NewFlagSet("customsink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "", "write the NDJSON files into `DIR` (default: a temporary directory, removed at exit)")
	fs.StringVar(&o.dir, "dir", "", "keep the Loader's journal in `DIR` (default: a temporary directory, removed at exit)")
	fs.StringVar(&o.endpoint, "endpoint", "", "use the Kinesis endpoint at `URL` (e.g. a kinesis-local) instead of the in-memory one")
	fs.StringVar(&o.stream, "stream", "", "the stream to load (default: a new name in memory, tidemark-customsink with -endpoint)")
	fs.StringVar(&start, "start", "TRIM_HORIZON", "where shards with no stored progress start (`POS`: LATEST, TRIM_HORIZON, ...)")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "stop by itself after this long (0: run until SIGINT/SIGTERM)")
	fs.IntVar(&o.records, "records", 0, "stop by itself once the producer has written `N` records (0: no limit)")
	fs.IntVar(&o.failEvery, "fail-every", 4, "fail the first attempt of every `N`th batch (0: never)")
	fs.DurationVar(&o.closeTimeout, "close-timeout", 10*time.Second, "how long Close waits for in-flight batches")
	fs.BoolVar(&o.verbose, "v", false, "show the Loader's own logs")
	fs.IntVar(&o.aggregate, "aggregate", 0, "write KPL aggregated records of `N` user records each (0: plain records)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	case o.duration < 0:
		return o, fmt.Errorf("-duration %v: must not be negative", o.duration)
	case o.failEvery < 0:
		return o, fmt.Errorf("-fail-every %d: must not be negative", o.failEvery)
	case o.aggregate < 0:
		return o, fmt.Errorf("-aggregate %d: must not be negative", o.aggregate)
	case o.records < 0:
		return o, fmt.Errorf("-records %d: must not be negative", o.records)
	case o.closeTimeout <= 0:
		return o, fmt.Errorf("-close-timeout %v: must be positive", o.closeTimeout)
	}
	if o.start, err = scan.Parse(start); err != nil {
		return o, fmt.Errorf("-start: %w", err)
	}
	if o.start.Kind == scan.KindShardEnd {
		return o, fmt.Errorf("-start %s: a start position cannot be SHARD_END", start)
	}
	if o.stream == "" {
		if o.endpoint == "" {
			o.stream = fmt.Sprintf("customsink-%d", time.Now().UnixNano())
		} else {
			o.stream = "tidemark-customsink"
		}
	}
	return o, nil
}

// run is the whole program; it returns the exit status. ctx ending (SIGINT,
// SIGTERM) stops it gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "customsink:", err)
		return 2
	}
	api, where, err := connect(ctx, o.endpoint)
	if err != nil {
		fmt.Fprintln(stderr, "customsink:", err)
		return 1
	}
	out := &printer{w: stdout}
	out.printf("customsink: a file Sink for tidemark\n")
	out.printf("  Kinesis: %s\n", where)
	if _, err := demo(ctx, o, api, out); err != nil {
		fmt.Fprintln(stderr, "customsink: FAIL:", err)
		return 1
	}
	return 0
}

// result is what one demo run did, for the tests.
type result struct {
	// produced are the records of the producer's acknowledged puts, in
	// order; nil when the producer did not run.
	produced []produced
	// doubts are the producer's puts that got no answer.
	doubts []doubt
	// landed are the records of doubts found in the stream after the
	// producer stopped (looked for only when the run ends without a
	// signal).
	landed []produced
	// runErr is what Loader.Run returned.
	runErr error
	// signalled is true when ctx ended (SIGINT, SIGTERM) before
	// -duration elapsed or -records were written.
	signalled bool
}

// demo loads the stream into a FileSink until -duration elapses, -records
// were written or ctx ends, then stops gracefully and checks the files.
func demo(ctx context.Context, o options, api kinesistest.API, out *printer) (res result, err error) {
	outDir, cleanOut, err := dirOrTemp(o.out, "tidemark-customsink-out-")
	if err != nil {
		return res, err
	}
	defer cleanOut()
	journalDir, cleanJournal, err := dirOrTemp(o.dir, "tidemark-customsink-journal-")
	if err != nil {
		return res, err
	}
	defer cleanJournal()
	out.printf("  stream:  %s\n", o.stream)
	out.printf("  files:   %s%s\n", outDir, kept(o.out))
	out.printf("  journal: %s%s\n", journalDir, kept(o.dir))

	created, err := ensureStream(ctx, api, o.stream)
	if err != nil {
		return res, err
	}

	fileSink, err := NewFileSink(outDir)
	if err != nil {
		return res, err
	}
	var sink kinesisload.Sink = fileSink
	if o.failEvery > 0 {
		sink = &flakySink{next: sink, every: o.failEvery}
		out.printf("  faults:  the first attempt of every batch number divisible by %d fails after storing (-fail-every)\n", o.failEvery)
	}
	logger := slog.New(slog.DiscardHandler)
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = o.stream
	cfg.Sink = sink
	cfg.Dir = journalDir // the journal: where every decision and commit is kept
	cfg.StartPosition = o.start
	cfg.IdleWait = 200 * time.Millisecond    // the smallest allowed: a snappy demo
	cfg.SinkBackoff = 100 * time.Millisecond // first retry after about 0.1 s (default 1 s)
	loader, err := kinesisload.New(cfg,
		kinesisload.WithClient(api),
		kinesisload.WithLogger(logger),
		kinesisload.WithHooks(&progress{out: out}))
	if err != nil {
		return res, err
	}

	// Run gets a context that is never cancelled: cancelling Run's
	// context is a hard stop (in-flight Deliver calls are cancelled and
	// not committed). The graceful stop is Loader.Close, below.
	runCtx := context.WithoutCancel(ctx)
	runDone := make(chan struct{})
	var runErr error
	go func() {
		defer close(runDone)
		runErr = loader.Run(runCtx)
	}()

	// The producer runs only on a stream this program created: it never
	// writes into someone else's stream. Stopping it lets a put in flight
	// finish, so that its answer is not lost; a signal (ctx) cancels it.
	prod := &producer{api: api, stream: o.stream, aggregate: o.aggregate, limit: o.records, reached: make(chan struct{})}
	stopCh := make(chan struct{})
	stopProducer := sync.OnceFunc(func() { close(stopCh) })
	var prodWG sync.WaitGroup
	if created {
		out.printf("  producer: writing a record every 50ms (the stream is new)\n")
		prodWG.Go(func() { prod.run(ctx, stopCh, 50*time.Millisecond) })
	}
	defer func() { stopProducer(); prodWG.Wait() }()
	var until []string
	if o.duration > 0 {
		until = append(until, fmt.Sprintf("after %v", o.duration))
	}
	if o.records > 0 && created {
		until = append(until, fmt.Sprintf("once %d records are written", o.records))
	}
	out.printf("\nLoading (stops %s):\n", strings.Join(append(until, "on Ctrl-C / SIGTERM"), ", or "))

	var timer <-chan time.Time
	if o.duration > 0 {
		t := time.NewTimer(o.duration)
		defer t.Stop()
		timer = t.C
	}
	stopped := false
	select {
	case <-ctx.Done():
		res.signalled = true
		out.printf("\nSignal received: stopping gracefully.\n")
	case <-timer:
		out.printf("\n-duration %v elapsed: stopping the producer and waiting until every record is stored.\n", o.duration)
	case <-prod.reached:
		out.printf("\n-records %d written: waiting until every record is stored.\n", o.records)
	case <-runDone:
		stopped = true // the Loader stopped by itself: a fatal error
	}
	stopProducer()
	prodWG.Wait()
	res.produced, res.doubts = prod.written(), prod.inDoubt()

	// required are the records that must be stored: those of the
	// acknowledged puts and, of the puts that got no answer, those that
	// landed; doubtful are the rest of the latter, which may have landed
	// after the stream was read.
	required, doubtful := res.produced, users(res.doubts)
	var findErr error
	if !stopped && !res.signalled && created {
		if len(res.doubts) > 0 {
			out.printf("  %d put(s) got no answer: reading the stream to see which landed.\n", len(res.doubts))
			var landed []produced
			landed, findErr = findLanded(ctx, api, o.stream, res.doubts)
			res.landed = landed
			required = sortProduced(slices.Concat(res.produced, landed))
			doubtful = slices.DeleteFunc(doubtful, func(p produced) bool {
				return slices.ContainsFunc(landed, func(l produced) bool { return l.key() == p.key() })
			})
		}
		if err := waitStored(ctx, fileSink, o.stream, required, runDone); err != nil {
			out.printf("  %v\n", err)
		}
	}
	if !stopped {
		// Close stops reading, lets in-flight batches finish and
		// commit, and waits for Run to return; after closeTimeout it
		// cancels them instead (they are delivered again next time).
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.closeTimeout)
		cerr := loader.Close(closeCtx)
		cancel()
		<-runDone
		if cerr != nil {
			out.printf("  Close: %v (in-flight batches were cancelled, not committed)\n", cerr)
		} else {
			out.printf("  Close: in-flight batches finished and committed.\n")
		}
	}
	res.runErr = runErr
	out.printf("  Run returned: %v\n", runErr)
	if !errors.Is(runErr, kinesisload.ErrClosed) {
		return res, fmt.Errorf("the Loader stopped: %w", runErr)
	}
	if findErr != nil {
		return res, fmt.Errorf("cannot check: reading the stream for the puts that got no answer: %w", findErr)
	}

	if err := report(out, outDir, o.stream, required, doubtful, created, !res.signalled, o.endpoint != ""); err != nil {
		return res, err
	}
	return res, nil
}

// kept says whether a directory flag was given.
func kept(flagValue string) string {
	if flagValue == "" {
		return " (temporary, removed at exit)"
	}
	return " (kept)"
}

// dirOrTemp returns dir, created if needed, or a new temporary directory
// and a function that removes it.
func dirOrTemp(dir, pattern string) (string, func(), error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, err
		}
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { _ = os.RemoveAll(tmp) }, nil
}

// storedTimeout bounds how long waitStored waits: generous, so that a slow
// (loaded) machine is not taken for a lost record; a healthy run waits
// well under a second. It ends a run that is broken, nothing more.
const storedTimeout = time.Minute

// waitStored waits until the sink has stored the last record of written
// (sorted by shard and sequence number) of every shard, for at most
// storedTimeout.
func waitStored(ctx context.Context, sink *FileSink, stream string, written []produced, runDone <-chan struct{}) error {
	last := map[string]string{}
	for _, p := range written {
		last[p.shard] = p.seq
	}
	ctx, cancel := context.WithTimeout(ctx, storedTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		done := true
		for shard, seq := range last {
			got, err := sink.LastStored(stream, shard)
			if err != nil {
				return err
			}
			if got == "" || scan.CompareSequence(got, seq) < 0 {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("not every record was stored within %v: %w", storedTimeout, ctx.Err())
		case <-runDone:
			return errors.New("the Loader stopped while waiting")
		}
	}
}

// report lists the files and, when checked, checks them (see check)
// against what the producer wrote: required are the records that must be
// stored (with all) or of which none may be skipped (without), doubtful
// the records of puts that got no answer and were not found in the stream.
// resumable says whether a later run can read the rest.
func report(out *printer, outDir, stream string, required, doubtful []produced, checked, all, resumable bool) error {
	files, err := ListFiles(outDir)
	if err != nil {
		return err
	}
	byShard := map[string][]Line{}
	nlines := 0
	var sample []string
	for _, f := range files {
		if f.Stream != stream {
			continue
		}
		lines, err := ReadLines(f.Path)
		if err != nil {
			return err
		}
		nlines += len(lines)
		byShard[f.Shard] = append(byShard[f.Shard], lines...)
		if sample == nil {
			data, err := os.ReadFile(f.Path)
			if err != nil {
				return err
			}
			sample = append([]string{f.Path}, strings.SplitAfterN(string(data), "\n", 3)[:min(2, len(lines))]...)
		}
	}
	out.printf("\nFiles: %d files, %d lines, in %s\n", len(files), nlines, outDir)
	if sample != nil {
		out.printf("  first file: %s\n", sample[0])
		for _, l := range sample[1:] {
			out.printf("    %s", l)
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		out.printf("  %s: %d lines\n", shard, len(byShard[shard]))
	}
	if !checked {
		out.printf("  (the producer did not run: nothing to check against)\n")
		return nil
	}
	stored, extra, err := check(byShard, required, doubtful, all)
	if err != nil {
		return fmt.Errorf("check failed: %w", err)
	}
	if all {
		out.printf("Check: all %d records written are stored, each in exactly one line, in shard order.\n", len(required))
	} else {
		out.printf("Check: %d of %d records written are stored, each in exactly one line, in shard order, none skipped;\n", stored, len(required))
		if resumable {
			out.printf("       the rest were not read before the stop (a later run with the same -dir, -out and -stream reads them).\n")
		} else {
			out.printf("       the rest were not read before the stop (and the in-memory stream ends with this run).\n")
		}
	}
	if len(doubtful) > 0 {
		out.printf("       %d record(s) of puts that got no answer were not found in the stream; %d of them are stored (they landed late).\n", len(doubtful), extra)
	}
	return nil
}

// check checks the lines of each shard against what the producer wrote,
// as the Loader's guarantee promises:
//
//   - order: each shard's lines are in sequence order, and no record is in
//     two lines;
//   - nothing invented: every line is a record of required (same shard,
//     sequence number, sub-sequence number and data) or of doubtful (same
//     data and sub-sequence number, each at most once);
//   - no loss: with all, every record of required is stored; without, the
//     stored records of required are the first of their shard (the rest
//     were not read before the stop), none skipped.
//
// required holds the records of the acknowledged puts and those of the
// puts that got no answer but were found in the stream: they landed, so
// they are owed too. doubtful holds the records of the puts that got no
// answer and were not found: they may have landed after the stream was
// read, so they may be stored, and need not be. check returns how many
// records of required and of doubtful are stored.
func check(byShard map[string][]Line, required, doubtful []produced, all bool) (stored, extra int, err error) {
	want := map[string]map[string]produced{} // shard -> seq/sub -> record
	for _, p := range required {
		if want[p.shard] == nil {
			want[p.shard] = map[string]produced{}
		}
		want[p.shard][fmt.Sprintf("%s/%d", p.seq, p.sub)] = p
	}
	maybe := map[string]bool{} // key -> not yet seen
	for _, p := range doubtful {
		maybe[p.key()] = true
	}
	have := map[string]Line{} // shard/seq/sub -> the line that holds it
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		lines := byShard[shard]
		for i, l := range lines {
			k := fmt.Sprintf("%s/%d", l.Seq, l.SubSeq)
			if i > 0 {
				prev := lines[i-1]
				switch c := cmp.Or(scan.CompareSequence(prev.Seq, l.Seq), cmp.Compare(prev.SubSeq, l.SubSeq)); {
				case c == 0:
					return 0, 0, fmt.Errorf("shard %s line %d repeats record %s: a duplicate", shard, i+1, k)
				case c > 0:
					return 0, 0, fmt.Errorf("shard %s line %d is record %s, after %s/%d: out of order", shard, i+1, k, prev.Seq, prev.SubSeq)
				}
			}
			if w, ok := want[shard][k]; ok {
				if string(l.Data) != w.data {
					return 0, 0, fmt.Errorf("shard %s line %d is record %s with data %q, want %q", shard, i+1, k, l.Data, w.data)
				}
				have[shard+"/"+k] = l
				stored++
				continue
			}
			if mk := (produced{data: string(l.Data), sub: l.SubSeq}).key(); maybe[mk] {
				maybe[mk] = false // at most once
				extra++
				continue
			}
			return 0, 0, fmt.Errorf("shard %s line %d is record %s %q, which the producer never put", shard, i+1, k, l.Data)
		}
	}
	for _, p := range required {
		if _, ok := have[fmt.Sprintf("%s/%s/%d", p.shard, p.seq, p.sub)]; ok {
			continue
		}
		if all {
			return 0, 0, fmt.Errorf("shard %s: record %s/%d %q was written but is not stored: lost", p.shard, p.seq, p.sub, p.data)
		}
		if lines := byShard[p.shard]; len(lines) > 0 {
			last := lines[len(lines)-1]
			if cmp.Or(scan.CompareSequence(last.Seq, p.seq), cmp.Compare(last.SubSeq, p.sub)) > 0 {
				return 0, 0, fmt.Errorf("shard %s: record %s/%d %q is not stored, but the later record %s/%d is: skipped", p.shard, p.seq, p.sub, p.data, last.Seq, last.SubSeq)
			}
		}
	}
	return stored, extra, nil
}

// flakySink fails the first attempt of every Nth batch after next stored it,
// as if the acknowledgement were lost: the Loader must deliver it again,
// and next must not store it twice.
type flakySink struct {
	next  kinesisload.Sink
	every int

	mu      sync.Mutex
	batches int
	failed  map[string]bool // batches whose first attempt failed
}

// Deliver implements kinesisload.Sink.
func (f *flakySink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	if err := f.next.Deliver(ctx, b); err != nil {
		return err
	}
	if len(b.Records) == 0 {
		return nil
	}
	key := b.ShardID + "/" + b.Records[0].SequenceNumber + "/" + b.Records[len(b.Records)-1].SequenceNumber
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed == nil {
		f.failed = map[string]bool{}
	}
	if _, retried := f.failed[key]; retried {
		delete(f.failed, key) // the retry: it succeeds
		return nil
	}
	f.batches++
	if f.batches%f.every != 0 {
		return nil
	}
	f.failed[key] = true
	return fmt.Errorf("injected failure on the first attempt of batch %d (shard %s, %d records), after the file was stored", f.batches, b.ShardID, len(b.Records))
}

// progress prints the Loader's hooks.
type progress struct{ out *printer }

// OnInitResolved implements kinesisload.HookInitResolved.
func (p *progress) OnInitResolved(e kinesisload.InitResolved) {
	for _, id := range slices.Sorted(maps.Keys(e.Positions)) {
		p.out.printf("  %s starts at %v\n", id, e.Positions[id])
	}
}

// OnBatchDelivered implements kinesisload.HookBatchDelivered.
func (p *progress) OnBatchDelivered(e kinesisload.BatchDelivered) {
	retried := ""
	if e.Attempts > 1 {
		retried = fmt.Sprintf(" (after %d attempts)", e.Attempts)
	}
	p.out.printf("  %s: %d record(s) stored and committed%s\n", e.ShardID, e.Records, retried)
}

// OnRetry implements kinesisload.HookRetry.
func (p *progress) OnRetry(e kinesisload.Retry) {
	p.out.printf("  %s: %s failed (attempt %d): %v; the Loader retries in %v\n", e.ShardID, e.Op, e.Attempt, e.Err, e.Backoff.Round(time.Millisecond))
}

// printer serialises writes from the Loader's goroutines.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// Write implements io.Writer, for the logger.
func (p *printer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Write(b)
}

// produced is one record the producer wrote; sub is its index in its
// aggregate. shard and seq are empty for a record whose put got no answer
// and was not found in the stream.
type produced struct {
	shard, seq, data string
	sub              int64
}

// key identifies a user record by its data and its index in its aggregate:
// unique, since every record's data holds its number.
func (p produced) key() string { return fmt.Sprintf("%d/%s", p.sub, p.data) }

// doubt is a put that got no answer (an error, a timeout, a cancellation):
// its record may or may not have landed.
type doubt struct {
	data  []byte     // the Kinesis record's data, as put
	users []produced // the user records it holds; shard and seq unknown
}

// producer writes numbered records into the stream.
type producer struct {
	api       kinesistest.API
	stream    string
	aggregate int // user records per KPL aggregated record; 0: plain records
	// limit stops the producer once this many puts were acknowledged
	// (0: no limit); reached is closed then.
	limit   int
	reached chan struct{}

	mu     sync.Mutex
	out    []produced // the records of acknowledged puts
	doubts []doubt    // the puts that got no answer
}

// putTimeout bounds one put. Generous: a put that runs out of it is in
// doubt, which the check allows but cannot require.
const putTimeout = 30 * time.Second

// noRetries turns off the SDK's own retries for a put: a retry after a
// lost answer can land the record twice, and only the second copy's
// sequence number would be known. The producer does not retry: a put
// without an answer is recorded as a doubt and the next record is put.
func noRetries(o *kinesis.Options) { o.RetryMaxAttempts = 1 }

// run puts record after record, every interval, until stop is closed, ctx
// ends or limit puts were acknowledged. A put in flight when stop is
// closed finishes and is counted; one in flight when ctx ends is
// cancelled and becomes a doubt.
func (p *producer) run(ctx context.Context, stop <-chan struct{}, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	acked := 0
	for n := 1; ; n++ {
		if p.put(ctx, n) {
			acked++
			if acked == p.limit {
				close(p.reached)
				return
			}
		}
		select {
		case <-tick.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// put writes record number n: one plain record, or, with p.aggregate, one
// Kinesis record holding p.aggregate user records, as a KPL producer would
// write them. It reports whether Kinesis acknowledged it.
func (p *producer) put(ctx context.Context, n int) bool {
	in := &kinesis.PutRecordInput{StreamName: aws.String(p.stream), PartitionKey: aws.String(fmt.Sprintf("key-%d", n%8))}
	var users []produced
	if p.aggregate > 0 {
		recs := make([]kinesistest.UserRecord, p.aggregate)
		for i := range recs {
			recs[i] = kinesistest.UserRecord{PartitionKey: fmt.Sprintf("key-%d", n%8), Data: []byte(fmt.Sprintf("order-%06d.%d", n, i))}
			users = append(users, produced{sub: int64(i), data: string(recs[i].Data)})
		}
		e, err := kinesistest.Aggregate(recs)
		if err != nil {
			return false // nothing was put
		}
		in.PartitionKey, in.Data = e.PartitionKey, e.Data
	} else {
		data := fmt.Sprintf("order-%06d", n)
		users = []produced{{data: data}}
		in.Data = []byte(data)
	}
	ctx, cancel := context.WithTimeout(ctx, putTimeout)
	res, err := p.api.PutRecord(ctx, in, noRetries)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.doubts = append(p.doubts, doubt{data: in.Data, users: users})
		return false
	}
	for _, u := range users {
		u.shard, u.seq = aws.ToString(res.ShardId), aws.ToString(res.SequenceNumber)
		p.out = append(p.out, u)
	}
	return true
}

// written returns the records of the acknowledged puts, sorted by shard
// and sequence number.
func (p *producer) written() []produced {
	p.mu.Lock()
	defer p.mu.Unlock()
	return sortProduced(slices.Clone(p.out))
}

// inDoubt returns the puts that got no answer.
func (p *producer) inDoubt() []doubt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.doubts)
}

// users returns the user records of doubts.
func users(doubts []doubt) []produced {
	var out []produced
	for _, d := range doubts {
		out = append(out, d.users...)
	}
	return out
}

// sortProduced sorts records by shard, sequence number and sub-sequence
// number, in place, and returns them.
func sortProduced(ps []produced) []produced {
	slices.SortStableFunc(ps, func(a, b produced) int {
		return cmp.Or(strings.Compare(a.shard, b.shard), scan.CompareSequence(a.seq, b.seq), cmp.Compare(a.sub, b.sub))
	})
	return ps
}

// findLanded reads the whole stream and returns the user records of the
// puts in doubts that landed, with their shards and sequence numbers.
// Call it once the producer has stopped.
func findLanded(ctx context.Context, api kinesistest.API, stream string, doubts []doubt) ([]produced, error) {
	pending := map[string]doubt{}
	for _, d := range doubts {
		pending[string(d.data)] = d
	}
	var landed []produced
	var token *string
	for {
		in := &kinesis.ListShardsInput{NextToken: token}
		if token == nil {
			in.StreamName = aws.String(stream) // later pages name only the token
		}
		shards, err := api.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, sh := range shards.Shards {
			err := readShard(ctx, api, stream, aws.ToString(sh.ShardId), func(r types.Record) {
				d, ok := pending[string(r.Data)]
				if !ok {
					return
				}
				delete(pending, string(r.Data))
				for _, u := range d.users {
					u.shard, u.seq = aws.ToString(sh.ShardId), aws.ToString(r.SequenceNumber)
					landed = append(landed, u)
				}
			})
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", aws.ToString(sh.ShardId), err)
			}
		}
		if token = shards.NextToken; token == nil {
			return sortProduced(landed), nil
		}
	}
}

// readShard calls fn with every record of the shard, from its trim horizon
// to its tip, waiting when the shard's read limit is reached.
func readShard(ctx context.Context, api kinesistest.API, stream, shard string, fn func(types.Record)) error {
	it, err := api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		return err
	}
	for iter := it.ShardIterator; iter != nil; {
		page, err := api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		var throttled *types.ProvisionedThroughputExceededException
		switch {
		case errors.As(err, &throttled):
			// 5 calls/s per shard, shared with the Loader.
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		for _, r := range page.Records {
			fn(r)
		}
		if len(page.Records) == 0 && aws.ToInt64(page.MillisBehindLatest) == 0 {
			return nil // the tip of an open shard
		}
		iter = page.NextShardIterator
	}
	return nil // the end of a closed shard
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensureStream creates the stream with 2 shards if it does not exist, and
// waits until it is active. It reports whether it created it.
func ensureStream(ctx context.Context, api kinesistest.API, stream string) (bool, error) {
	_, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	switch {
	case err == nil:
		return false, kinesistest.WaitActive(ctx, api, stream)
	case !kerr.IsNotFound(err):
		return false, fmt.Errorf("stream %s: %w", stream, err)
	}
	created := true
	_, err = api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)})
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		created = false // someone else created it meanwhile
	case err != nil:
		return false, fmt.Errorf("creating stream %s: %w", stream, err)
	}
	if err := kinesistest.WaitActive(ctx, api, stream); err != nil {
		return false, fmt.Errorf("stream %s: %w", stream, err)
	}
	return created, nil
}

// connect returns the in-memory Kinesis, or a client of endpoint.
func connect(ctx context.Context, endpoint string) (kinesistest.API, string, error) {
	if endpoint == "" {
		return kinesistest.New(), "in-memory (kinesistest.New(), real per-shard limits)", nil
	}
	// An emulator needs no instance role: do not ask the EC2 metadata
	// service for one.
	cfg, err := config.LoadDefaultConfig(ctx, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	if err != nil {
		return nil, "", fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	// An emulator checks no credentials, but the SDK signs every request.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cfg.Credentials.Retrieve(cctx)
	cancel()
	if err != nil {
		cfg.Credentials = credentials.NewStaticCredentialsProvider("customsink", "customsink", "")
	}
	client := kinesis.NewFromConfig(cfg, func(ko *kinesis.Options) { ko.BaseEndpoint = aws.String(endpoint) })
	return client, fmt.Sprintf("%s (region %s)", endpoint, cfg.Region), nil
}
