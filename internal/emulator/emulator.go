// Package emulator starts a real Kinesis emulator (kinesis-local or
// kinesalite) or the DynamoDB emulator dynalite for a test, on a free
// loopback port, and stops it when the test ends.
//
// The emulators are Node programs installed by scripts/install-emulators.sh
// into .cache/emulators at the module root (or into $TIDEMARK_EMULATOR_DIR).
// When they are missing, [Start] skips the test under -short and fails it
// otherwise, so that CI can never pass by skipping.
package emulator

import (
	"bytes"
	"context"
	_ "embed" // the bind-localhost.js preload
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload/kinesislocal"
)

// Kind names an emulator.
type Kind int

const (
	// KinesisLocal is kinesis-local 0.6.2, a JavaScript build of
	// kinesis-mock: the most complete emulator, and slow (about 800 put
	// records per second).
	KinesisLocal Kind = iota + 1
	// Kinesalite is kinesalite 3.3.3: fast, older and less complete.
	Kinesalite
	// Dynalite is dynalite 4.0.0, a DynamoDB emulator (conditional
	// writes, Query, Scan; no transactions, no TTL), for
	// kinesisload/dynamo. Its [Emulator.Client] is nil: make a DynamoDB
	// client for [Emulator.Endpoint].
	Dynalite
)

// String returns the emulator's npm package name.
func (k Kind) String() string {
	switch k {
	case KinesisLocal:
		return "kinesis-local"
	case Kinesalite:
		return "kinesalite"
	case Dynalite:
		return "dynalite"
	}
	return "emulator.Kind(" + strconv.Itoa(int(k)) + ")"
}

// Region is the region every emulator and every client from this package
// use. kinesis-local scopes streams by region, so client and server must agree.
const Region = "us-east-1"

// EnvDir names the environment variable that overrides where the emulators
// are installed: a directory holding node_modules/kinesis-local and
// node_modules/kinesalite.
const EnvDir = "TIDEMARK_EMULATOR_DIR"

// InstallScript is the script that installs the emulators, relative to the
// module root.
const InstallScript = "scripts/install-emulators.sh"

const (
	startAttempts = 3                // fresh ports after a bind failure
	readyTimeout  = 60 * time.Second // generous: 2 cores, -race, parallel tests
	stopGrace     = 3 * time.Second  // SIGTERM to SIGKILL
	reapTimeout   = 10 * time.Second // SIGKILL to exit
)

//go:embed bind-localhost.js
var bindLocalhost []byte

// surviveAbort is dynalite's second preload: a client's aborted request
// must not end the process (see survive-abort.js).
//
//go:embed survive-abort.js
var surviveAbort []byte

// Emulator is one running emulator process. Its fields are read-only.
type Emulator struct {
	// Kind is the emulator that runs.
	Kind Kind
	// Endpoint is its base URL, http://127.0.0.1:port.
	Endpoint string
	// Client is a Kinesis client ready to use against it (static
	// credentials, region [Region]); nil for [Dynalite].
	Client *kinesis.Client

	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	out  *syncBuffer
}

// Start starts an emulator of the given kind on a free 127.0.0.1 port, waits
// until it answers, and registers its stop (SIGTERM to its process group,
// SIGKILL after a short grace) with tb.Cleanup. When the test fails, the
// emulator's output is logged.
//
// When the emulators are not installed, Start skips the test if they are
// optional ([Optional]: testing.Short() outside the test command) and
// fails it otherwise, naming the install script.
func Start(tb testing.TB, kind Kind) *Emulator {
	tb.Helper()
	e, err := Launch(kind, tb.TempDir())
	if errors.Is(err, ErrNotInstalled) && Optional() {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Stop(); err != nil {
			tb.Errorf("emulator: stop %s: %v", kind, err)
		}
		if tb.Failed() {
			tb.Logf("emulator: %s output:\n%s", kind, e.out.orNone())
		}
	})
	return e
}

// EnvRequired names the environment variable that makes the services the
// tests start (the emulators, and PostgreSQL in kinesisload/pgsink)
// required even with -short: scripts/test.sh sets it to 1, so that its
// short run fails, rather than skips, a test whose service is missing.
const EnvRequired = "TIDEMARK_REQUIRE_SERVICES"

// Optional reports whether a test may skip when the emulators are not
// installed: with -short, unless [EnvRequired] is set.
func Optional() bool {
	return testing.Short() && os.Getenv(EnvRequired) == ""
}

