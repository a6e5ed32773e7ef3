// Command quickstart shows, in seven numbered steps, how an ordinary Kinesis
// consumer loses records when it starts at LATEST, and how a tidemark Loader
// does not.
//
//	go run ./examples/quickstart
//
// It needs no AWS account: by default it runs on the in-memory Kinesis of
// package kinesistest (with the real per-shard limits on) and keeps the
// Loader's journal in a temporary directory, removed at exit. It exits with
// status 0 when every check passed, and non-zero, with the reason on stderr,
// when one failed.
//
// Flags:
//
//	-dir DIR       keep the journal in DIR (created if needed, kept at exit)
//	-endpoint URL  use the Kinesis at URL instead, e.g. a kinesis-local
//	               started by hand, on its plain port http://127.0.0.1:4568
//	               (see package kinesisload/kinesislocal); the AWS
//	               configuration comes from the environment and the shared
//	               files, with dummy credentials and region us-east-1 when
//	               they have none
//	-aws           use real Kinesis from the standard AWS configuration (it
//	               creates a 1-shard stream, splits it and deletes it: this
//	               costs a little money)
//	-timeout D     give up after D (default 25s; 3m with -aws, since AWS
//	               takes a while to create and split a stream; 1m with
//	               -fanout)
//	-v             show the Loader's own logs
//	-aggregate     write every record as a KPL aggregated record, as a
//	               Kinesis Producer Library producer does
//	               (kinesistest.Aggregate): the Loader de-aggregates it and
//	               the Sink sees the same records as without the flag
//	-fanout        read with enhanced fan-out (Config.ReadMode ReadFanOut,
//	               consumer "tidemark-quickstart") instead of GetRecords;
//	               the steps and checks are the same. With -endpoint the
//	               client's transport is kinesislocal.Transport, which
//	               supplies the initial-response event kinesis-local omits
//	               (and changes nothing on an endpoint that sends it). With
//	               -aws the consumer is billed until the stream is deleted
//
// The stream it creates has a new name on every run, so a kept journal
// directory can be given again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
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

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesislocal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, os.Args[1:])
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "quickstart: FAIL:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	dir      string
	endpoint string
	useAWS   bool
	timeout  time.Duration
	verbose  bool
	// aggregate writes every record as a KPL aggregated record.
	aggregate bool
	// fanout reads with enhanced fan-out.
	fanout bool
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.dir, "dir", "", "keep the journal in `DIR` (default: a temporary directory, removed at exit)")
	fs.StringVar(&o.endpoint, "endpoint", "", "use the Kinesis endpoint at `URL` (e.g. a kinesis-local) instead of the in-memory one")
	fs.BoolVar(&o.useAWS, "aws", false, "use real Kinesis from the standard AWS configuration (creates, splits and deletes a stream)")
	fs.DurationVar(&o.timeout, "timeout", 25*time.Second, "give up after this long (with -aws: default 3m; with -fanout: 1m)")
	fs.BoolVar(&o.verbose, "v", false, "show the Loader's own logs")
	fs.BoolVar(&o.aggregate, "aggregate", false, "write every record as a KPL aggregated record (the Loader de-aggregates it)")
	fs.BoolVar(&o.fanout, "fanout", false, "read with enhanced fan-out (SubscribeToShard) instead of GetRecords")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	timeoutSet := false
	fs.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	switch {
	case o.useAWS && !timeoutSet:
		o.timeout = 3 * time.Minute // AWS takes a while to create and split a stream
	case o.fanout && !timeoutSet:
		// A restarted Loader may wait a few seconds for a subscription
		// of the killed one to be released (kinesis-local holds it 5 s
		// or more), and a closed shard's subscription may idle a while.
		o.timeout = time.Minute
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("-timeout %v: must be positive", o.timeout)
	}
	return o, nil
}

