package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
)

var long = flag.Bool("reliability.long", false, "run the long form of the reliability suite (100 kills instead of 10, or 6 with -short (4 reading with fan-out); outages of 2 minutes instead of 20 s, or 8 s with -short); also TIDEMARK_RELIABILITY=long")

func longForm() bool {
	return *long || os.Getenv("TIDEMARK_RELIABILITY") == "long"
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envLoader); raw != "" {
		os.Exit(loaderMain(raw))
	}
	goleak.VerifyTestMain(m)
}

// written is one record a producer wrote.
type written = killloop.Written

// loaderProc is one running loader child process.
type loaderProc struct{ *killloop.Proc }

// startLoader starts a loader process with cc. Cleanup kills it if it still
// runs.
func startLoader(t *testing.T, cc childConfig) *loaderProc {
	t.Helper()
	raw, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	return &loaderProc{killloop.Start(t, []string{envLoader + "=" + string(raw)}, "INIT_RESOLVED ")}
}

// waitInit waits for the INIT_RESOLVED line and returns its positions.
func (p *loaderProc) waitInit(timeout time.Duration) (map[string]string, error) {
	raw, err := p.WaitLine(timeout)
	if err != nil {
		return nil, fmt.Errorf("the loader did not initialise: %w", err)
	}
	pos := map[string]string{}
	return pos, json.Unmarshal([]byte(raw), &pos)
}

// committed reads the journal in dir, which no process holds, and returns
// the stored progress of stream.
func committed(t *testing.T, dir, stream string) map[string]kinesisload.ShardProgress {
	t.Helper()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatalf("open the journal after the kill: %v", err)
	}
	defer j.Close()
	store, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatalf("replay the journal after the kill: %v", err)
	}
	got, err := store.Load(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// errorsAs is errors.As for a target type, as a value.
func errorsAs[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
