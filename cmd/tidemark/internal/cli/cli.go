// Package cli is the tidemark command: status, rewind, export, import and
// import-kcl on a Loader's journal directory or a fleet's DynamoDB table.
// The main package only calls [Main]; everything else is here, so that it
// is tested with the in-memory Kinesis and table ([Env]) as well as with
// the built binary.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/dynamo"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// Exit statuses.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitFailed: it could not (an error it printed).
	ExitFailed = 1
	// ExitUsage: a bad command line.
	ExitUsage = 2
	// ExitUnhealthy: status found a shard stuck or stopped.
	ExitUnhealthy = 3
)

// Env is what the commands reach outside the process. [DefaultEnv] makes
// AWS clients from the flags; tests give in-memory ones.
type Env struct {
	// Kinesis returns the client of the stream's Kinesis.
	Kinesis func(ctx context.Context, o *Options) (scan.Client, error)
	// Table returns the fleet's table o.Table; with create, it is
	// created when missing.
	Table func(ctx context.Context, o *Options, create bool) (fleet.Table, error)
	// KCLItems returns every item of the lease table o.KCLTable (a KCL
	// or vmware-go-kcl application's), as DynamoDB holds them.
	KCLItems func(ctx context.Context, o *Options) ([]map[string]ddbtypes.AttributeValue, error)
	// Now is the operator's clock.
	Now func() time.Time
	// Who names the operator when --by is not given.
	Who func() string
	// Sleep waits d or until ctx ends (status's heartbeat wait).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Options are the flags every command shares.
type Options struct {
	// Dir is a Loader's journal directory (Config.Dir).
	Dir string
	// Table is a fleet's DynamoDB table (dynamo.Config.Table).
	Table string
	// Stream is the Kinesis stream's name.
	Stream string
	// Region is the AWS region of Kinesis and DynamoDB.
	Region string
	// Endpoint is DynamoDB's URL (dynalite), KinesisEndpoint Kinesis's
	// (kinesis-local): empty for AWS's.
	Endpoint, KinesisEndpoint string
	// JSON asks for JSON output.
	JSON bool
	// KCLTable is import-kcl's lease table; KCLEndpoint its DynamoDB
	// (default Endpoint).
	KCLTable, KCLEndpoint string
}

// Main runs the command line args (without the program's name) and
// returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, DefaultEnv(), args, stdout, stderr)
}

const usage = `tidemark: operate a tidemark Loader's positions.

Usage:
  tidemark status     (--dir DIR | --table TABLE) [--stream S] [flags]
  tidemark rewind     (--dir DIR | --table TABLE) --stream S (--to WHERE | --from FILE) [--shards A,B] [flags]
  tidemark export     (--dir DIR | --table TABLE) [--stream S] [--out FILE]
  tidemark import     (--dir DIR | --table TABLE) [--stream S] [--create-table] FILE
  tidemark import-kcl --kcl-table LEASES --stream S (--dir DIR | --table TABLE) [--apply] [flags]

--dir is a Loader's journal directory (Config.Dir); --table a fleet's
DynamoDB table (dynamo.Config.Table). AWS clients use the standard AWS
configuration; --region, --endpoint (DynamoDB, e.g. dynalite) and
--kinesis-endpoint (e.g. kinesis-local) override it. --json prints JSON.
Run "tidemark COMMAND -h" for a command's flags; docs/operations.md is the
guide.

Exit status: 0 done, 1 failed, 2 bad usage, 3 (status) a shard is stuck or
stopped.
`

// Run is Main with the environment given.
func Run(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	cmds := map[string]func(context.Context, Env, []string, io.Writer, io.Writer) int{
		"status":     statusCmd,
		"rewind":     rewindCmd,
		"export":     exportCmd,
		"import":     importCmd,
		"import-kcl": importKCLCmd,
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	cmd, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "tidemark: unknown command %q\n\n%s", name, usage)
		return ExitUsage
	}
	return cmd(ctx, env, args[1:], stdout, stderr)
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// finish prints err for the command and returns the exit status.
func finish(cmd string, err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "tidemark %s: %v (see tidemark %s -h)\n", cmd, err, cmd)
		return ExitUsage
	}
	fmt.Fprintf(stderr, "tidemark %s: %v\n", cmd, err)
	return ExitFailed
}

