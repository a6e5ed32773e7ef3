package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
)

// inspectMain is the inspect subcommand: it prints a stream's items of a
// fleet's table.
func inspectMain(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("fleet inspect", flag.ContinueOnError)
	fs.SetOutput(stdout)
	table := fs.String("table", "", "the fleet's DynamoDB table (dynamo.Config.Table); required")
	stream := fs.String("stream", "", "the Kinesis stream's name; required")
	endpoint := fs.String("endpoint", "", "read the DynamoDB at this URL (e.g. dynalite) instead of AWS's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("inspect: unexpected arguments %q", fs.Args())
	case *table == "":
		return errors.New("inspect: -table is required")
	case *stream == "":
		return errors.New("inspect: -stream is required")
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("inspect: AWS configuration: %w", err)
	}
	var opts []func(*dynamodb.Options)
	if *endpoint != "" {
		opts = append(opts, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(*endpoint)
			if o.Region == "" {
				o.Region = "us-east-1"
			}
			if o.Credentials == nil {
				o.Credentials = credentials.NewStaticCredentialsProvider("AKIDTIDEMARKDEMO", "secret", "")
			}
		})
	}
	c, err := dynamo.New(dynamodb.NewFromConfig(cfg, opts...), dynamo.Config{Table: *table, HostID: "inspect"})
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	info, err := c.Inspect(ctx, *stream)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if len(info.Shards) == 0 && !info.Initialised {
		return fmt.Errorf("inspect: table %s holds nothing for stream %s", *table, *stream)
	}
	printTable(&printer{w: stdout}, info)
	return nil
}

// printTable prints a stream's items: the stream (its T0 when LATEST was
// resolved), then one row per shard (owner, epoch, handoff, state, the
// position its owner committed last, parents) and one per host of the
// roster (heartbeat counter, changes, left, and the load it published
// when balancing by throughput), and a line per generation archived by a
// start-over of a re-created stream.
func printTable(out *printer, info dynamo.StreamInfo) {
	var b strings.Builder
	init := "not yet"
	if info.Initialised {
		init = "committed"
	}
	fmt.Fprintf(&b, "   stream %s (created %s); initialisation %s", orNone(info.Identity.ARN), info.Identity.Created.UTC().Format("2006-01-02 15:04:05"), init)
	if info.InitLockOwner != "" {
		fmt.Fprintf(&b, " (by %s)", info.InitLockOwner)
	}
	if !info.StartTime.IsZero() {
		fmt.Fprintf(&b, "; LATEST resolved at T0 %s", info.StartTime.UTC().Format("2006-01-02 15:04:05.000"))
	}
	if info.Generation > 0 {
		fmt.Fprintf(&b, "; generation %d", info.Generation)
	}
	b.WriteString("\n")
	for _, a := range info.Archived {
		completed := 0
		for _, sh := range a.Shards {
			if sh.Progress.State == kinesisload.StateCompleted {
				completed++
			}
		}
		fmt.Fprintf(&b, "   archived generation %d: stream created %s, replaced by the stream created %s: %d shards (%d completed)\n",
			a.Gen, a.Identity.Created.UTC().Format("2006-01-02 15:04:05"), a.ReplacedBy.Created.UTC().Format("2006-01-02 15:04:05"), len(a.Shards), completed)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "   SHARD\tOWNER\tEPOCH\tHANDOFF TO\tSTATE\tPOSITION\tPARENTS")
	for _, id := range slices.Sorted(maps.Keys(info.Shards)) {
		sh := info.Shards[id]
		fmt.Fprintf(tw, "   %s\t%s\t%d\t%s\t%v\t%s\t%s\n", id, orNone(sh.Owner), sh.Epoch, orNone(sh.HandoffTo), sh.Progress.State,
			position(sh.Progress.Position.String()), orNone(strings.Join(sh.Progress.Parents, " ")))
	}
	// The roster: each host's heartbeat counter (it moves once a round
	// while the host lives), its changes to the table (each makes every
	// host read the stream's items again), and, when the hosts balance by
	// throughput, the load it published.
	byLoad := false
	for _, h := range info.Hosts {
		byLoad = byLoad || h.Load > 0
	}
	if byLoad {
		fmt.Fprintln(tw, "   HOST\tHEARTBEAT\tCHANGES\tLEFT\tLOAD (B/s)")
	} else {
		fmt.Fprintln(tw, "   HOST\tHEARTBEAT\tCHANGES\tLEFT")
	}
	for _, id := range slices.Sorted(maps.Keys(info.Hosts)) {
		h := info.Hosts[id]
		if byLoad {
			fmt.Fprintf(tw, "   %s\t%d\t%d\t%v\t%.0f\n", id, h.Counter, h.Changes, h.Left, h.Load)
		} else {
			fmt.Fprintf(tw, "   %s\t%d\t%d\t%v\n", id, h.Counter, h.Changes, h.Left)
		}
	}
	_ = tw.Flush()
	out.printf("%s", b.String())
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// position shortens a long sequence number for the table.
func position(p string) string {
	if i := strings.IndexByte(p, ':'); i >= 0 && len(p)-i > 16 {
		return p[:i+1] + "…" + p[len(p)-12:]
	}
	return orNone(p)
}