// ErrNotInstalled is wrapped by [Launch]'s error when the emulators (or
// node) are not installed.
var ErrNotInstalled = errors.New("emulator: not installed")

// Launch is [Start] for programs (examples/fleet): it starts an emulator
// of the given kind on a free 127.0.0.1 port and waits until it answers;
// tmp is a directory for a small file it needs. The caller stops it with
// [Emulator.Stop]. When the emulators are not installed, the error wraps
// [ErrNotInstalled] and names the install script.
func Launch(kind Kind, tmp string) (*Emulator, error) {
	script, err := scriptPath(kind)
	if err != nil {
		return nil, err
	}
	dir, err := installDir()
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, script))
	}
	if err == nil {
		_, err = exec.LookPath("node")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%v); run `bash %s` (or set %s)", ErrNotInstalled, kind, err, InstallScript, EnvDir)
	}

	preload := filepath.Join(tmp, "bind-localhost.js")
	if err := os.WriteFile(preload, bindLocalhost, 0o644); err != nil {
		return nil, fmt.Errorf("emulator: write the preload: %v", err)
	}
	if kind == Dynalite {
		if err := os.WriteFile(filepath.Join(tmp, "survive-abort.js"), surviveAbort, 0o644); err != nil {
			return nil, fmt.Errorf("emulator: write the preload: %v", err)
		}
	}

	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		e, err := launch(dir, preload, script, kind)
		if err != nil {
			// Could not even pick ports or exec node: retrying will not help.
			return nil, fmt.Errorf("emulator: start %s: %v", kind, err)
		}
		err = e.waitReady(readyTimeout)
		if err == nil {
			return e, nil
		}
		stopErr := e.stop()
		errs = append(errs, fmt.Errorf("attempt %d on port %d: %w\n%s", attempt, e.port, errors.Join(err, stopErr), e.out.orNone()))
		if !strings.Contains(e.out.String(), "EADDRINUSE") {
			break // not a port race: retrying would fail the same way
		}
	}
	return nil, fmt.Errorf("emulator: start %s: %v", kind, errors.Join(errs...))
}

// Stop stops the emulator: SIGTERM to its process group, SIGKILL after a
// short grace. Start's cleanup calls it; a program that used [Launch]
// calls it itself.
func (e *Emulator) Stop() error { return e.stop() }

// launch picks free ports and starts the process; it does not wait.
func launch(dir, preload, script string, kind Kind) (*Emulator, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	args := []string{"-r", preload, script}
	env := os.Environ()
	switch kind {
	case KinesisLocal:
		env = append(env,
			"KINESIS_MOCK_PLAIN_PORT="+strconv.Itoa(port),
			"KINESIS_MOCK_TLS_PORT="+strconv.Itoa(ports[1]),
			"KINESIS_MOCK_CERT_PATH="+filepath.Join(dir, "node_modules", "kinesis-local", "server.json"),
			"AWS_REGION="+Region,
			"SHARD_LIMIT=100000",
			"SHOULD_PERSIST_DATA=false",
			// SIGTERM takes about 30 s without this.
			"CATS_EFFECT_SHUTDOWN_HOOK_TIMEOUT=1s",
		)
		for _, op := range []string{
			"CREATE_STREAM", "DELETE_STREAM", "MERGE_SHARDS", "SPLIT_SHARD",
			"UPDATE_SHARD_COUNT", "UPDATE_STREAM_MODE", "START_STREAM_ENCRYPTION",
			"STOP_STREAM_ENCRYPTION", "REGISTER_STREAM_CONSUMER", "DEREGISTER_STREAM_CONSUMER",
		} {
			env = append(env, op+"_DURATION=10ms")
		}
	case Kinesalite:
		// The default shard limit is 10 for the whole account, and splits count.
		args = append(args, "--port", strconv.Itoa(port), "--shardLimit", "1000")
	case Dynalite:
		// dynalite has a --host option: bind-localhost.js is not needed,
		// but harmless; survive-abort.js is.
		args = append([]string{"-r", filepath.Join(filepath.Dir(preload), "survive-abort.js")}, args...)
		args = append(args, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	}

	out := &syncBuffer{}
	cmd := exec.Command("node", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// On Linux the emulator gets SIGKILL when the thread that started
		// it exits (see setDeathSignal); keep this goroutine on that thread
		// until the emulator has exited, so no other code can end it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the exit status of a killed emulator says nothing
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("exec node %s: %w", script, err)
	}
	e := &Emulator{
		Kind:     kind,
		Endpoint: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		port:     port,
		cmd:      cmd,
		done:     done,
		out:      out,
	}
	if kind != Dynalite {
		e.Client = NewClient(e.Endpoint)
	}
	return e, nil
}

// NewClient returns a Kinesis client for the emulator at endpoint:
// [kinesislocal.NewClient]'s, with region [Region]. Its HTTP client is the
// standard library's (so AWS_CA_BUNDLE plays no part), with the transport
// that supplies the initial-response event kinesis-local's
// SubscribeToShard omits ([kinesislocal.Transport]; it changes nothing for
// kinesalite, which has no SubscribeToShard). endpoint is one the harness
// made: NewClient panics on an endpoint that is not a URL.
func NewClient(endpoint string) *kinesis.Client {
	c, err := kinesislocal.NewClient(endpoint, func(o *kinesis.Options) { o.Region = Region })
	if err != nil {
		panic("emulator: " + err.Error())
	}
	return c
}

// waitReady polls until the emulator answers, the process exits, or the
// timeout passes.
func (e *Emulator) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		select {
		case <-e.done:
			return fmt.Errorf("%s exited before it was ready: %v", e.Kind, e.cmd.ProcessState)
		default:
		}
		last = e.probe(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer on %s within %v: %w", e.Kind, e.Endpoint, timeout, last)
		case <-e.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probe makes one readiness check: GET /healthcheck for kinesis-local,
// GET / for dynalite (any answer), ListStreams for kinesalite.
func (e *Emulator) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if e.Kind == Dynalite {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Endpoint+"/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if e.Kind == KinesisLocal {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Endpoint+"/healthcheck", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthcheck: %s", resp.Status)
		}
		return nil
	}
	_, err := e.Client.ListStreams(ctx, &kinesis.ListStreamsInput{}, func(o *kinesis.Options) {
		o.RetryMaxAttempts = 1
	})
	return err
}

