package reliability

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/internal/faultproxy"
	"github.com/tidemark/tidemark/internal/killloop"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// memSink keeps every record it accepts. With max > 0 it refuses a batch
// holding a record larger than max bytes.
type memSink struct {
	max int

	mu       sync.Mutex
	got      []line
	accepted []scan.Position // checkpoints of accepted batches, in order
	refused  int             // Deliver calls refused
}

func (s *memSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.Records {
		if s.max > 0 && len(r.Data) > s.max {
			s.refused++
			return fmt.Errorf("sink: record %s is %d bytes, more than %d", r.SequenceNumber, len(r.Data), s.max)
		}
	}
	for _, r := range b.Records {
		s.got = append(s.got, line{shard: b.ShardID, seq: r.SequenceNumber, data: string(r.Data)})
	}
	s.accepted = append(s.accepted, b.Checkpoint)
	return nil
}

func (s *memSink) lines() []line {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]line(nil), s.got...)
}

// waitFor waits until the sink holds every record of want.
func (s *memSink) waitFor(t *testing.T, r *inproc, want []written) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		seen := map[string]bool{}
		for _, l := range s.lines() {
			seen[l.data] = true
		}
		n := 0
		for _, w := range want {
			if seen[w.Data] {
				n++
			}
		}
		if n == len(want) {
			return
		}
		select {
		case err := <-r.done:
			t.Fatalf("Run returned %v with %d of %d records delivered", err, n, len(want))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records delivered after a minute", n, len(want))
		}
	}
}

// inproc is a Loader running in this process.
type inproc struct {
	l    *kinesisload.Loader
	done chan error // Run's result
	init chan kinesisload.InitResolved
}

type initHook chan kinesisload.InitResolved

func (h initHook) OnInitResolved(e kinesisload.InitResolved) {
	select {
	case h <- e:
	default:
	}
}

// runLoader starts Run in a goroutine; Cleanup closes the Loader and waits.
func runLoader(t *testing.T, cfg kinesisload.Config, opts ...kinesisload.Option) *inproc {
	t.Helper()
	r := &inproc{done: make(chan error, 1), init: make(chan kinesisload.InitResolved, 1)}
	opts = append(opts, kinesisload.WithHooks(initHook(r.init)), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	l, err := kinesisload.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r.done <- l.Run(context.Background())
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		<-finished
	})
	return r
}

// result waits up to timeout for Run's result.
func (r *inproc) result(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(timeout):
		t.Fatalf("Run did not return within %v", timeout)
		return nil
	}
}

func (r *inproc) waitInit(t *testing.T) {
	t.Helper()
	select {
	case <-r.init:
	case err := <-r.done:
		t.Fatalf("Run returned %v before its initialisation", err)
	case <-time.After(time.Minute):
		t.Fatal("no initialisation within a minute")
	}
}

// dirState returns the name, size and SHA-256 of every file under dir.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		state[p] = fmt.Sprintf("%d bytes %x", len(b), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// committedCovered checks that every record at or before a committed
// position of the journal in dir was delivered: nothing committed is lost.
func committedCovered(t *testing.T, dir, stream string, put []written, got []line) {
	t.Helper()
	progress := committed(t, dir, stream)
	seen := map[string]bool{}
	for _, l := range got {
		seen[l.data] = true
	}
	for _, w := range put {
		if p, ok := progress[w.Shard]; ok && killloop.Covers(p.Position, w.Seq) && !seen[w.Data] {
			t.Errorf("%s (%s %s) is committed (%v) but the sink never got it", w.Data, w.Shard, w.Seq, p.Position)
		}
	}
}

