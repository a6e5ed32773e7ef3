package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

var long = flag.Bool("reliability.long", false, "run the long form of the reliability suite (100 kills instead of 10); also TIDEMARK_RELIABILITY=long")

func longForm() bool {
	return *long || os.Getenv("TIDEMARK_RELIABILITY") == "long"
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envLoader); raw != "" {
		os.Exit(loaderMain(raw))
	}
	goleak.VerifyTestMain(m)
}

// newClient returns a Kinesis client for endpoint whose idle connections
// are closed when the test ends.
func newClient(t *testing.T, endpoint string) *kinesis.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return newClientWith(endpoint, tr)
}

// loaderProc is one running loader child process.
type loaderProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	inits  chan string   // INIT_RESOLVED payloads
	done   chan struct{} // closed when the process has exited and been reaped
	stderr *syncBuffer
	state  *os.ProcessState
}

// startLoader starts a loader process with cc. Cleanup kills it if it still
// runs.
func startLoader(t *testing.T, cc childConfig) *loaderProc {
	t.Helper()
	raw, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envLoader+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &loaderProc{t: t, cmd: cmd, inits: make(chan string, 16), done: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd.SysProcAttr)
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child exits:
		// keep this goroutine on its thread until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "INIT_RESOLVED "); ok {
				select {
				case p.inits <- rest:
				default:
				}
			}
		}
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start the loader process: %v", err)
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("loader pid %d stderr:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// waitInit waits for the INIT_RESOLVED line and returns its positions.
func (p *loaderProc) waitInit(timeout time.Duration) (map[string]string, error) {
	select {
	case raw := <-p.inits:
		pos := map[string]string{}
		return pos, json.Unmarshal([]byte(raw), &pos)
	case <-p.done:
		return nil, fmt.Errorf("the loader exited (%v) before its initialisation:\n%s", p.state, p.stderr.String())
	case <-time.After(timeout):
		return nil, fmt.Errorf("the loader did not initialise within %v:\n%s", timeout, p.stderr.String())
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *loaderProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has exited, without waiting.
func (p *loaderProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// term sends SIGTERM and waits up to timeout for a clean exit; it kills the
// process after that. It returns the exit code.
func (p *loaderProc) term(timeout time.Duration) (int, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(timeout)
}

// wait waits up to timeout for the process to exit by itself and returns
// its exit code; after timeout it kills it and returns an error.
func (p *loaderProc) wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.state.ExitCode(), nil
	case <-time.After(timeout):
		p.kill()
		return -1, fmt.Errorf("the loader did not exit within %v:\n%s", timeout, p.stderr.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writer and a reader.
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

// covers reports whether a record at seq is at or before position p, that
// is, committed when p is a shard's committed position.
func covers(p scan.Position, seq string) bool {
	switch p.Kind {
	case scan.KindShardEnd:
		return true
	case scan.KindAfterSequence:
		return scan.CompareSequence(seq, p.Sequence) <= 0
	case scan.KindAtSequence:
		return scan.CompareSequence(seq, p.Sequence) < 0
	}
	return false
}

func createStream(ctx context.Context, t *testing.T, c *kinesis.Client, name string, shards int32) {
	t.Helper()
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	if err := emulator.WaitStreamActive(ctx, c, name); err != nil {
		t.Fatal(err)
	}
}

// written is one record the producer wrote.
type written struct {
	shard, seq, data string
}

// putAll writes records with the given data, retrying what failed, and
// returns where each landed.
func putAll(ctx context.Context, c *kinesis.Client, stream string, data []string) ([]written, error) {
	var out []written
	pending := data
	var last error
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 50 {
			return out, fmt.Errorf("put %d records to %s: still failing after 50 attempts: %v", len(pending), stream, last)
		}
		entries := make([]types.PutRecordsRequestEntry, len(pending))
		for i, d := range pending {
			entries[i] = types.PutRecordsRequestEntry{Data: []byte(d), PartitionKey: aws.String(d[:min(len(d), 64)])}
		}
		res, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			last = err
			time.Sleep(50 * time.Millisecond) // e.g. the stream is UPDATING
			continue
		}
		var again []string
		for i, r := range res.Records {
			if r.ErrorCode != nil {
				last = fmt.Errorf("%s: %s", aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
				again = append(again, pending[i])
				continue
			}
			out = append(out, written{shard: aws.ToString(r.ShardId), seq: aws.ToString(r.SequenceNumber), data: pending[i]})
		}
		pending = again
	}
	return out, nil
}

func listShards(ctx context.Context, t *testing.T, c *kinesis.Client, stream string) []types.Shard {
	t.Helper()
	var shards []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := c.ListShards(ctx, in)
		if err != nil {
			t.Fatalf("ListShards %s: %v", stream, err)
		}
		shards = append(shards, out.Shards...)
		if aws.ToString(out.NextToken) == "" {
			return shards
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

func openShards(shards []types.Shard) []types.Shard {
	var open []types.Shard
	for _, s := range shards {
		if s.SequenceNumberRange.EndingSequenceNumber == nil {
			open = append(open, s)
		}
	}
	return open
}

// split splits the first open shard in two halves.
func split(ctx context.Context, t *testing.T, c *kinesis.Client, stream string) string {
	t.Helper()
	s := openShards(listShards(ctx, t, c, stream))[0]
	lo, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := c.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: s.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("split %s: %v", aws.ToString(s.ShardId), err)
	}
	if err := emulator.WaitStreamActive(ctx, c, stream); err != nil {
		t.Fatal(err)
	}
	return "split " + aws.ToString(s.ShardId)
}

// merge merges the first two adjacent open shards; with fewer than two open
// shards it splits instead.
func merge(ctx context.Context, t *testing.T, c *kinesis.Client, stream string) string {
	t.Helper()
	open := openShards(listShards(ctx, t, c, stream))
	for _, a := range open {
		for _, b := range open {
			ae, _ := new(big.Int).SetString(aws.ToString(a.HashKeyRange.EndingHashKey), 10)
			bs, _ := new(big.Int).SetString(aws.ToString(b.HashKeyRange.StartingHashKey), 10)
			if new(big.Int).Add(ae, big.NewInt(1)).Cmp(bs) != 0 {
				continue
			}
			if _, err := c.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: a.ShardId, AdjacentShardToMerge: b.ShardId}); err != nil {
				t.Fatalf("merge %s %s: %v", aws.ToString(a.ShardId), aws.ToString(b.ShardId), err)
			}
			if err := emulator.WaitStreamActive(ctx, c, stream); err != nil {
				t.Fatal(err)
			}
			return "merge " + aws.ToString(a.ShardId) + " " + aws.ToString(b.ShardId)
		}
	}
	return split(ctx, t, c, stream)
}

// errorsAs is errors.As for a target type, as a value.
func errorsAs[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
