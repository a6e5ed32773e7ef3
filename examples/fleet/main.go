// Command fleet shows tidemark's fleet mode: three Loaders (hosts) share
// one Kinesis stream through a DynamoDB table, a host dies and its shards
// move to the others, a new host joins and takes its share, and at the
// end it checks that nothing was lost.
//
//	go run ./examples/fleet            (from examples/fleet: go run .)
//
// It needs no AWS account: it starts kinesis-local and dynalite itself
// (installed by scripts/install-emulators.sh, as the tests use them) and
// runs the hosts in this one process, each with its own Kinesis and
// DynamoDB clients and its own dynamo Coordinator. A host "dies" the way a
// killed process does: every call of its clients fails from then on and
// its Loader is never closed, so its heartbeats stop and the other hosts
// take its shards after the lease duration. It exits with status 0 when
// every check passed, and non-zero, with the reason on stderr, when one
// failed.
//
// Flags:
//
//	-timeout D   give up after D (default 2m)
//	-v           show the Loaders' own logs
//
// The inspect subcommand prints a fleet's table (owners, epochs, positions,
// lineage, the roster of heartbeats) for a stream, from any DynamoDB:
//
//	go run ./examples/fleet inspect -table orders-loader -stream orders
//
// It reads the table with consistent reads (dynamo's Coordinator.Inspect:
// the identity item, the stream's items, and the positions of each host
// that owns shards) and writes nothing. The AWS configuration comes from the environment and
// the shared files; -endpoint URL reads a DynamoDB at URL instead (e.g.
// dynalite), with dummy credentials when there are none.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
	"github.com/tidemark/tidemark/scan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "inspect" {
		err = inspectMain(ctx, os.Stdout, os.Args[2:])
	} else {
		err = run(ctx, os.Stdout, os.Args[1:])
	}
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "fleet: FAIL:", err)
		os.Exit(1)
	}
}

// leaseDuration is the hosts' lease duration: short, so that the demo
// shows a failover in seconds (the default is 10 s).
const leaseDuration = 3 * time.Second

const (
	streamName = "orders"
	tableName  = "orders-loader"
	shardCount = 6
)