// run is the whole demo. It returns nil when every check passed.
func run(ctx context.Context, stdout io.Writer, args []string) (err error) {
	out := &printer{w: stdout}
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("the demo did not finish within -timeout %v", o.timeout))
	defer cancel()

	api, where, err := connect(ctx, o)
	if err != nil {
		return err
	}
	dir, what := o.dir, "kept"
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tidemark-quickstart-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		what = "temporary, removed at exit"
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	d := &demo{
		out:    out,
		api:    api,
		stream: fmt.Sprintf("tidemark-quickstart-%d", time.Now().UnixNano()),
		dir:    dir,
		logger: logger,
		label:  map[string]string{},

		aggregate: o.aggregate,
		fanout:    o.fanout,
	}
	out.printf("tidemark quickstart: the LATEST gap, and how tidemark closes it\n")
	out.printf("  Kinesis: %s\n", where)
	out.printf("  journal: %s (%s)\n", dir, what)
	out.printf("  stream:  %s\n", d.stream)
	if o.aggregate {
		out.printf("  records: KPL aggregated (the Loader de-aggregates them)\n")
	}
	if o.fanout {
		out.printf("  reading: enhanced fan-out, consumer %s\n", fanOutConsumer)
	}
	defer d.cleanup()
	if err := d.steps(ctx); err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", err, cause)
		}
		return err
	}
	return nil
}

// connect returns the Kinesis the demo runs on, and says which it is.
func connect(ctx context.Context, o options) (kinesistest.API, string, error) {
	if o.endpoint == "" && !o.useAWS {
		// An in-memory Kinesis: no account, no network, and the limits of
		// a real shard (5 GetRecords calls/s, 2 MiB/s read, 1,000 records/s
		// write), so the Loader is paced as it would be against AWS.
		return kinesistest.New(), "in-memory (kinesistest.New(), real per-shard limits)", nil
	}
	var loadOpts []func(*config.LoadOptions) error
	if o.endpoint != "" {
		// An emulator needs no instance role: do not ask the EC2 metadata
		// service for one.
		loadOpts = append(loadOpts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, "", fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if o.endpoint == "" {
		if cfg.Region == "" {
			return nil, "", errors.New("-aws: no region in the AWS configuration (set AWS_REGION)")
		}
		return kinesis.NewFromConfig(cfg), fmt.Sprintf("AWS, region %s", cfg.Region), nil
	}
	// An emulator checks no credentials, but the SDK signs every request:
	// give it dummy ones when the environment has none.
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cfg.Credentials.Retrieve(cctx)
	cancel()
	if err != nil {
		cfg.Credentials = credentials.NewStaticCredentialsProvider("quickstart", "quickstart", "")
	}
	client := kinesis.NewFromConfig(cfg, func(ko *kinesis.Options) {
		ko.BaseEndpoint = aws.String(o.endpoint)
		if o.fanout {
			// kinesis-local's SubscribeToShard omits the initial-response
			// event the SDK waits for: this transport supplies it. For
			// local testing only (see package kinesislocal).
			ko.HTTPClient = &http.Client{Transport: kinesislocal.Transport(nil)}
		}
	})
	return client, fmt.Sprintf("%s (region %s)", o.endpoint, cfg.Region), nil
}

// fanOutConsumer is the consumer the Loaders read with under -fanout.
const fanOutConsumer = "tidemark-quickstart"

// demo holds what the steps share.
type demo struct {
	out    *printer
	api    kinesistest.API
	stream string
	dir    string
	logger *slog.Logger

	label   map[string]string         // sequence number -> "R4", to print positions
	written []written                 // every record written, in order
	parent  string                    // the stream's one shard, split in step 6
	start   scan.Position             // the parent's resolved start (step 2)
	sink    *recorder                 // the restarted Loader's Sink (step 5)
	store   *kinesisload.JournalStore // the restarted Loader's store (step 5)
	second  *loader                   // the restarted Loader (step 5)

	stops []func() // stop what is still running when run returns

	aggregate bool // write KPL aggregated records (-aggregate)
	fanout    bool // read with enhanced fan-out (-fanout)
}

// written is one record the demo wrote.
type written struct {
	label, shard, seq string
}

// steps runs the seven steps in order.
func (d *demo) steps(ctx context.Context) error {
	if err := d.createStream(ctx); err != nil {
		return fmt.Errorf("creating the stream: %w", err)
	}
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"step 1", d.step1History},
		{"steps 2 to 4", d.step2to4LatestGap},
		{"step 5", d.step5Restart},
		{"step 6", d.step6Split},
		{"step 7", d.step7Summary},
	} {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return nil
}

func (d *demo) createStream(ctx context.Context) error {
	_, err := d.api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(d.stream), ShardCount: aws.Int32(1)})
	if err != nil {
		return err
	}
	d.stops = append(d.stops, func() {
		// The in-memory Kinesis vanishes with the process; a real stream
		// costs money until it is deleted.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// With -fanout the stream has the Loaders' consumer: Kinesis
		// deletes a stream with consumers only when told to.
		in := &kinesis.DeleteStreamInput{StreamName: aws.String(d.stream), EnforceConsumerDeletion: aws.Bool(d.fanout)}
		if _, err := d.api.DeleteStream(ctx, in); err != nil {
			d.out.printf("  (could not delete stream %s: %v)\n", d.stream, err)
		}
	})
	if err := kinesistest.WaitActive(ctx, d.api, d.stream); err != nil {
		return err
	}
	shards, err := d.listShards(ctx)
	if err != nil {
		return err
	}
	d.parent = aws.ToString(shards[0].ShardId)
	return nil
}