func putN(ctx context.Context, t *testing.T, c *kinesis.Client, stream, prefix string, n int) []written {
	t.Helper()
	data := make([]string, n)
	for i := range data {
		data[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	w, err := killloop.PutAll(ctx, c, stream, data)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Process level: the loader program with an invalid field exits with the
// field named and creates nothing. (Each field's message is tested in
// kinesisload/config_test.go; this checks what a program gets.)
func TestBadConfigProcess(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := childConfig{Endpoint: "http://127.0.0.1:1", Stream: "s", Out: filepath.Join(tmp, "out.txt")}
	tests := []struct {
		name     string
		mutate   func(*childConfig)
		wantCode int
		wantErr  string
	}{
		{"negative SinkBackoff", func(c *childConfig) { c.SinkBackoff = -time.Second }, exitBadConfig, "invalid config: SinkBackoff = -1s"},
		{"negative RecordsPerCall", func(c *childConfig) { c.RecordsPerCall = -1 }, exitBadConfig, "invalid config: RecordsPerCall = -1"},
		{"negative IdleWait", func(c *childConfig) { c.IdleWait = -time.Second }, exitBadConfig, "invalid config: IdleWait = -1s"},
		{"IdleWait 199ms", func(c *childConfig) { c.IdleWait = 199 * time.Millisecond }, exitBadConfig, "invalid config: IdleWait = 199ms"},
		{"StartPosition SHARD_END", func(c *childConfig) { c.StartPosition = "SHARD_END" }, exitBadConfig, "invalid config: StartPosition = SHARD_END"},
		{"no Dir", func(c *childConfig) { c.Dir = "" }, exitBadConfig, `invalid config: Dir = ""`},
		{"Dir is a file", func(c *childConfig) { c.Dir = file }, exitRunFailed, file},
		// The error names the configured Dir and, from os.MkdirAll, the component that is not a directory.
		{"Dir under a file", func(c *childConfig) { c.Dir = filepath.Join(file, "journal") }, exitRunFailed, "journal: create directory " + filepath.Join(file, "journal") + ": mkdir " + file + ": not a directory"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := base
			cc.Dir = filepath.Join(tmp, "journal-"+strconv.Itoa(i))
			tt.mutate(&cc)
			p := startLoader(t, cc)
			code, err := p.Wait(30 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			stderr := p.Stderr()
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tt.wantCode, tt.wantErr)
			}
			if strings.Contains(stderr, "panic") {
				t.Errorf("the loader panicked:\n%s", stderr)
			}
			if cc.Dir != "" && !strings.HasPrefix(cc.Dir, file) {
				if _, err := os.Stat(cc.Dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("Dir %s exists after a refused start (stat: %v)", cc.Dir, err)
				}
			}
			if b, err := os.ReadFile(file); err != nil || string(b) != "not a directory" {
				t.Errorf("%s changed: %q, %v", file, b, err)
			}
		})
	}
}

// TestBadInput runs the bad-input cases that need Kinesis on one
// kinesis-local, each on its own stream.
func TestBadInput(t *testing.T) {
	emu := emulator.Start(t, emulator.KinesisLocal)
	api := killloop.NewTestClient(t, emu.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	proxyFor := func(t *testing.T, seed uint64) *faultproxy.Proxy {
		p, err := faultproxy.New(faultproxy.Config{Upstream: emu.Endpoint, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	quick := func(stream string, sink kinesisload.Sink, dir string) kinesisload.Config {
		return kinesisload.Config{Stream: stream, Sink: sink, Dir: dir, IdleWait: 200 * time.Millisecond,
			ListShardsInterval: 300 * time.Millisecond, CallTimeout: 5 * time.Second}
	}

	t.Run("corrupt journal", func(t *testing.T) {
		const stream = "corrupt"
		killloop.CreateStream(ctx, t, api, stream, 1)
		tmp := t.TempDir()
		cc := childConfig{Endpoint: emu.Endpoint, Stream: stream, Dir: filepath.Join(tmp, "journal"), Out: filepath.Join(tmp, "out.txt"),
			IdleWait: 200 * time.Millisecond, RecordsPerCall: 2}
		p := startLoader(t, cc)
		if _, err := p.waitInit(time.Minute); err != nil {
			t.Fatal(err)
		}
		put := putN(ctx, t, api, stream, "c", 6)
		for deadline := time.Now().Add(time.Minute); ; {
			out, err := readOutput(cc.Out)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) >= len(put) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d records delivered", len(out), len(put))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code, err := p.Term(30 * time.Second); err != nil || code != exitOK {
			t.Fatalf("first loader: exit %d, %v", code, err)
		}
		segs, _ := filepath.Glob(filepath.Join(cc.Dir, "*.seg"))
		if len(segs) != 1 {
			t.Fatalf("segments %v, want one", segs)
		}
		seg := segs[0]
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		// The first frame starts after the 8-byte magic: its 8-byte length
		// word, then CRC (4) and index (8), then data. Flip a data byte:
		// a CRC mismatch with good frames after it, which no crash causes.
		const flip = 8 + 8 + 12 + 3
		if len(b) < 200 {
			t.Fatalf("segment %s is only %d bytes; want several frames", seg, len(b))
		}
		b[flip] ^= 0x20
		if err := os.WriteFile(seg, b, 0o600); err != nil {
			t.Fatal(err)
		}
		before := dirState(t, cc.Dir)
		outBefore := dirState(t, tmp)[cc.Out]

		p2 := startLoader(t, cc)
		code, err := p2.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		stderr := p2.Stderr()
		m := regexp.MustCompile(`journal: corrupt (\S+) at offset (\d+)`).FindStringSubmatch(stderr)
		if code != exitRunFailed || m == nil {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and \"journal: corrupt FILE at offset N\"", code, stderr, exitRunFailed)
		}
		if off, _ := strconv.Atoi(m[2]); m[1] != seg || off > flip {
			t.Errorf("error names %s at offset %s, want %s at an offset up to %d", m[1], m[2], seg, flip)
		}
		if strings.Contains(stderr, "panic") {
			t.Errorf("the loader panicked:\n%s", stderr)
		}
		if diff := cmp.Diff(before, dirState(t, cc.Dir)); diff != "" {
			t.Errorf("the journal directory changed (-before +after):\n%s", diff)
		}
		if after := dirState(t, tmp)[cc.Out]; after != outBefore {
			t.Errorf("the output changed: %s -> %s", outBefore, after)
		}
	})

	t.Run("unknown stream", func(t *testing.T) {
		proxy := proxyFor(t, 1)
		const stream = "no-such-stream"
		dir := t.TempDir()
		r := runLoader(t, quick(stream, &memSink{}, dir), kinesisload.WithClient(killloop.NewTestClient(t, proxy.URL())))
		err := r.result(t, 30*time.Second)
		if _, ok := errorsAs[*types.ResourceNotFoundException](err); !ok || !strings.Contains(err.Error(), "stream "+stream) {
			t.Fatalf("Run = %v, want a ResourceNotFoundException naming stream %s", err, stream)
		}
		t.Logf("Run = %v", err)
		if n := proxy.Total().Requests; n > 3 {
			t.Errorf("%d requests for a stream that does not exist, want at most 3", n)
		}
		if got := committed(t, dir, stream); len(got) != 0 {
			t.Errorf("progress stored for an unknown stream: %v", got)
		}
	})

	t.Run("stream deleted mid-run", func(t *testing.T) {
		const stream = "deleted"
		killloop.CreateStream(ctx, t, api, stream, 2)
		dir := t.TempDir()
		sink := &memSink{}
		r := runLoader(t, quick(stream, sink, dir), kinesisload.WithClient(killloop.NewTestClient(t, emu.Endpoint)))
		r.waitInit(t)
		put := putN(ctx, t, api, stream, "d", 20)
		sink.waitFor(t, r, put)
		if _, err := api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)}); err != nil {
			t.Fatal(err)
		}
		err := r.result(t, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "stream "+stream) {
			t.Fatalf("Run = %v, want an error naming stream %s", err, stream)
		}
		// Whichever call notices first (GetRecords, ListShards, the identity
		// check), the error says the stream is gone or going, never a
		// lineage violation.
		_, notFound := errorsAs[*types.ResourceNotFoundException](err)
		if !notFound && !errors.Is(err, kinesisload.ErrStreamDeleted) {
			t.Errorf("Run = %v, want it to wrap the ResourceNotFoundException or ErrStreamDeleted", err)
		}
		if errors.Is(err, kinesisload.ErrLineage) {
			t.Errorf("Run = %v: a deleted stream is not a lineage violation", err)
		}
		t.Logf("Run = %v", err)
		committedCovered(t, dir, stream, put, sink.lines())
	})

	t.Run("credentials refused", func(t *testing.T) {
		for _, code := range []string{"UnrecognizedClientException", "InvalidSignatureException"} {
			t.Run(code, func(t *testing.T) {
				p, err := faultproxy.New(faultproxy.Config{Upstream: emu.Endpoint, DeniedError: code, Default: faultproxy.Rates{Denied: 1}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Close() })
				const stream = "refused"
				r := runLoader(t, quick(stream, &memSink{}, t.TempDir()), kinesisload.WithClient(killloop.NewTestClient(t, p.URL())))
				err = r.result(t, 30*time.Second)
				if err == nil || !strings.Contains(err.Error(), code) || !strings.Contains(err.Error(), "stream "+stream) {
					t.Fatalf("Run = %v, want an error naming %s and stream %s", err, code, stream)
				}
				n := p.Total().Requests
				t.Logf("%d requests; Run = %v", n, err)
				if n > 3 {
					t.Errorf("%d requests after a 403, want at most 3 (no retry storm)", n)
				}
			})
		}
	})

	// The stream lists, but reading it is refused: the LATEST scan of
	// initialisation fails without a storm and publishes nothing.
	t.Run("credentials refused while resolving", func(t *testing.T) {
		const stream = "refused-scan"
		killloop.CreateStream(ctx, t, api, stream, 2)
		putN(ctx, t, api, stream, "h", 4)
		deny := faultproxy.Rates{Denied: 1}
		p, err := faultproxy.New(faultproxy.Config{Upstream: emu.Endpoint, Ops: map[string]faultproxy.Rates{"GetShardIterator": deny, "GetRecords": deny}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		dir := t.TempDir()
		r := runLoader(t, quick(stream, &memSink{}, dir), kinesisload.WithClient(killloop.NewTestClient(t, p.URL())))
		err = r.result(t, 30*time.Second)
		if err == nil || !strings.Contains(err.Error(), "UnrecognizedClientException") || !strings.Contains(err.Error(), "stream "+stream) {
			t.Fatalf("Run = %v, want an error naming UnrecognizedClientException and stream %s", err, stream)
		}
		c := p.Counts()
		refused := c["GetShardIterator"].Requests + c["GetRecords"].Requests
		t.Logf("%d refused requests; Run = %v", refused, err)
		if refused > 4 {
			t.Errorf("%d refused requests while resolving 2 shards, want at most 4 (no retry storm)", refused)
		}
		for id, pr := range committed(t, dir, stream) {
			if pr.Position.Kind != scan.KindLatest && pr.Position.Kind != 0 {
				t.Errorf("shard %s has position %v after a failed initialisation, want nothing resolved", id, pr.Position)
			}
		}
	})

	t.Run("credentials refused mid-run", func(t *testing.T) {
		const stream = "refused-later"
		killloop.CreateStream(ctx, t, api, stream, 2)
		proxy := proxyFor(t, 2)
		dir := t.TempDir()
		sink := &memSink{}
		r := runLoader(t, quick(stream, sink, dir), kinesisload.WithClient(killloop.NewTestClient(t, proxy.URL())))
		r.waitInit(t)
		put := putN(ctx, t, api, stream, "p", 10)
		sink.waitFor(t, r, put)
		if err := proxy.SetAll(faultproxy.Rates{Denied: 1}); err != nil {
			t.Fatal(err)
		}
		before := proxy.Total().Requests
		err := r.result(t, 30*time.Second)
		// A shard's read, the periodic ListShards or the identity check
		// after a new iterator (DescribeStreamSummary) may meet the 403
		// first: the error names the shard in the first case, the
		// operation in all.
		re, ok := errorsAs[*kinesisload.RunError](err)
		if !ok || !strings.Contains(err.Error(), "UnrecognizedClientException") ||
			!(strings.HasPrefix(re.Shard, "shardId-") || re.Op == "ListShards" || re.Op == "DescribeStreamSummary") {
			t.Fatalf("Run = %v, want a *RunError naming UnrecognizedClientException and the shard (or ListShards, or DescribeStreamSummary)", err)
		}
		n := proxy.Total().Requests - before
		t.Logf("%d requests after the switch; Run = %v", n, err)
		if n > 10 {
			t.Errorf("%d requests after credentials were refused, want at most 10 (2 shards, a ListShards, no retry storm)", n)
		}
		committedCovered(t, dir, stream, put, sink.lines())
	})

	// Throttling is retried without a bound while the Loader runs (it
	// clears by itself); Close must still stop it promptly.
	t.Run("throttled forever then closed", func(t *testing.T) {
		const stream = "throttled"
		killloop.CreateStream(ctx, t, api, stream, 2)
		proxy := proxyFor(t, 3)
		dir := t.TempDir()
		sink := &memSink{}
		r := runLoader(t, quick(stream, sink, dir), kinesisload.WithClient(killloop.NewTestClient(t, proxy.URL())))
		r.waitInit(t)
		put := putN(ctx, t, api, stream, "t", 10)
		sink.waitFor(t, r, put)
		if err := proxy.SetAll(faultproxy.Rates{Throttle: 1}); err != nil {
			t.Fatal(err)
		}
		for proxy.Total().Throttle < 6 {
			select {
			case err := <-r.done:
				t.Fatalf("Run returned %v while throttled, want it to keep trying", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := r.l.Close(cctx); err != nil {
			t.Fatalf("Close while throttled = %v, want nil within 10s", err)
		}
		if err := r.result(t, 5*time.Second); !errors.Is(err, kinesisload.ErrClosed) {
			t.Errorf("Run = %v, want ErrClosed", err)
		}
		committedCovered(t, dir, stream, put, sink.lines())
	})

	// Every call outlives CallTimeout: with KinesisMaxAttempts set, the
	// Loader gives up within its bounds, naming what failed, instead of
	// hanging. (By default it waits the outage out: see TestOutage.)
	t.Run("Kinesis never answers", func(t *testing.T) {
		const stream = "silent"
		killloop.CreateStream(ctx, t, api, stream, 1)
		proxy, err := faultproxy.New(faultproxy.Config{Upstream: emu.Endpoint, Seed: 4, MaxDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		dir := t.TempDir()
		sink := &memSink{}
		cfg := quick(stream, sink, dir)
		cfg.CallTimeout = time.Second
		cfg.KinesisMaxAttempts = 3
		r := runLoader(t, cfg, kinesisload.WithClient(killloop.NewTestClient(t, proxy.URL())))
		r.waitInit(t)
		put := putN(ctx, t, api, stream, "n", 5)
		sink.waitFor(t, r, put)
		if err := proxy.SetAll(faultproxy.Rates{Delay: 1}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		err = r.result(t, 2*time.Minute)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "stream "+stream) {
			t.Fatalf("Run = %v, want a DeadlineExceeded naming stream %s", err, stream)
		}
		t.Logf("Run returned after %v: %v", time.Since(began).Round(time.Second), err)
		committedCovered(t, dir, stream, put, sink.lines())
	})

	t.Run("record larger than the sink accepts", func(t *testing.T) {
		const stream = "toolarge"
		killloop.CreateStream(ctx, t, api, stream, 1)
		var data []string
		for i := range 4 {
			data = append(data, fmt.Sprintf("small-%d", i))
		}
		data = append(data, "small-4", "BIG-"+strings.Repeat("x", 300), "small-6", "small-7")
		put, err := killloop.PutAll(ctx, api, stream, data)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		sink := &memSink{max: 100}
		cfg := quick(stream, sink, dir)
		cfg.StartPosition = scan.TrimHorizon()
		cfg.RecordsPerCall = 2 // batches: [0 1] [2 3] [4 BIG] ...
		cfg.SinkRetries = 2
		cfg.SinkBackoff = 10 * time.Millisecond
		r := runLoader(t, cfg, kinesisload.WithClient(killloop.NewTestClient(t, emu.Endpoint)))
		err = r.result(t, time.Minute)
		shard := put[0].Shard
		if err == nil || !strings.Contains(err.Error(), "shard "+shard) || !strings.Contains(err.Error(), "more than 100") {
			t.Fatalf("Run = %v, want an error naming shard %s and the sink's refusal", err, shard)
		}
		t.Logf("Run = %v", err)
		sink.mu.Lock()
		accepted, refused := append([]scan.Position(nil), sink.accepted...), sink.refused
		sink.mu.Unlock()
		lastAccepted := scan.AfterSequence(put[3].Seq)
		if diff := cmp.Diff([]string{scan.AfterSequence(put[1].Seq).String(), lastAccepted.String()}, positionStrings(accepted)); diff != "" {
			t.Errorf("accepted checkpoints (-want +got):\n%s", diff)
		}
		if refused != cfg.SinkRetries+1 {
			t.Errorf("the refused batch was offered %d times, want %d (1 + SinkRetries)", refused, cfg.SinkRetries+1)
		}
		progress := committed(t, dir, stream)
		if got := progress[shard].Position; !got.Equal(lastAccepted) {
			t.Errorf("committed position of %s = %v, want %v (the last accepted batch)", shard, got, lastAccepted)
		}
	})
}

func positionStrings(ps []scan.Position) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
