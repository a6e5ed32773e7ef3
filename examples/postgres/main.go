// Command postgres loads a Kinesis stream into PostgreSQL exactly once,
// with a tidemark Loader and the Sink of package
// github.com/tidemark/tidemark/kinesisload/pgsink, which stores each
// window of batches (every shard's records, with COPY, and every shard's
// checkpoint) in one transaction.
//
//	go run . -dsn postgres://user@127.0.0.1:5432/db
//
// It creates the tables if they do not exist, or upgrades those of an
// earlier version (pgsink.CreateSchema, which waits while the database is
// down), creates a stream
// with a new name, puts -records records on it, runs a Loader until every
// one of them is in the database, and prints what landed: rows and
// checkpoint per shard. It exits with status 0 when every record landed
// exactly once, and non-zero, with the reason on stderr, otherwise.
//
// Flags:
//
//	-dsn DSN       the PostgreSQL connection string (URL or key=value); empty
//	               means the libpq environment (PGHOST, PGPORT, PGUSER, ...)
//	               and its defaults
//	-endpoint URL  use the Kinesis at URL (for example a kinesis-local on
//	               http://127.0.0.1:4568, or a real regional endpoint) instead
//	               of the in-memory Kinesis of package kinesistest; the AWS
//	               configuration comes from the environment and the shared
//	               files, with region us-east-1 and dummy credentials when they
//	               have none. The stream is deleted at exit.
//	-dir DIR       keep the Loader's journal in DIR (default: a temporary
//	               directory, removed at exit)
//	-records N     how many records to put (default 200)
//	-shards N      how many shards the stream has (default 2)
//	-window D      close a window of batches across shards after D
//	               (Config.MaxBatchWait; default 200ms; 0: a window closes
//	               as soon as it holds a page, and grows with the load)
//	-timeout D     give up after D (default 30s; give real AWS a few
//	               minutes, since creating a stream takes a while there)
//
// Run it twice with the same -dir and -dsn: the second run reuses both, and
// still stores every record of its own stream exactly once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/pgsink"
	"github.com/tidemark/tidemark/scan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, os.Args[1:])
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "postgres:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	dsn      string
	endpoint string
	dir      string
	records  int
	shards   int
	window   time.Duration
	timeout  time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("postgres", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL connection `string`; empty means the libpq environment (PGHOST, ...)")
	fs.StringVar(&o.endpoint, "endpoint", "", "use the Kinesis endpoint at `URL` instead of the in-memory one")
	fs.StringVar(&o.dir, "dir", "", "keep the journal in `DIR` (default: a temporary directory)")
	fs.IntVar(&o.records, "records", 200, "how many records to put")
	fs.IntVar(&o.shards, "shards", 2, "how many shards the stream has")
	fs.DurationVar(&o.window, "window", 200*time.Millisecond, "close a window of batches across shards after this long (0: as soon as it holds a page)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.records < 1:
		return o, fmt.Errorf("-records %d: at least 1", o.records)
	case o.shards < 1 || o.shards > 16:
		return o, fmt.Errorf("-shards %d: between 1 and 16", o.shards)
	case o.window < 0:
		return o, fmt.Errorf("-window %v: must not be negative", o.window)
	case o.timeout <= 0:
		return o, fmt.Errorf("-timeout %v: must be positive", o.timeout)
	}
	return o, nil
}

// run is the whole program; main only wires it to the process.
func run(ctx context.Context, out io.Writer, args []string) error {
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	db, err := pgxpool.New(ctx, o.dsn)
	if err != nil {
		return fmt.Errorf("-dsn: %w", err)
	}
	defer db.Close()
	// Waits while the database is unreachable (until -timeout): a host
	// started during an outage does not exit.
	if err := pgsink.CreateSchema(ctx, db); err != nil {
		return err
	}
	sink, err := pgsink.New(db, pgsink.Config{})
	if err != nil {
		return err
	}

	api, where, err := connect(ctx, o.endpoint)
	if err != nil {
		return err
	}
	stream := "tidemark-postgres-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fmt.Fprintf(out, "kinesis: %s; stream %s, %d shards\n", where, stream, o.shards)
	if _, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(o.shards))}); err != nil {
		return fmt.Errorf("creating stream %s: %w", stream, err)
	}
	if o.endpoint != "" {
		defer func() {
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer dcancel()
			if _, err := api.DeleteStream(dctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)}); err != nil {
				fmt.Fprintf(out, "deleting stream %s: %v\n", stream, err)
			}
		}()
	}
	if err := kinesistest.WaitActive(ctx, api, stream); err != nil {
		return fmt.Errorf("waiting for stream %s: %w", stream, err)
	}
	if err := putRecords(ctx, api, stream, o.records); err != nil {
		return err
	}
	fmt.Fprintf(out, "put %d records\n", o.records)

	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tidemark-postgres-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	cfg := kinesisload.DefaultConfig()
	cfg.Stream = stream
	cfg.Sink = sink // a MultiSink: windows across shards
	cfg.Dir = dir
	cfg.StartPosition = scan.TrimHorizon() // the records are there already
	cfg.IdleWait = 200 * time.Millisecond
	cfg.MaxBatchWait = o.window
	loader, err := kinesisload.New(cfg, kinesisload.WithClient(api),
		kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- loader.Run(ctx) }()
	waitErr := waitForRows(ctx, db, stream, o.records, done)
	closeCtx, closeCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	closeErr := loader.Close(closeCtx)
	closeCancel()
	if runErr := <-done; waitErr == nil && !errors.Is(runErr, kinesisload.ErrClosed) {
		waitErr = fmt.Errorf("the Loader stopped: %w", runErr)
	}
	if waitErr != nil {
		return waitErr
	}
	if closeErr != nil {
		return fmt.Errorf("closing the Loader: %w", closeErr)
	}
	fmt.Fprintf(out, "loaded in %v\n", time.Since(began).Round(time.Millisecond))
	return report(ctx, out, db, stream, o.records)
}