// stop sends SIGTERM to the process group, SIGKILL after a grace, and waits
// until the process is reaped.
func (e *Emulator) stop() error {
	pid := e.cmd.Process.Pid
	signalGroup(pid, false)
	select {
	case <-e.done:
	case <-time.After(stopGrace):
	}
	// Kill whatever is left of the group, leader or not.
	signalGroup(pid, true)
	select {
	case <-e.done:
		return nil
	case <-time.After(reapTimeout):
		return fmt.Errorf("pid %d did not exit %v after SIGKILL", pid, reapTimeout)
	}
}

// WaitStreamActive polls DescribeStreamSummary until the stream is ACTIVE or
// ctx ends. The error names the stream and its last status or error.
func WaitStreamActive(ctx context.Context, client StreamDescriber, name string) error {
	var last string
	for {
		out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		switch {
		case err != nil:
			last = err.Error()
		case out.StreamDescriptionSummary == nil:
			last = "no StreamDescriptionSummary"
		case out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive:
			return nil
		default:
			last = "status " + string(out.StreamDescriptionSummary.StreamStatus)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("emulator: stream %q not ACTIVE (%s): %w", name, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StreamDescriber is the one call [WaitStreamActive] makes. A
// *kinesis.Client and the in-memory Kinesis satisfy it.
type StreamDescriber interface {
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// scriptPath returns the emulator's entry point relative to the install dir.
func scriptPath(kind Kind) (string, error) {
	switch kind {
	case KinesisLocal:
		return filepath.Join("node_modules", "kinesis-local", "main.js"), nil
	case Kinesalite:
		return filepath.Join("node_modules", "kinesalite", "cli.js"), nil
	case Dynalite:
		return filepath.Join("node_modules", "dynalite", "cli.js"), nil
	}
	return "", fmt.Errorf("emulator: unknown kind %d", int(kind))
}

// installDir returns $TIDEMARK_EMULATOR_DIR, or .cache/emulators under the
// repository root: the nearest directory above the working directory that
// holds both go.mod and the install script (so sub-modules find it too).
func installDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Abs(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if fileExists(filepath.Join(d, "go.mod")) && fileExists(filepath.Join(d, filepath.FromSlash(InstallScript))) {
			return filepath.Join(d, ".cache", "emulators"), nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no repository root (go.mod and %s) above %s", InstallScript, wd)
		}
		d = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before the emulator binds it; Start retries.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// syncBuffer is a bytes.Buffer safe for the process's writers and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// orNone returns the output, or "(no output)" when there is none.
func (b *syncBuffer) orNone() string {
	if s := b.String(); s != "" {
		return s
	}
	return "(no output)"
}
