package emulator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestStartStop starts each emulator, uses it, and checks that it listened on
// loopback only and that its process group is gone after the cleanup.
func TestStartStop(t *testing.T) {
	for _, kind := range []Kind{KinesisLocal, Kinesalite, Dynalite} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			var e *Emulator
			t.Run("run", func(t *testing.T) {
				e = Start(t, kind)
				if got, want := e.Endpoint, "http://127.0.0.1:"+strconv.Itoa(e.port); got != want {
					t.Errorf("Endpoint = %q, want %q", got, want)
				}

				if kind == Dynalite {
					// Start's probe had an answer; the DynamoDB client
					// lives in kinesisload/dynamo's module, which uses it.
					if e.Client != nil {
						t.Errorf("dynalite's Client is a Kinesis client")
					}
				} else {
					useStream(t, e)
				}
				addrs, err := listenAddrs(e.port)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{"127.0.0.1"}, addrs); diff != "" {
					t.Errorf("listening addresses of port %d (-want +got):\n%s", e.port, diff)
				}
				if ip := nonLoopbackIP(t); ip != nil {
					c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(e.port)), 2*time.Second)
					if err == nil {
						c.Close()
						t.Errorf("connected to the emulator through %s; it must listen on loopback only", ip)
					}
				}
			})
			if e == nil {
				return
			}
			select {
			case <-e.done:
			default:
				t.Fatalf("pid %d still running after the test's cleanup", e.cmd.Process.Pid)
			}
			// Signal 0 probes the group: ESRCH means no process is left in it.
			if err := syscall.Kill(-e.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("kill(-%d, 0) = %v, want ESRCH: the process group outlived the cleanup", e.cmd.Process.Pid, err)
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(e.port)), time.Second)
			if err == nil {
				c.Close()
				t.Errorf("port %d still accepts connections after the cleanup", e.port)
			}
		})
	}
}

// TestWaitStreamActive checks both outcomes against a stub: a stream that
// turns ACTIVE on the third call, and one that never does.
func TestWaitStreamActive(t *testing.T) {
	t.Run("becomes active", func(t *testing.T) {
		s := &stubDescriber{statuses: []string{"CREATING", "CREATING", "ACTIVE"}}
		if err := WaitStreamActive(context.Background(), s, "s"); err != nil {
			t.Fatalf("WaitStreamActive = %v, want nil", err)
		}
		if s.calls != 3 {
			t.Errorf("DescribeStreamSummary calls = %d, want 3", s.calls)
		}
	})
	t.Run("never active", func(t *testing.T) {
		s := &stubDescriber{statuses: []string{"CREATING"}}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := WaitStreamActive(ctx, s, "slow-stream")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitStreamActive = %v, want context.DeadlineExceeded", err)
		}
		for _, want := range []string{`"slow-stream"`, "CREATING"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
	})
}

// TestNotInstalled checks what Start does without an install: fail the
// test, naming the install script, or under -short skip it, unless the
// emulators are required (EnvRequired, as the test command sets).
func TestNotInstalled(t *testing.T) {
	for _, required := range []bool{false, true} {
		t.Run(fmt.Sprintf("required=%v", required), func(t *testing.T) {
			t.Setenv(EnvDir, t.TempDir())
			if required {
				t.Setenv(EnvRequired, "1")
			} else {
				t.Setenv(EnvRequired, "")
			}
			rec := &recordTB{TB: t}
			done := make(chan struct{})
			go func() { // Fatal and Skip end the goroutine with runtime.Goexit
				defer close(done)
				Start(rec, Kinesalite)
			}()
			<-done
			want := "fatal"
			if testing.Short() && !required {
				want = "skip"
			}
			if rec.outcome != want {
				t.Fatalf("Start without an install (short=%v, required=%v): outcome %q, want %q", testing.Short(), required, rec.outcome, want)
			}
			if !strings.Contains(rec.msg, InstallScript) {
				t.Errorf("message %q does not name %s", rec.msg, InstallScript)
			}
		})
	}
}

// recordTB records how Start ended the test instead of ending it.
type recordTB struct {
	testing.TB
	outcome string // "fatal" or "skip"
	msg     string
}

func (r *recordTB) Helper() {}

func (r *recordTB) Fatal(args ...any) {
	r.outcome, r.msg = "fatal", fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recordTB) Fatalf(format string, args ...any) {
	r.outcome, r.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordTB) Skip(args ...any) {
	r.outcome, r.msg = "skip", fmt.Sprint(args...)
	runtime.Goexit()
}

type stubDescriber struct {
	statuses []string
	calls    int
}

func (s *stubDescriber) DescribeStreamSummary(_ context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	st := s.statuses[min(s.calls, len(s.statuses)-1)]
	s.calls++
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{StreamName: in.StreamName, StreamStatus: types.StreamStatus(st)}}, nil
}

// listenAddrs returns the local addresses that listen on port, from
// /proc/net/tcp and /proc/net/tcp6.
func listenAddrs(port int) ([]string, error) {
	var addrs []string
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			hexIP, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil || int(p) != port {
				continue
			}
			ip, err := procIP(hexIP)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			addrs = append(addrs, ip.String())
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// procIP decodes an address of /proc/net/tcp{,6}: 32-bit words in host
// (little-endian) order, each printed as hex.
func procIP(h string) (net.IP, error) {
	if len(h) != 8 && len(h) != 32 {
		return nil, fmt.Errorf("address %q: bad length", h)
	}
	ip := make(net.IP, len(h)/2)
	for w := 0; w < len(h)/8; w++ {
		v, err := strconv.ParseUint(h[w*8:w*8+8], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", h, err)
		}
		for b := range 4 {
			ip[w*4+b] = byte(v >> (8 * b))
		}
	}
	return ip, nil
}

func TestProcIP(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0100007F", "127.0.0.1"},
		{"00000000", "0.0.0.0"},
		{"00000000000000000000000000000000", "::"},
		{"00000000000000000000000001000000", "::1"},
	} {
		ip, err := procIP(tc.in)
		if err != nil {
			t.Fatalf("procIP(%q): %v", tc.in, err)
		}
		if ip.String() != tc.want {
			t.Errorf("procIP(%q) = %s, want %s", tc.in, ip, tc.want)
		}
	}
}

// nonLoopbackIP returns a local IPv4 address that is not loopback, or nil
// when the machine has none (then the /proc check alone covers the binding).
func nonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatalf("InterfaceAddrs: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

// useStream creates a stream on a Kinesis emulator and lists it.
func useStream(t *testing.T, e *Emulator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "start-stop-" + e.Kind.String()
	if _, err := e.Client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if err := WaitStreamActive(ctx, e.Client, name); err != nil {
		t.Fatal(err)
	}
	out, err := e.Client.ListStreams(ctx, &kinesis.ListStreamsInput{})
	if err != nil {
		t.Fatalf("ListStreams: %v", err)
	}
	if diff := cmp.Diff([]string{name}, out.StreamNames); diff != "" {
		t.Errorf("ListStreams (-want +got):\n%s", diff)
	}
}