// cleanup stops whatever is still running, newest first.
func (d *demo) cleanup() {
	for _, stop := range slices.Backward(d.stops) {
		stop()
	}
}

// Step 1: a stream that already holds records.
func (d *demo) step1History(ctx context.Context) error {
	d.out.printf("\n1. A stream with history\n")
	for _, r := range []string{"R1", "R2", "R3"} {
		if err := d.put(ctx, r, ""); err != nil {
			return err
		}
	}
	d.out.printf("   R1..R3 were written before any reader started. A reader that starts at\n")
	d.out.printf("   LATEST must not read them: LATEST means \"only what arrives from now on\".\n")
	// T0, the start time LATEST resolves at, is Kinesis's clock read from
	// its Date header, whole seconds floored: records of the second before
	// the start may count as after it. Let R1..R3 be older than that.
	d.out.printf("   (Waiting 2 s: tidemark reads Kinesis's clock from its Date header, to the\n")
	d.out.printf("   second, and delivers the second before the start rather than risk a gap.)\n")
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Steps 2 to 4: a Loader starts at LATEST, R4 and R5 arrive, and the
// reader dies before its first commit.
func (d *demo) step2to4LatestGap(ctx context.Context) error {
	d.out.printf("\n2. A Loader starts at LATEST\n")
	d.out.printf("   LATEST is not a place in the shard: Kinesis reads it as \"after the newest\n")
	d.out.printf("   record at the moment you ask\". A reader that stores the word LATEST and asks\n")
	d.out.printf("   again later gets a later place. So before reading anything, the Loader\n")
	d.out.printf("   resolves LATEST into the sequence number of the newest record and journals it.\n")

	// Your program only sets Config.Dir: the Loader then opens the journal
	// itself and locks the directory while it runs. The demo opens the
	// journal itself, and gives the Loader a store built on it, only so
	// that it can show you what is in the store while the Loader runs.
	j, err := journal.Open(d.dir, journal.DefaultConfig())
	if err != nil {
		return err
	}
	closeJournal := once(func() { _ = j.Close() })
	d.stops = append(d.stops, closeJournal)
	store, err := kinesisload.NewJournalStore(ctx, j, 0)
	if err != nil {
		return err
	}

	// This reader's Sink takes the first batch and never finishes with it,
	// as when the destination hangs or the host is about to be killed.
	handed := make(chan []string, 1)
	stuck := kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		select {
		case handed <- labels(b.Records):
		default:
		}
		<-ctx.Done() // a Sink must honour ctx: it ends when the Loader is stopped hard
		return ctx.Err()
	})
	initDone := newInitHook(d.out)
	first, err := d.newLoader(stuck, store, initDone)
	if err != nil {
		return err
	}
	reader := startLoader(ctx, first)
	d.stops = append(d.stops, func() { _ = reader.kill() })

	select {
	case <-initDone.done:
	case <-reader.done:
		return fmt.Errorf("the first Loader stopped during initialisation: %w", reader.result)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the first Loader to initialise: %w", ctx.Err())
	}
	if err := d.printJournal(ctx, store, "   The journal now holds, before a single record has been read:"); err != nil {
		return err
	}
	stored, err := store.Load(ctx, d.stream)
	if err != nil {
		return err
	}
	d.start = stored[d.parent].Position
	if want := scan.AfterSequence(d.seqOf("R3")); !d.start.Equal(want) {
		return fmt.Errorf("check failed: LATEST of %s resolved to %v, want %v (just after R3)", d.parent, d.start, want)
	}
	d.out.printf("   That is a concrete position, just after R3, and it is already durable.\n")

	d.out.printf("\n3. New records arrive\n")
	for _, r := range []string{"R4", "R5"} {
		if err := d.put(ctx, r, ""); err != nil {
			return err
		}
	}
	var got []string
	select {
	case got = <-handed:
	case <-reader.done:
		return fmt.Errorf("the first Loader stopped before it read R4: %w", reader.result)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the first Loader to read R4: %w", ctx.Err())
	}
	d.out.printf("   The reader fetched %s and handed them to its Sink. The Sink has not\n", strings.Join(got, ", "))
	d.out.printf("   accepted them yet, so nothing is committed: the stored position has not moved.\n")

	d.out.printf("\n4. The reader is killed before its first commit\n")
	err = reader.kill() // cancel Run's context: a hard stop, like a crash
	closeJournal()      // the process is gone: its journal is closed, its lock released
	if !errors.Is(err, context.Canceled) {
		return fmt.Errorf("the first Loader's Run returned %v, want context.Canceled", err)
	}
	d.out.printf("   Its Sink hung and the process was stopped hard (Run's context cancelled).\n")
	d.out.printf("   Run returned: %v. %s never reached the destination.\n", err, strings.Join(got, ", "))
	return nil
}

