package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload/pgsink/pgtest"
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

// TestMainProgram runs the example program end to end against a
// throwaway server (pgtest): it creates the tables, loads a stream of the
// in-memory Kinesis through windows across shards, and finds every record
// exactly once; run again on the same database, it does so for its own
// stream too.
func TestMainProgram(t *testing.T) {
	srv, _ := pgtest.Start(t)
	dsn := srv.DSN(pgtest.Database)
	for run := range 2 {
		var out bytes.Buffer
		if err := runProgram(&out, "-dsn", dsn, "-records", "300", "-shards", "4"); err != nil {
			t.Fatalf("run %d: %v\noutput:\n%s", run, err, &out)
		}
		for _, line := range []string{"put 300 records", "total 300 rows, 300 distinct records, 300 put", "every record landed exactly once"} {
			if !strings.Contains(out.String(), line) {
				t.Errorf("run %d: output lacks %q:\n%s", run, line, &out)
			}
		}
	}
}

func runProgram(out *bytes.Buffer, args ...string) error {
	return run(context.Background(), out, args)
}