// flags returns a command's flag set with the shared flags.
func flags(cmd string, o *Options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tidemark "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Dir, "dir", "", "a Loader's journal `DIR`ectory (Config.Dir)")
	fs.StringVar(&o.Table, "table", "", "a fleet's DynamoDB `TABLE` (dynamo.Config.Table)")
	fs.StringVar(&o.Stream, "stream", "", "the Kinesis `STREAM`'s name")
	fs.StringVar(&o.Region, "region", "", "the AWS `REGION` (default: the AWS configuration's)")
	fs.StringVar(&o.Endpoint, "endpoint", "", "DynamoDB's `URL` (e.g. dynalite's); default AWS's")
	fs.StringVar(&o.KinesisEndpoint, "kinesis-endpoint", "", "Kinesis's `URL` (e.g. kinesis-local's); default AWS's")
	fs.BoolVar(&o.JSON, "json", false, "print JSON")
	return fs
}

// checkTarget checks that exactly one of --dir and --table is given, and
// --stream with --table.
func checkTarget(o *Options, streamRequired bool) error {
	switch {
	case o.Dir == "" && o.Table == "":
		return usagef("give --dir (a journal directory) or --table (a fleet's DynamoDB table)")
	case o.Dir != "" && o.Table != "":
		return usagef("give --dir or --table, not both")
	case o.Stream == "" && (o.Table != "" || streamRequired):
		return usagef("--stream is required")
	}
	return nil
}

// parse parses args into fs, refusing leftovers unless nargs allows them.
func parse(fs *flag.FlagSet, args []string, nargs int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > nargs {
		return usagef("unexpected argument %q", fs.Arg(nargs))
	}
	return nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// DefaultEnv returns the environment of the real command: AWS clients
// from the standard configuration and the flags.
func DefaultEnv() Env {
	return Env{
		Kinesis: func(ctx context.Context, o *Options) (scan.Client, error) {
			cfg, err := awsConfig(ctx, o.Region, o.KinesisEndpoint != "")
			if err != nil {
				return nil, err
			}
			return kinesis.NewFromConfig(cfg, func(ko *kinesis.Options) {
				if o.KinesisEndpoint != "" {
					ko.BaseEndpoint = aws.String(o.KinesisEndpoint)
				}
			}), nil
		},
		Table: func(ctx context.Context, o *Options, create bool) (fleet.Table, error) {
			api, err := dynamoClient(ctx, o.Region, o.Endpoint)
			if err != nil {
				return nil, err
			}
			t := dynamo.NewTable(api, o.Table, 10*time.Second)
			if err := t.Ensure(ctx, create); err != nil {
				return nil, err
			}
			return t, nil
		},
		KCLItems: func(ctx context.Context, o *Options) ([]map[string]ddbtypes.AttributeValue, error) {
			endpoint := o.KCLEndpoint
			if endpoint == "" {
				endpoint = o.Endpoint
			}
			api, err := dynamoClient(ctx, o.Region, endpoint)
			if err != nil {
				return nil, err
			}
			return scanAll(ctx, api, o.KCLTable)
		},
		Now:   time.Now,
		Who:   whoAmI,
		Sleep: sleep,
	}
}

// awsConfig loads the AWS configuration; for an emulator's endpoint it
// fills in a region and dummy credentials when there are none.
func awsConfig(ctx context.Context, region string, emulator bool) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, fmt.Errorf("the AWS configuration: %w", err)
	}
	if emulator {
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		if cfg.Credentials == nil {
			cfg.Credentials = credentials.NewStaticCredentialsProvider("AKIDTIDEMARK", "emulator", "")
		} else if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
			cfg.Credentials = credentials.NewStaticCredentialsProvider("AKIDTIDEMARK", "emulator", "")
		}
	}
	return cfg, nil
}

func dynamoClient(ctx context.Context, region, endpoint string) (*dynamodb.Client, error) {
	cfg, err := awsConfig(ctx, region, endpoint != "")
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) {
		if endpoint != "" {
			do.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}

// scanAll reads every item of table, strongly consistent.
func scanAll(ctx context.Context, api *dynamodb.Client, table string) ([]map[string]ddbtypes.AttributeValue, error) {
	var out []map[string]ddbtypes.AttributeValue
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
	for {
		page, err := api.Scan(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("reading the lease table %s (Scan): %w", table, err)
		}
		out = append(out, page.Items...)
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// whoAmI is user@host, for the record of a rewind.
func whoAmI() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return name
	}
	return name + "@" + host
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

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