// Step 5: the restart.
func (d *demo) step5Restart(ctx context.Context) error {
	d.out.printf("\n5. The restart\n")
	d.out.printf("   A naive consumer stored the word LATEST (KCL writes it to its lease table,\n")
	d.out.printf("   Druid keeps UNREAD_LATEST, most Go libraries keep nothing). On restart it asks\n")
	d.out.printf("   Kinesis for LATEST again. Here is that call, for real:\n")
	n, err := d.readAtLatest(ctx)
	if err != nil {
		return err
	}
	d.out.printf("     GetShardIterator(%s, LATEST) + GetRecords -> %d records\n", d.parent, n)
	if n != 0 {
		return fmt.Errorf("check failed: GetRecords at LATEST returned %d records, want 0", n)
	}
	d.out.printf("   LATEST now means \"after R5\": the naive consumer skips R4 and R5, silently\n")
	d.out.printf("   and for ever. No error, no log line: the records are just never seen.\n")

	d.out.printf("   tidemark's restarted Loader opens the same journal instead.\n")
	j, err := journal.Open(d.dir, journal.DefaultConfig())
	if err != nil {
		return err
	}
	d.stops = append(d.stops, once(func() { _ = j.Close() }))
	store, err := kinesisload.NewJournalStore(ctx, j, 0)
	if err != nil {
		return err
	}
	if err := d.printJournal(ctx, store, "   It holds, unchanged since step 2:"); err != nil {
		return err
	}
	stored, err := store.Load(ctx, d.stream)
	if err != nil {
		return err
	}
	if got := stored[d.parent].Position; !got.Equal(d.start) {
		return fmt.Errorf("check failed: after the kill the journal holds %v for %s, want the resolved start %v", got, d.parent, d.start)
	}

	d.sink, d.store = &recorder{out: d.out}, store
	initDone := newInitHook(d.out)
	second, err := d.newLoader(d.sink, store, initDone, d.sink)
	if err != nil {
		return err
	}
	reader := startLoader(ctx, second)
	d.second = reader
	d.stops = append(d.stops, func() { _ = reader.kill() })
	select {
	case init := <-initDone.done:
		if init.Resolved != 0 {
			return fmt.Errorf("check failed: the restarted Loader resolved %d shards again, want 0", init.Resolved)
		}
	case <-reader.done:
		return fmt.Errorf("the restarted Loader stopped during initialisation: %w", reader.result)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the restarted Loader to initialise: %w", ctx.Err())
	}
	if err := d.waitDelivered(ctx, reader, "R4", "R5"); err != nil {
		return err
	}
	if early := d.sink.deliveredAny("R1", "R2", "R3"); len(early) > 0 {
		return fmt.Errorf("check failed: the restarted Loader delivered %v, from before the resolved start", early)
	}
	d.out.printf("   R4 and R5 delivered, and not R1..R3: nothing lost, nothing from before the start.\n")
	return nil
}

