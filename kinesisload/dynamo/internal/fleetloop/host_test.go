package fleetloop

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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
)

// envHost names the environment variable that turns the test binary into a
// host process; its value is the host's hostConfig as JSON.
const envHost = "TIDEMARK_FLEETLOOP_HOST"

// Exit codes of the host process.
const (
	exitOK         = 0 // Run returned after SIGTERM and Close
	exitRunFailed  = 1 // Run returned an error
	exitHarnessErr = 3 // the host's own setup failed (not the library)
)

// hostConfig configures one host process. Durations are nanoseconds in
// JSON.
type hostConfig struct {
	HostID          string
	KinesisEndpoint string
	DynamoEndpoint  string
	Table           string
	Stream          string
	Out             string // this host's output file
	LeaseDuration   time.Duration
	Checkpoint      time.Duration // dynamo.Config.CheckpointInterval
	CallTimeout     time.Duration // both clients' calls
}

// hostMain is the host process: it runs one Loader with a dynamo
// Coordinator until SIGTERM (then Close: a planned move) or a fatal error,
// and returns the exit code.
func hostMain(raw string) int {
	var hc hostConfig
	if err := json.Unmarshal([]byte(raw), &hc); err != nil {
		fmt.Fprintf(os.Stderr, "host: bad %s: %v\n", envHost, err)
		return exitHarnessErr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	out, err := os.OpenFile(hc.Out, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "host: %v\n", err)
		return exitHarnessErr
	}
	defer out.Close()
	rec := &recorder{f: out, epochs: map[string]uint64{}}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	ddb := dynamodb.New(dynamodb.Options{
		Region:       emulator.Region,
		BaseEndpoint: aws.String(hc.DynamoEndpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	coord, err := dynamo.New(ddb, dynamo.Config{Table: hc.Table, CreateTable: true, HostID: hc.HostID,
		LeaseDuration: hc.LeaseDuration, CheckpointInterval: hc.Checkpoint, CallTimeout: hc.CallTimeout})
	if err != nil {
		fmt.Fprintf(os.Stderr, "host: dynamo.New: %v\n", err)
		return exitHarnessErr
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := kinesisload.New(kinesisload.Config{
		Stream:             hc.Stream,
		Sink:               rec,
		ListShardsInterval: 500 * time.Millisecond,
		IdleWait:           200 * time.Millisecond,
		CallTimeout:        hc.CallTimeout,
		RecordsPerCall:     100,
	}, kinesisload.WithClient(killloop.NewClient(hc.KinesisEndpoint, tr)), kinesisload.WithLogger(logger),
		kinesisload.WithCoordinator(&watchCoordinator{Coordinator: coord, rec: rec}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "host: kinesisload.New: %v\n", err)
		return exitHarnessErr
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	select {
	case err := <-done:
		fmt.Fprintf(os.Stderr, "host %s: Run returned by itself: %v\n", hc.HostID, err)
		return exitRunFailed
	case <-ctx.Done():
	}
	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := l.Close(cctx); err != nil {
		fmt.Fprintf(os.Stderr, "host %s: Close: %v\n", hc.HostID, err)
		return exitRunFailed
	}
	if err := <-done; !errors.Is(err, kinesisload.ErrClosed) {
		fmt.Fprintf(os.Stderr, "host %s: Run after Close: %v\n", hc.HostID, err)
		return exitRunFailed
	}
	return exitOK
}

// recorder is a host's Sink: it appends a line per record of an accepted
// batch to the host's file, in one write, and fsyncs before Deliver
// returns. It also appends a line per lease lost unplanned.
type recorder struct {
	mu     sync.Mutex
	f      *os.File
	epochs map[string]uint64 // shard -> epoch of this host's current lease
}

func (r *recorder) Deliver(ctx context.Context, b kinesisload.Batch) error {
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	epoch := r.epochs[b.ShardID]
	var buf bytes.Buffer
	for _, rec := range b.Records {
		fmt.Fprintf(&buf, "D %d %d %s %s %s\n", now, epoch, b.ShardID, rec.SequenceNumber, strconv.Quote(string(rec.Data)))
	}
	if _, err := r.f.Write(buf.Bytes()); err != nil {
		return err
	}
	return r.f.Sync()
}

func (r *recorder) granted(shard string, epoch uint64) {
	r.mu.Lock()
	r.epochs[shard] = epoch
	r.mu.Unlock()
}

func (r *recorder) lost(shard string, epoch uint64, why error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.f, "X %d %d %s %s\n", time.Now().UnixNano(), epoch, shard, strconv.Quote(fmt.Sprint(why)))
	_ = r.f.Sync()
}

// watchCoordinator is the dynamo Coordinator with every lease watched:
// the recorder learns each lease's epoch, and a lease lost before this
// host released it or left is recorded as lost unplanned.
type watchCoordinator struct {
	kinesisload.Coordinator
	rec *recorder
}

func (c *watchCoordinator) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	m, err := c.Coordinator.Join(ctx, stream)
	if err != nil {
		return nil, err
	}
	return &watchMembership{Membership: m, rec: c.rec, left: make(chan struct{})}, nil
}

type watchMembership struct {
	kinesisload.Membership
	rec       *recorder
	leaveOnce sync.Once
	left      chan struct{}
}

func (m *watchMembership) Acquire(ctx context.Context, ready []string) ([]kinesisload.Lease, error) {
	ls, err := m.Membership.Acquire(ctx, ready)
	out := make([]kinesisload.Lease, len(ls))
	for i, l := range ls {
		w := &watchLease{Lease: l, released: make(chan struct{})}
		m.rec.granted(l.Shard(), l.Epoch())
		go func() {
			select {
			case <-l.Lost():
				select {
				case <-w.released:
				case <-m.left:
				default:
					m.rec.lost(l.Shard(), l.Epoch(), l.Err())
				}
			case <-w.released:
			case <-m.left:
			}
		}()
		out[i] = w
	}
	return out, err
}

func (m *watchMembership) Leave(ctx context.Context) error {
	m.leaveOnce.Do(func() { close(m.left) })
	return m.Membership.Leave(ctx)
}

type watchLease struct {
	kinesisload.Lease
	once     sync.Once
	released chan struct{}
}

func (l *watchLease) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.released) })
	return l.Lease.Release(ctx)
}