// connect returns the in-memory Kinesis, or a client of the endpoint.
func connect(ctx context.Context, endpoint string) (kinesistest.API, string, error) {
	if endpoint == "" {
		return kinesistest.New(), "in-memory (kinesistest)", nil
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	if err != nil {
		return nil, "", fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cfg.Credentials.Retrieve(cctx)
	cancel()
	if err != nil {
		// An emulator checks no credentials, but the SDK signs every
		// request.
		cfg.Credentials = credentials.NewStaticCredentialsProvider("tidemark", "tidemark", "")
	}
	client := kinesis.NewFromConfig(cfg, func(ko *kinesis.Options) { ko.BaseEndpoint = aws.String(endpoint) })
	return client, fmt.Sprintf("%s (region %s)", endpoint, cfg.Region), nil
}

// putRecords puts n records, "record-0" to "record-<n-1>", with partition
// keys that spread them over the shards.
func putRecords(ctx context.Context, api kinesistest.API, stream string, n int) error {
	for start := 0; start < n; start += 500 {
		in := &kinesis.PutRecordsInput{StreamName: aws.String(stream)}
		for i := start; i < min(n, start+500); i++ {
			in.Records = append(in.Records, types.PutRecordsRequestEntry{
				PartitionKey: aws.String("key-" + strconv.Itoa(i)),
				Data:         []byte("record-" + strconv.Itoa(i)),
			})
		}
		for attempt := 1; ; attempt++ {
			res, err := api.PutRecords(ctx, in)
			if err != nil {
				return fmt.Errorf("putting records %d to %d on %s: %w", start, start+len(in.Records)-1, stream, err)
			}
			if aws.ToInt32(res.FailedRecordCount) == 0 {
				break
			}
			if attempt == 10 {
				return fmt.Errorf("putting records on %s: %d still refused after %d attempts", stream, aws.ToInt32(res.FailedRecordCount), attempt)
			}
			// Put again only the refused ones (throughput limits).
			var again = in.Records[:0:0]
			for i, r := range res.Records {
				if r.ErrorCode != nil {
					again = append(again, in.Records[i])
				}
			}
			in.Records = again
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// waitForRows polls until stream has want rows, the Loader stops, or ctx
// ends.
func waitForRows(ctx context.Context, db *pgxpool.Pool, stream string, want int, done <-chan error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var got int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM tidemark_records WHERE stream = $1`, stream).Scan(&got); err != nil {
			return fmt.Errorf("counting rows: %w", err)
		}
		if got >= want {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("the Loader stopped with %d of %d records stored: %w", got, want, err)
		case <-ctx.Done():
			return fmt.Errorf("%d of %d records stored: %w", got, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// report prints rows and checkpoints per shard and checks that every record
// landed exactly once.
func report(ctx context.Context, out io.Writer, db *pgxpool.Pool, stream string, want int) error {
	rows, err := db.Query(ctx, `
		SELECT r.shard, count(*), count(DISTINCT r.seq), count(DISTINCT r.data), c.position
		FROM tidemark_records r LEFT JOIN tidemark_checkpoints c ON c.stream = r.stream AND c.shard = r.shard
		WHERE r.stream = $1 GROUP BY r.shard, c.position ORDER BY r.shard`, stream)
	if err != nil {
		return fmt.Errorf("reading what landed: %w", err)
	}
	defer rows.Close()
	total, distinct := 0, 0
	fmt.Fprintln(out, "shard                  rows  checkpoint")
	for rows.Next() {
		var shard string
		var n, seqs, datas int
		var cp *string
		if err := rows.Scan(&shard, &n, &seqs, &datas, &cp); err != nil {
			return fmt.Errorf("reading what landed: %w", err)
		}
		fmt.Fprintf(out, "%-20s %6d  %s\n", shard, n, deref(cp))
		total += n
		distinct += min(seqs, datas)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading what landed: %w", err)
	}
	fmt.Fprintf(out, "total %d rows, %d distinct records, %d put\n", total, distinct, want)
	if total != want || distinct != want {
		return fmt.Errorf("%d rows, %d distinct, want %d exactly once", total, distinct, want)
	}
	fmt.Fprintln(out, "every record landed exactly once")
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}