// Step 6: a split. The children must wait until their parent is COMPLETED.
func (d *demo) step6Split(ctx context.Context) error {
	d.out.printf("\n6. A split\n")
	d.out.printf("   Resharding closes a shard (the parent) and opens two children. Records of one\n")
	d.out.printf("   key go to the parent first, then to a child: to keep each key in order, the\n")
	d.out.printf("   Loader reads a child only once its parent is COMPLETED (all of its records\n")
	d.out.printf("   delivered and committed). Until then the child is PENDING_PARENT.\n")

	// Demo only: the Sink holds the batch that carries R8, the parent's last
	// record, until the children have been seen waiting. A real Sink stores
	// and returns.
	held, release := d.sink.holdAt("R8")
	d.stops = append(d.stops, release)
	for _, r := range []string{"R6", "R7", "R8"} {
		if err := d.put(ctx, r, ""); err != nil {
			return err
		}
	}
	select {
	case <-held:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the Loader to read R8: %w", ctx.Err())
	}
	d.out.printf("   The Sink is busy with the batch that holds R8 (held by the demo).\n")

	children, err := d.split(ctx)
	if err != nil {
		return err
	}
	d.out.printf("   Split %s into %s and %s.\n", d.parent, children[0], children[1])
	for i, r := range []string{"R9", "R10", "R11", "R12"} {
		child := children[i%2]
		if err := d.put(ctx, r, child.startHashKey); err != nil {
			return err
		}
	}
	// The Loader lists the shards every Config.ListShardsInterval and
	// journals the children it finds. (It would also list at once when the
	// parent's reader reaches the end of the parent, but that reader is
	// waiting for the Sink.)
	err = d.waitJournal(ctx, func(p map[string]kinesisload.ShardProgress) bool {
		return p[children[0].id].State == kinesisload.StatePendingParent &&
			p[children[1].id].State == kinesisload.StatePendingParent
	})
	if err != nil {
		return fmt.Errorf("waiting for the children to be journaled as PENDING_PARENT: %w", err)
	}
	d.out.printf("   The Loader found the children. They hold records already, but the parent\n")
	d.out.printf("   still has R8 in flight:\n")
	if err := d.printJournal(ctx, d.store, "   The journal holds:"); err != nil {
		return err
	}
	d.out.printf("   Now the Sink finishes R8. Watch the states change, then the children be read:\n")
	release()
	if err := d.waitDelivered(ctx, d.second, "R6", "R7", "R8", "R9", "R10", "R11", "R12"); err != nil {
		return err
	}
	return nil
}

// Step 7: the summary and the self-check.
func (d *demo) step7Summary(ctx context.Context) error {
	d.out.printf("\n7. Summary\n")
	// Close stops a Loader like http.Server.Shutdown: in-flight batches
	// finish and commit, then Run returns ErrClosed.
	if err := d.second.close(ctx); !errors.Is(err, kinesisload.ErrClosed) {
		return fmt.Errorf("the restarted Loader's Run returned %v, want %v", err, kinesisload.ErrClosed)
	}
	var after []string
	for _, w := range d.written {
		if scan.CompareSequence(w.seq, d.start.Sequence) > 0 || w.shard != d.parent {
			after = append(after, w.label)
		}
	}
	failures := d.sink.check(d.written, d.start, d.parent)
	if len(failures) > 0 {
		for _, f := range failures {
			d.out.printf("   FAIL: %s\n", f)
		}
		return fmt.Errorf("%d checks failed: %s", len(failures), strings.Join(failures, "; "))
	}
	d.out.printf("   OK: every record written after the resolved start was delivered: %s.\n", strings.Join(after, " "))
	d.out.printf("   Each shard's records came in order, and each was accepted once; the children's\n")
	d.out.printf("   only after their parent was COMPLETED. R1..R3, from before the start, never came.\n")
	d.out.printf("   R4 and R5 were handed to the killed reader's Sink first, which never accepted\n")
	d.out.printf("   them; so they came again (delivery is at least once, never zero times).\n")
	d.out.printf("   A consumer that stored the word LATEST would have lost them.\n")
	return nil
}

// newLoader makes a Loader on the demo's stream. In your program: set
// Stream, Sink and Dir, and keep the other defaults.
func (d *demo) newLoader(sink kinesisload.Sink, store *kinesisload.JournalStore, hooks ...kinesisload.Hook) (*kinesisload.Loader, error) {
	cfg := kinesisload.DefaultConfig() // StartPosition: LATEST
	cfg.Stream = d.stream
	cfg.Sink = sink
	cfg.IdleWait = 200 * time.Millisecond    // poll an idle shard 5 times a second (default 1 s)
	cfg.ListShardsInterval = time.Second     // notice new shards quickly (default 30 s)
	cfg.SinkBackoff = 100 * time.Millisecond // retry a failing Sink quickly (default 1 s)
	if d.fanout {
		cfg.ReadMode = kinesisload.ReadFanOut // SubscribeToShard: records are pushed
		cfg.ConsumerName = fanOutConsumer     // registered by the first Loader, reused by the second
	}
	return kinesisload.New(cfg,
		kinesisload.WithClient(d.api), // default: a client from the standard AWS configuration
		kinesisload.WithStore(store),  // default: a journal in cfg.Dir
		kinesisload.WithLogger(d.logger),
		kinesisload.WithHooks(hooks...),
	)
}