// run is the demo. It writes its story to stdout.
func run(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stdout)
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	verbose := fs.Bool("v", false, "show the Loaders' own logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (the subcommand is inspect)", fs.Args())
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	tmp, err := os.MkdirTemp("", "tidemark-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	out := &printer{w: stdout}
	out.printf("Starting kinesis-local and dynalite (no AWS account needed)...\n")
	kin, err := emulator.Launch(emulator.KinesisLocal, tmp)
	if err != nil {
		return err
	}
	defer kin.Stop()
	dyn, err := emulator.Launch(emulator.Dynalite, tmp)
	if err != nil {
		return err
	}
	defer dyn.Stop()

	d := &demo{out: out, kinEndpoint: kin.Endpoint, dynEndpoint: dyn.Endpoint, sink: &fleetSink{}, hosts: map[string]*host{}}
	d.logger = slog.New(slog.DiscardHandler)
	if *verbose {
		d.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	d.api = kinesis.New(kinesis.Options{Region: emulator.Region, BaseEndpoint: aws.String(kin.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTIDEMARKDEMO", "secret", "")})
	defer func() {
		for _, h := range d.hosts {
			h.stop()
		}
	}()
	return d.story(ctx)
}

// demo is the running fleet.
type demo struct {
	out         *printer
	kinEndpoint string
	dynEndpoint string
	api         *kinesis.Client // the producer's and the checks'
	logger      *slog.Logger
	sink        *fleetSink
	hosts       map[string]*host
	inspector   *dynamo.Coordinator
	written     []string
	next        int
}

func (d *demo) story(ctx context.Context) error {
	if _, err := d.api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(streamName), ShardCount: aws.Int32(shardCount)}); err != nil {
		return fmt.Errorf("create stream %s: %w", streamName, err)
	}
	if err := emulator.WaitStreamActive(ctx, d.api, streamName); err != nil {
		return err
	}
	d.out.printf("Stream %s has %d shards; the hosts share it through the DynamoDB table %s (lease duration %v).\n\n", streamName, shardCount, tableName, leaseDuration)

	// 1. Three hosts.
	d.out.printf("1. Three hosts start: one of them initialises the stream for the fleet, and they split the shards.\n")
	for _, id := range []string{"host-a", "host-b", "host-c"} {
		if err := d.start(ctx, id); err != nil {
			return err
		}
	}
	var err error
	d.inspector, err = dynamo.New(dynamodb.New(dynamoOptions(d.dynEndpoint, nil)), dynamo.Config{Table: tableName, HostID: "inspector"})
	if err != nil {
		return err
	}
	info, err := d.waitTable(ctx, "every host owns 2 shards", func(info dynamo.StreamInfo) bool {
		return info.Initialised && balanced(info, []string{"host-a", "host-b", "host-c"}, 2)
	})
	if err != nil {
		return err
	}
	printTable(d.out, info)

	// A producer writes from now on.
	prodCtx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan error, 1)
	go func() { prodDone <- d.produce(prodCtx) }()
	defer stopProducer()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}

	// 2. host-b dies.
	victim := "host-b"
	held := ownedBy(info, victim)
	d.out.printf("\n2. %s dies (like a SIGKILL: no Close, its calls fail from now on) holding %s.\n", victim, strings.Join(held, ", "))
	died := time.Now()
	d.hosts[victim].kill()
	info, err = d.waitTable(ctx, "the dead host's shards have new owners", func(info dynamo.StreamInfo) bool {
		for _, id := range held {
			if o := info.Shards[id].Owner; o == "" || o == victim {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	d.out.printf("   After %v its shards moved (a new owner, a new epoch: the dead host could commit nothing more):\n", time.Since(died).Round(100*time.Millisecond))
	for _, id := range held {
		d.out.printf("     %s -> %s (epoch %d)\n", id, info.Shards[id].Owner, info.Shards[id].Epoch)
	}

	// 3. host-d joins.
	d.out.printf("\n3. host-d joins: the others hand it shards (planned moves: each batch in flight finishes and commits first).\n")
	if err := d.start(ctx, "host-d"); err != nil {
		return err
	}
	info, err = d.waitTable(ctx, "host-d owns its share", func(info dynamo.StreamInfo) bool {
		return balanced(info, []string{"host-a", "host-c", "host-d"}, 2)
	})
	if err != nil {
		return err
	}
	printTable(d.out, info)

	// 4. Check.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	stopProducer()
	if err := <-prodDone; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("producer: %w", err)
	}
	d.out.printf("\n4. The producer stopped after %d records; waiting until the fleet delivered them all...\n", len(d.written))
	if err := d.waitDelivered(ctx); err != nil {
		return err
	}
	for _, id := range []string{"host-a", "host-c", "host-d"} {
		if err := d.hosts[id].close(ctx); err != nil {
			return err
		}
	}
	return d.summary(victim)
}

// summary prints what the Sinks got and fails when a record was lost or a
// duplicate came from anything but the dead host's uncommitted window.
func (d *demo) summary(victim string) error {
	got := d.sink.deliveries()
	count := map[string]int{}
	byHost := map[string]int{}
	for _, r := range got {
		count[r.data]++
		byHost[r.host]++
	}
	var lost []string
	for _, w := range d.written {
		if count[w] == 0 {
			lost = append(lost, w)
		}
	}
	dups := 0
	seenBy := map[string]string{}
	var badDups []string
	for _, r := range got {
		if first, ok := seenBy[r.data]; ok {
			dups++
			if first != victim {
				badDups = append(badDups, fmt.Sprintf("%s (first by %s, again by %s)", r.data, first, r.host))
			}
			continue
		}
		seenBy[r.data] = r.host
	}
	d.out.printf("\nSummary\n")
	d.out.printf("  written:    %d records\n", len(d.written))
	d.out.printf("  delivered:  %d deliveries (%s)\n", len(got), perHost(byHost))
	d.out.printf("  lost:       %d\n", len(lost))
	d.out.printf("  duplicates: %d (only records %s delivered but had not committed when it died may come twice)\n", dups, victim)
	switch {
	case len(lost) > 0:
		return fmt.Errorf("%d of %d records lost, e.g. %s", len(lost), len(d.written), lost[0])
	case len(badDups) > 0:
		return fmt.Errorf("%d duplicates not from the dead host's uncommitted window, e.g. %s", len(badDups), badDups[0])
	}
	d.out.printf("OK: nothing lost; a dead host's shards moved; a new host took its share.\n")
	return nil
}

func perHost(m map[string]int) string {
	var parts []string
	for _, h := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", h, m[h]))
	}
	return strings.Join(parts, ", ")
}

// host is one Loader with its own clients and Coordinator.
type host struct {
	id     string
	loader *kinesisload.Loader
	cut    *cutTransport
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (d *demo) start(ctx context.Context, id string) error {
	cut := &cutTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	coord, err := dynamo.New(dynamodb.New(dynamoOptions(d.dynEndpoint, cut)), dynamo.Config{Table: tableName, CreateTable: true, HostID: id, LeaseDuration: leaseDuration})
	if err != nil {
		return err
	}
	kc := kinesis.New(kinesis.Options{Region: emulator.Region, BaseEndpoint: aws.String(d.kinEndpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTIDEMARKDEMO", "secret", ""), HTTPClient: &http.Client{Transport: cut}})
	l, err := kinesisload.New(kinesisload.Config{
		Stream:             streamName,
		Sink:               d.sink.forHost(id),
		StartPosition:      scan.Latest(),
		IdleWait:           200 * time.Millisecond,
		ListShardsInterval: time.Second,
	}, kinesisload.WithClient(kc), kinesisload.WithCoordinator(coord), kinesisload.WithLogger(d.logger.With("host", id)))
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &host{id: id, loader: l, cut: cut, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- l.Run(rctx) }()
	d.hosts[id] = h
	return nil
}

// kill makes the host die: every call fails, and Run ends without Close.
func (h *host) kill() {
	h.once.Do(func() {
		h.cut.cut.Store(true)
		h.cancel()
		<-h.done
		h.cut.base.CloseIdleConnections()
	})
}

// close stops the host gracefully: a planned move of its shards.
func (h *host) close(ctx context.Context) error {
	var err error
	h.once.Do(func() {
		if err = h.loader.Close(ctx); err != nil {
			err = fmt.Errorf("%s: Close: %w", h.id, err)
		}
		if rerr := <-h.done; !errors.Is(rerr, kinesisload.ErrClosed) && err == nil {
			err = fmt.Errorf("%s: Run: %w", h.id, rerr)
		}
		h.cancel()
		h.cut.base.CloseIdleConnections()
	})
	return err
}

// stop ends the host however it is (at exit).
func (h *host) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h.close(ctx) != nil {
		h.kill()
	}
}

// cutTransport fails every request once cut: the network of a dead host.
type cutTransport struct {
	base *http.Transport
	cut  atomic.Bool
}

func (t *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.cut.Load() {
		return nil, errors.New("fleet demo: this host is dead")
	}
	return t.base.RoundTrip(req)
}

func dynamoOptions(endpoint string, rt http.RoundTripper) dynamodb.Options {
	o := dynamodb.Options{Region: emulator.Region, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTIDEMARKDEMO", "secret", "")}
	if rt != nil {
		o.HTTPClient = &http.Client{Transport: rt}
	}
	return o
}

// produce writes a record every 20 ms, each with a unique label, until
// ctx ends.
func (d *demo) produce(ctx context.Context) error {
	for {
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		d.next++
		data := fmt.Sprintf("order-%05d", d.next)
		_, err := d.api.PutRecord(context.WithoutCancel(ctx), &kinesis.PutRecordInput{StreamName: aws.String(streamName),
			PartitionKey: aws.String(data), Data: []byte(data)})
		if err != nil {
			return err
		}
		d.sink.mu.Lock()
		d.written = append(d.written, data)
		d.sink.mu.Unlock()
	}
}

func (d *demo) waitDelivered(ctx context.Context) error {
	for {
		got := map[string]bool{}
		for _, r := range d.sink.deliveries() {
			got[r.data] = true
		}
		missing := 0
		for _, w := range d.written {
			if !got[w] {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%d of %d records not delivered: %w", missing, len(d.written), err)
		}
	}
}

// waitTable polls the table until ok.
func (d *demo) waitTable(ctx context.Context, what string, ok func(dynamo.StreamInfo) bool) (dynamo.StreamInfo, error) {
	for {
		info, err := d.inspector.Inspect(ctx, streamName)
		if err == nil && ok(info) {
			return info, nil
		}
		if serr := sleep(ctx, 200*time.Millisecond); serr != nil {
			return info, fmt.Errorf("waiting until %s: %w (last read: %v)", what, serr, err)
		}
	}
}

// balanced reports whether each of hosts owns exactly n open shards.
func balanced(info dynamo.StreamInfo, hosts []string, n int) bool {
	owned := map[string]int{}
	for _, sh := range info.Shards {
		if sh.Progress.State != kinesisload.StateCompleted {
			owned[sh.Owner]++
		}
	}
	for _, h := range hosts {
		if owned[h] != n {
			return false
		}
	}
	return true
}

func ownedBy(info dynamo.StreamInfo, host string) []string {
	var ids []string
	for id, sh := range info.Shards {
		if sh.Owner == host {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// delivery is one record a host's Sink accepted.
type delivery struct{ host, data string }

// fleetSink records what every host's Sink accepted, in one order.
type fleetSink struct {
	mu  sync.Mutex
	log []delivery
}

func (s *fleetSink) forHost(host string) kinesisload.Sink {
	return kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range b.Records {
			s.log = append(s.log, delivery{host: host, data: string(r.Data)})
		}
		return nil
	})
}

func (s *fleetSink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// printer writes the story; errors are dropped (stdout).
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
