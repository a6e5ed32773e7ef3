package killloop

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one running child process: the test binary re-executed with
// -test.run=^$ and extra environment, so that its TestMain runs the
// child's own main instead of the tests.
type Proc struct {
	cmd    *exec.Cmd
	lines  chan string   // stdout lines that start with the prefix, without it
	done   chan struct{} // closed when the process has exited and been reaped
	stderr *syncBuffer
	state  *os.ProcessState // set before done is closed
}

// Start starts the test binary again with env appended to the
// environment. Every line the child prints on stdout that starts with
// prefix is sent, without the prefix, to Lines (up to 16 unread ones;
// more are dropped). The kernel kills the child if the test binary dies
// without cleaning up (on Linux); the test's cleanup kills it if it still
// runs, and logs its stderr if the test failed.
func Start(t testing.TB, env []string, prefix string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, lines: make(chan string, 16), done: make(chan struct{}), stderr: &syncBuffer{}}
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
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case p.lines <- rest:
				default:
				}
			}
		}
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start the child process: %v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("child pid %d stderr:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// Lines returns the channel of the child's stdout lines that started with
// Start's prefix.
func (p *Proc) Lines() <-chan string { return p.lines }

// Done returns a channel closed once the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid is the child's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stderr returns what the child wrote on stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// State returns the child's exit state, or nil while it runs.
func (p *Proc) State() *os.ProcessState {
	select {
	case <-p.done:
		return p.state
	default:
		return nil
	}
}

// WaitLine waits up to timeout for the next line of Lines.
func (p *Proc) WaitLine(timeout time.Duration) (string, error) {
	select {
	case l := <-p.lines:
		return l, nil
	case <-p.done:
		return "", fmt.Errorf("the child exited (%v) before the line:\n%s", p.state, p.Stderr())
	case <-time.After(timeout):
		return "", fmt.Errorf("the child printed no line within %v:\n%s", timeout, p.Stderr())
	}
}

// Kill sends SIGKILL and waits until the child is reaped.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the child has exited, without waiting.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Term sends SIGTERM and waits up to timeout for the child to exit; it
// kills the child after that. It returns the exit code.
func (p *Proc) Term(timeout time.Duration) (int, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.Wait(timeout)
}

// Wait waits up to timeout for the child to exit by itself and returns its
// exit code; after timeout it kills the child and returns an error.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.state.ExitCode(), nil
	case <-time.After(timeout):
		p.Kill()
		return -1, fmt.Errorf("the child did not exit within %v:\n%s", timeout, p.Stderr())
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