// delivery is one line of a host's file: a record its Sink accepted, or a
// lease it lost unplanned (lost is true, seq empty, data the lease's Err).
type delivery struct {
	host       string
	at         int64
	epoch      uint64
	shard, seq string
	data       string
	lost       bool
}

// readHost parses a host's file. A missing file is empty; a torn last line
// (the host was killed mid-write: never acknowledged) is ignored.
func readHost(host, path string) ([]delivery, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []delivery
	for n, text := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if text == "" {
			continue
		}
		f := strings.SplitN(text, " ", 6)
		bad := func(err error) error { return fmt.Errorf("%s:%d: malformed line %q: %v", path, n+1, text, err) }
		if f[0] == "X" {
			f = strings.SplitN(text, " ", 5)
		}
		if len(f) < 5 || (f[0] == "D" && len(f) != 6) || (f[0] != "D" && f[0] != "X") {
			return nil, bad(errors.New("fields"))
		}
		d := delivery{host: host, lost: f[0] == "X", shard: f[3]}
		if d.at, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return nil, bad(err)
		}
		if d.epoch, err = strconv.ParseUint(f[2], 10, 64); err != nil {
			return nil, bad(err)
		}
		if d.lost {
			if d.data, err = strconv.Unquote(f[4]); err != nil {
				return nil, bad(err)
			}
		} else {
			d.seq = f[4]
			if d.data, err = strconv.Unquote(f[5]); err != nil {
				return nil, bad(err)
			}
		}
		out = append(out, d)
	}
	return out, nil
}