// put writes one record whose payload is its label. An explicit hash key
// chooses the shard; without one the partition key does.
func (d *demo) put(ctx context.Context, label, explicitHashKey string) error {
	in := &kinesis.PutRecordInput{StreamName: aws.String(d.stream), PartitionKey: aws.String("key-" + label), Data: []byte(label)}
	if explicitHashKey != "" {
		in.ExplicitHashKey = aws.String(explicitHashKey)
	}
	if d.aggregate {
		// What a KPL producer writes for a record it sends alone: an
		// aggregate of one user record, keyed like it.
		e, err := kinesistest.Aggregate([]kinesistest.UserRecord{{PartitionKey: *in.PartitionKey, ExplicitHashKey: explicitHashKey, Data: in.Data}})
		if err != nil {
			return fmt.Errorf("writing %s: %w", label, err)
		}
		in.Data = e.Data
	}
	res, err := d.api.PutRecord(ctx, in)
	if err != nil {
		return fmt.Errorf("writing %s: %w", label, err)
	}
	w := written{label: label, shard: aws.ToString(res.ShardId), seq: aws.ToString(res.SequenceNumber)}
	d.written = append(d.written, w)
	d.label[w.seq] = label
	d.out.printf("   put %-3s -> %s  seq %s\n", label, w.shard, w.seq)
	return nil
}

func (d *demo) seqOf(label string) string {
	for _, w := range d.written {
		if w.label == label {
			return w.seq
		}
	}
	return ""
}

// readAtLatest does what a consumer that stored LATEST does on restart, and
// returns how many records it got.
func (d *demo) readAtLatest(ctx context.Context) (int, error) {
	it, err := d.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName: aws.String(d.stream), ShardId: aws.String(d.parent), ShardIteratorType: types.ShardIteratorTypeLatest,
	})
	if err != nil {
		return 0, err
	}
	for attempt := 1; ; attempt++ {
		res, err := d.api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
		var throttled *types.ProvisionedThroughputExceededException
		if errors.As(err, &throttled) && attempt < 10 {
			// 5 GetRecords calls per second per shard: the killed
			// reader may have used this second's calls.
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		return len(res.Records), nil
	}
}

// split splits the parent at the middle of its hash-key range and returns
// the two children, lower range first.
func (d *demo) split(ctx context.Context) ([]child, error) {
	shards, err := d.listShards(ctx)
	if err != nil {
		return nil, err
	}
	var lo, hi big.Int
	for _, s := range shards {
		if aws.ToString(s.ShardId) == d.parent {
			lo.SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
			hi.SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
		}
	}
	mid := new(big.Int).Add(&lo, &hi)
	mid.Add(mid, big.NewInt(1)).Rsh(mid, 1)
	_, err = d.api.SplitShard(ctx, &kinesis.SplitShardInput{
		StreamName: aws.String(d.stream), ShardToSplit: aws.String(d.parent), NewStartingHashKey: aws.String(mid.String()),
	})
	if err != nil {
		return nil, fmt.Errorf("splitting %s: %w", d.parent, err)
	}
	if err := kinesistest.WaitActive(ctx, d.api, d.stream); err != nil {
		return nil, err
	}
	if shards, err = d.listShards(ctx); err != nil {
		return nil, err
	}
	var children []child
	for _, s := range shards {
		if aws.ToString(s.ParentShardId) == d.parent {
			children = append(children, child{id: aws.ToString(s.ShardId), startHashKey: aws.ToString(s.HashKeyRange.StartingHashKey)})
		}
	}
	if len(children) != 2 {
		return nil, fmt.Errorf("after splitting %s, ListShards shows %d children, want 2", d.parent, len(children))
	}
	slices.SortFunc(children, func(a, b child) int {
		var x, y big.Int
		x.SetString(a.startHashKey, 10)
		y.SetString(b.startHashKey, 10)
		return x.Cmp(&y)
	})
	return children, nil
}

// child is a shard born of the split.
type child struct {
	id, startHashKey string
}

func (c child) String() string { return c.id }

