package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// envLoader names the environment variable that turns the test binary into
// a loader process; its value is the loader's childConfig as JSON.
const envLoader = "TIDEMARK_RELIABILITY_LOADER"

// Exit codes of the loader process.
const (
	exitOK         = 0 // Run returned after SIGTERM
	exitRunFailed  = 1 // Run returned an error
	exitBadConfig  = 2 // kinesisload.New refused the configuration
	exitHarnessErr = 3 // the child's own setup failed (not the library)
)

// childConfig configures one loader process. Durations are nanoseconds in
// JSON. Zero fields are left zero in kinesisload.Config, so that a test can
// hand the library exactly the value it wants refused.
type childConfig struct {
	Endpoint           string
	Stream             string
	Dir                string
	Out                string // the Sink's output file
	StartPosition      string // parsed with scan.Parse; "" leaves it zero
	ListShardsInterval time.Duration
	IdleWait           time.Duration
	CallTimeout        time.Duration
	SinkBackoff        time.Duration
	SinkRetries        int
	RecordsPerCall     int32
	// MaxRecordBytes makes the Sink refuse a batch holding a record larger
	// than this; 0 means no limit.
	MaxRecordBytes int
	// SnapshotEvery, when positive, makes the loader open the journal in
	// Dir itself and give the Loader a JournalStore that snapshots every
	// SnapshotEvery saves (WithStore), so that kills land in snapshots and
	// compactions too. Zero lets the Loader open Dir with the defaults.
	SnapshotEvery uint64
	// FanOut reads with enhanced fan-out (consumer "reliability") instead
	// of polling.
	FanOut bool
}

// loaderMain is the loader process: it runs one Loader until SIGTERM or a
// fatal error and returns the exit code.
func loaderMain(raw string) int {
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "loader: bad %s: %v\n", envLoader, err)
		return exitHarnessErr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	sink, err := openFileSink(cc.Out, cc.MaxRecordBytes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loader: %v\n", err)
		return exitHarnessErr
	}
	defer sink.f.Close()
	cfg := kinesisload.Config{
		Stream:             cc.Stream,
		Sink:               sink,
		Dir:                cc.Dir,
		ListShardsInterval: cc.ListShardsInterval,
		IdleWait:           cc.IdleWait,
		CallTimeout:        cc.CallTimeout,
		SinkBackoff:        cc.SinkBackoff,
		SinkRetries:        cc.SinkRetries,
		RecordsPerCall:     cc.RecordsPerCall,
	}
	if cc.FanOut {
		cfg.ReadMode, cfg.ConsumerName = kinesisload.ReadFanOut, "reliability"
	}
	if cc.StartPosition != "" {
		if cfg.StartPosition, err = scan.Parse(cc.StartPosition); err != nil {
			fmt.Fprintf(os.Stderr, "loader: StartPosition: %v\n", err)
			return exitHarnessErr
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	client := killloop.NewClient(cc.Endpoint, tr)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []kinesisload.Option{kinesisload.WithClient(client), kinesisload.WithLogger(logger), kinesisload.WithHooks(initPrinter{})}
	if cc.SnapshotEvery > 0 {
		j, err := journal.Open(cc.Dir, journal.DefaultConfig())
		if err != nil {
			fmt.Fprintf(os.Stderr, "loader: Run returned: opening the journal: %v\n", err)
			return exitRunFailed
		}
		defer j.Close()
		store, err := kinesisload.NewJournalStore(ctx, j, cc.SnapshotEvery)
		if err != nil {
			fmt.Fprintf(os.Stderr, "loader: Run returned: %v\n", err)
			return exitRunFailed
		}
		opts = append(opts, kinesisload.WithStore(store))
	}
	l, err := kinesisload.New(cfg, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loader: New: %v\n", err)
		return exitBadConfig
	}
	err = l.Run(ctx)
	fmt.Fprintf(os.Stderr, "loader: Run returned: %v\n", err)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return exitOK
	}
	return exitRunFailed
}

// initPrinter prints INIT_RESOLVED with the journaled starts.
type initPrinter struct{}

func (initPrinter) OnInitResolved(e kinesisload.InitResolved) {
	pos := map[string]string{}
	for id, p := range e.Positions {
		pos[id] = p.String()
	}
	b, _ := json.Marshal(pos)
	fmt.Fprintf(os.Stdout, "INIT_RESOLVED %s\n", b)
}

// fileSink appends every record of an accepted batch to a file, one line
// each, in one write, and fsyncs before Deliver returns.
type fileSink struct {
	mu  sync.Mutex
	f   *os.File
	max int
}

// openFileSink opens path for appending. A line cut short by a kill in the
// middle of a write was never acknowledged: it is removed.
func openFileSink(path string, max int) (*fileSink, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		f.Close()
		return nil, err
	}
	if n := bytes.LastIndexByte(b, '\n') + 1; n != len(b) {
		fmt.Fprintf(os.Stderr, "loader: removing a torn line of %d bytes at the end of %s\n", len(b)-n, path)
		if err := f.Truncate(int64(n)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &fileSink{f: f, max: max}, nil
}

func (s *fileSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	var buf bytes.Buffer
	for _, r := range b.Records {
		if s.max > 0 && len(r.Data) > s.max {
			return fmt.Errorf("sink: record %s of shard %s is %d bytes, more than the %d this sink accepts", r.SequenceNumber, b.ShardID, len(r.Data), s.max)
		}
		fmt.Fprintf(&buf, "%s %s %s\n", b.ShardID, r.SequenceNumber, strconv.Quote(string(r.Data)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.f.Write(buf.Bytes()); err != nil {
		return err
	}
	return s.f.Sync()
}

// line is one delivered record in the output file.
type line struct {
	shard, seq, data string
}

// readOutput parses the output file. A missing file is empty; a torn last
// line (no newline: the writer was killed mid-write, and the next loader
// removes it) is ignored.
func readOutput(path string) ([]line, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []line
	for n, text := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if text == "" {
			continue
		}
		parts := strings.SplitN(text, " ", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s:%d: malformed line %q", path, n+1, text)
		}
		data, err := strconv.Unquote(parts[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: data %s: %v", path, n+1, parts[2], err)
		}
		out = append(out, line{shard: parts[0], seq: parts[1], data: data})
	}
	return out, nil
}