func (d *demo) listShards(ctx context.Context) ([]types.Shard, error) {
	res, err := d.api.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(d.stream)})
	if err != nil {
		return nil, err
	}
	if len(res.Shards) == 0 {
		return nil, fmt.Errorf("stream %s has no shards", d.stream)
	}
	return res.Shards, nil
}

// printJournal prints the stored progress of every shard, from the store
// the Loader saves into.
func (d *demo) printJournal(ctx context.Context, store *kinesisload.JournalStore, title string) error {
	progress, err := store.Load(ctx, d.stream)
	if err != nil {
		return err
	}
	d.out.printf("%s\n", title)
	for _, id := range slices.Sorted(maps.Keys(progress)) {
		p := progress[id]
		line := fmt.Sprintf("     %s  %-14s %s", id, p.State, d.describe(p.Position))
		if len(p.Parents) > 0 {
			line += fmt.Sprintf("  (parent %s)", strings.Join(p.Parents, ", "))
		}
		d.out.printf("%s\n", line)
	}
	return nil
}

// describe prints a position with the label of its record.
func (d *demo) describe(p scan.Position) string {
	switch p.Kind {
	case scan.KindAfterSequence:
		return fmt.Sprintf("AFTER_SEQUENCE_NUMBER:%s (just after %s)", p.Sequence, d.label[p.Sequence])
	case scan.KindAtSequence:
		return fmt.Sprintf("AT_SEQUENCE_NUMBER:%s (%s)", p.Sequence, d.label[p.Sequence])
	case scan.KindTrimHorizon:
		return "TRIM_HORIZON (from its first record)"
	}
	return p.String()
}

// waitJournal waits until the stored progress satisfies ok.
func (d *demo) waitJournal(ctx context.Context, ok func(map[string]kinesisload.ShardProgress) bool) error {
	for {
		p, err := d.store.Load(ctx, d.stream)
		if err != nil {
			return err
		}
		if ok(p) {
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitDelivered waits until the Sink accepted every record in want. It
// fails at once if the Loader stops.
func (d *demo) waitDelivered(ctx context.Context, l *loader, want ...string) error {
	for {
		missing := d.sink.missing(want)
		if len(missing) == 0 {
			return nil
		}
		var done <-chan struct{}
		if l != nil {
			done = l.done
		}
		select {
		case <-done:
			return fmt.Errorf("the Loader stopped before it delivered %v: %w", missing, l.result)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %v to be delivered: %w", missing, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// recorder is the restarted Loader's Sink: it prints every batch it
// accepts, and, as a HookShardState, every durable change of a shard's
// state, in the order they happen, and keeps both for the final check.
// A real Sink writes b.Records to its destination and returns nil only
// once they are stored.
type recorder struct {
	out *printer

	mu     sync.Mutex
	events []event
	hold   string        // demo only: the label of a record whose batch waits for gate
	held   chan struct{} // closed when that batch arrived
	gate   chan struct{} // closed to let it through
}

var (
	_ kinesisload.Sink           = (*recorder)(nil)
	_ kinesisload.HookShardState = (*recorder)(nil)
)

// event is an accepted record or a state change.
type event struct {
	shard string
	label string                 // an accepted record
	state kinesisload.ShardState // a state change, to this state
}

// Deliver implements kinesisload.Sink.
func (r *recorder) Deliver(ctx context.Context, b kinesisload.Batch) error {
	got := labels(b.Records)
	r.mu.Lock()
	gate, held := r.gate, r.held
	hold := gate != nil && slices.Contains(got, r.hold)
	r.mu.Unlock()
	if hold {
		close(held)
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range b.Records {
		r.events = append(r.events, event{shard: b.ShardID, label: string(rec.Data)})
	}
	r.out.printf("   sink <- %s: %s\n", b.ShardID, strings.Join(got, " "))
	return nil
}

// OnShardState implements kinesisload.HookShardState.
func (r *recorder) OnShardState(e kinesisload.ShardStateChanged) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{shard: e.ShardID, state: e.To})
	from := e.From.String()
	if e.From == 0 {
		from = "new"
	}
	r.out.printf("   state  %s: %s -> %s\n", e.ShardID, from, e.To)
}

// holdAt makes the batch that carries the record labelled label wait until
// release is called; held is closed when that batch arrives.
func (r *recorder) holdAt(label string) (held <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold, r.held, r.gate = label, make(chan struct{}), make(chan struct{})
	return r.held, once(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		close(r.gate)
		r.gate = nil
	})
}

// missing returns the labels in want that the Sink has not accepted.
func (r *recorder) missing(want []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, w := range want {
		if !slices.ContainsFunc(r.events, func(e event) bool { return e.label == w }) {
			out = append(out, w)
		}
	}
	return out
}

// deliveredAny returns the labels in these that the Sink has accepted.
func (r *recorder) deliveredAny(these ...string) []string {
	missing := r.missing(these)
	var out []string
	for _, l := range these {
		if !slices.Contains(missing, l) {
			out = append(out, l)
		}
	}
	return out
}

// check compares what the Sink accepted with what was written and returns
// every violated promise.
func (r *recorder) check(written []written, start scan.Position, parent string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fails []string
	// Per shard: exactly the records after the start, once each, in order.
	want := map[string][]string{}
	for _, w := range written {
		if w.shard == parent && scan.CompareSequence(w.seq, start.Sequence) <= 0 {
			continue // before the resolved start: must not be delivered
		}
		want[w.shard] = append(want[w.shard], w.label)
	}
	got := map[string][]string{}
	for _, e := range r.events {
		if e.label != "" {
			got[e.shard] = append(got[e.shard], e.label)
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(got[shard], want[shard]) {
			fails = append(fails, fmt.Sprintf("%s: delivered %v, want %v (each once, in order)", shard, got[shard], want[shard]))
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[shard]; !ok {
			fails = append(fails, fmt.Sprintf("%s: delivered %v, want nothing", shard, got[shard]))
		}
	}
	// Children after their parent: nothing of a child before the parent's
	// COMPLETED state change.
	completed := slices.IndexFunc(r.events, func(e event) bool {
		return e.shard == parent && e.state == kinesisload.StateCompleted
	})
	if completed < 0 {
		fails = append(fails, fmt.Sprintf("%s never reported COMPLETED", parent))
	}
	for i, e := range r.events {
		if e.label != "" && e.shard != parent && (completed < 0 || i < completed) {
			fails = append(fails, fmt.Sprintf("%s of child %s was delivered before %s was COMPLETED", e.label, e.shard, parent))
		}
	}
	return fails
}

// initHook prints a Loader's initialisation and tells the demo it is
// journaled. The Loader calls it before it reads any shard.
type initHook struct {
	out  *printer
	done chan kinesisload.InitResolved // buffered: a hook must not block
}

func newInitHook(out *printer) initHook {
	return initHook{out: out, done: make(chan kinesisload.InitResolved, 1)}
}

// OnInitResolved implements kinesisload.HookInitResolved.
func (h initHook) OnInitResolved(e kinesisload.InitResolved) {
	resolved := "nothing to resolve"
	if e.Resolved > 0 {
		resolved = fmt.Sprintf("%d shard(s) resolved by the %s strategy", e.Resolved, e.Strategy)
		if e.Unanswered > 0 {
			resolved += fmt.Sprintf(" (%d probe(s) unanswered, taken for \"no record there\")", e.Unanswered)
		}
	}
	h.out.printf("   Initialised in %v: %s, %d reused from the journal.\n",
		e.Duration.Round(10*time.Microsecond), resolved, e.Reused)
	select {
	case h.done <- e:
	default:
	}
}

// loader is a Loader running in its own goroutine.
type loader struct {
	l      *kinesisload.Loader
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	result error         // what Run returned; read it once done is closed
}

func startLoader(ctx context.Context, l *kinesisload.Loader) *loader {
	ctx, cancel := context.WithCancel(ctx)
	r := &loader{l: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.result = l.Run(ctx)
	}()
	return r
}

// wait returns Run's result once Run has returned. It may be called any
// number of times, also after a select on done.
func (r *loader) wait() error {
	<-r.done
	return r.result
}

// kill stops the Loader hard, as a crash would: Run's context is cancelled,
// in-flight deliveries are cancelled and nothing more is committed.
func (r *loader) kill() error {
	r.cancel()
	return r.wait()
}

// close stops the Loader gracefully: in-flight batches finish and commit.
// It returns Run's result, [kinesisload.ErrClosed] after a clean stop.
func (r *loader) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.l.Close(ctx); err != nil {
		return fmt.Errorf("closing the Loader: %w", err)
	}
	return r.wait()
}

// printer serialises the output of the demo, its Sink and its hooks.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// Write lets the Loader's logger share the printer.
func (p *printer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Write(b)
}

func labels(rs []kinesisload.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Data)
	}
	return out
}

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

func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}
