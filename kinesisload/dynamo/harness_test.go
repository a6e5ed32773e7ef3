package dynamo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/coordtest"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/kinesisload/fleet/tabletest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Errors of the fault transport.
var (
	errKilled  = errors.New("faults: host is down")
	errRefused = errors.New("faults: write refused before it was sent")
	errLost    = errors.New("faults: the answer to a write was lost")
)

// faults is an http.RoundTripper in front of DynamoDB for one host: it
// kills, pauses (requests wait), refuses writes without sending them, or
// sends writes and loses their answers.
type faults struct {
	base http.RoundTripper

	mu     sync.Mutex
	cond   *sync.Cond
	killed bool
	paused bool
	refuse int
	lose   int
	writes int
	// fail, when set, answers every call with this status and error
	// code without sending it (throttling, 5xx).
	failStatus int
	failCode   string
	// failOp limits fail to one operation ("CreateTable") or a few
	// ("Query,GetItem"); "" is all.
	failOp string
	// loseOp limits lose to one operation ("PutItem"); "" is every write.
	loseOp string
	// blockOp makes every call of that operation wait until it is
	// cleared or the call's context ends.
	blockOp string
	// holdOp makes the next call of that operation reach DynamoDB (it
	// lands) and then withholds its answer until the call's context
	// ends, when the call fails with the context's error; landed is told
	// when it landed. Once: holdOp is cleared.
	holdOp string
	landed chan<- struct{}
}

func newFaults() *faults {
	f := &faults{base: http.DefaultTransport.(*http.Transport).Clone()}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func isWrite(req *http.Request) bool {
	t := req.Header.Get("X-Amz-Target")
	return strings.HasSuffix(t, ".PutItem") || strings.HasSuffix(t, ".UpdateItem") || strings.HasSuffix(t, ".DeleteItem")
}

func (f *faults) RoundTrip(req *http.Request) (*http.Response, error) {
	write := isWrite(req)
	f.mu.Lock()
	for f.paused && !f.killed {
		f.cond.Wait()
	}
	if f.killed {
		f.mu.Unlock()
		return nil, errKilled
	}
	if f.blockOp != "" && strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+f.blockOp) {
		stop := context.AfterFunc(req.Context(), func() { f.set(func(*faults) {}) })
		for f.blockOp != "" && req.Context().Err() == nil {
			f.cond.Wait()
		}
		stop()
		if err := req.Context().Err(); err != nil {
			f.mu.Unlock()
			return nil, err
		}
	}
	if f.failStatus != 0 && (f.failOp == "" || slices.ContainsFunc(strings.Split(f.failOp, ","), func(op string) bool {
		return strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+op)
	})) {
		status, code := f.failStatus, f.failCode
		f.mu.Unlock()
		body := fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected"}`, code)
		return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"injected"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
	if write {
		f.writes++
	}
	if write && f.refuse > 0 {
		f.refuse--
		f.mu.Unlock()
		return nil, errRefused
	}
	lose := write && f.lose > 0 && (f.loseOp == "" || strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+f.loseOp))
	if lose {
		f.lose--
	}
	hold, landed := f.holdOp != "" && strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+f.holdOp), f.landed
	if hold {
		f.holdOp = ""
	}
	f.mu.Unlock()
	resp, err := f.base.RoundTrip(req)
	if hold && err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		landed <- struct{}{}
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if lose && err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errLost
	}
	return resp, err
}

func (f *faults) set(fn func(f *faults)) {
	f.mu.Lock()
	fn(f)
	f.cond.Broadcast()
	f.mu.Unlock()
}

// newClient returns a DynamoDB client for endpoint through rt, with the
// SDK's retries off (the Coordinator's own are under test).
func newClient(endpoint string, rt http.RoundTripper) *dynamodb.Client {
	return newClientRetries(endpoint, rt, false)
}

// newClientRetries returns a DynamoDB client for endpoint through rt, with
// the SDK's default retries when sdkRetries (as users get it): a write
// whose answer was lost is then sent again by the SDK, and its condition
// fails on the first attempt's effect.
func newClientRetries(endpoint string, rt http.RoundTripper, sdkRetries bool) *dynamodb.Client {
	o := dynamodb.Options{
		Region:       emulator.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", ""),
		HTTPClient:   &http.Client{Transport: rt},
		Retryer:      aws.NopRetryer{},
	}
	if sdkRetries {
		o.Retryer = nil // the SDK's standard retryer
	}
	return dynamodb.New(o)
}

// manualClock is the fleet's time, read by each host with its own skew.
type manualClock struct {
	now  *atomic.Int64 // nanoseconds since start
	skew atomic.Int64
}

var epoch0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *manualClock) Now() time.Time {
	return epoch0.Add(time.Duration(c.now.Load() + c.skew.Load()))
}

// harness is a fleet of Coordinators sharing one dynalite table, with
// manual time and faults: a [coordtest.Harness] with [coordtest.Faults].
type harness struct {
	t        *testing.T
	endpoint string
	table    string
	cfg      Config
	now      atomic.Int64
	// sdkRetries: the hosts' clients retry as the SDK does by default.
	sdkRetries bool

	mu    sync.Mutex
	hosts map[string]*testHost
}

type testHost struct {
	c      *Coordinator
	faults *faults
	clock  *manualClock
}

var tableSeq atomic.Int64

func newHarness(t *testing.T, endpoint string) *harness {
	return &harness{t: t, endpoint: endpoint, table: fmt.Sprintf("tidemark-test-%d", tableSeq.Add(1)),
		cfg: Config{LeaseDuration: 10 * time.Second, CreateTable: true}, hosts: map[string]*testHost{}}
}

func (h *harness) host(id string) *testHost {
	h.mu.Lock()
	defer h.mu.Unlock()
	th := h.hosts[id]
	if th == nil {
		f := newFaults()
		clk := &manualClock{now: &h.now}
		cfg := h.cfg
		cfg.Table, cfg.HostID = h.table, id
		fc := cfg.fleetConfig()
		fc.Clock, fc.ManualRounds = clk.Now, true
		c, err := newCoordinator(newClientRetries(h.endpoint, f, h.sdkRetries), cfg, fc)
		if err != nil {
			h.t.Fatal(err)
		}
		th = &testHost{c: c, faults: f, clock: clk}
		h.hosts[id] = th
	}
	return th
}

func (h *harness) Host(id string) kinesisload.Coordinator { return h.host(id).c }

func (h *harness) Timing() (lease, renew time.Duration) {
	cfg := h.host("a").c.Config()
	return cfg.LeaseDuration, cfg.RenewInterval
}

// Advance moves the clock in steps of at most RenewInterval, and after
// each runs the round of every host that is neither killed nor paused.
func (h *harness) Advance(d time.Duration) {
	_, renew := h.Timing()
	for d > 0 {
		step := min(d, renew)
		d -= step
		h.now.Add(int64(step))
		h.mu.Lock()
		var cs []*Coordinator
		for _, th := range h.hosts {
			th.faults.mu.Lock()
			down := th.faults.killed || th.faults.paused
			th.faults.mu.Unlock()
			if !down {
				cs = append(cs, th.c)
			}
		}
		h.mu.Unlock()
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(c.Round)
		}
		wg.Wait()
	}
}

func (h *harness) Kill(id string) { h.host(id).faults.set(func(f *faults) { f.killed = true }) }

func (h *harness) Pause(id string) {
	f := h.host(id).faults
	f.set(func(f *faults) { f.paused = true })
	// Registered after the hosts joined: runs before they leave.
	h.t.Cleanup(func() { f.set(func(f *faults) { f.paused = false }) })
}

func (h *harness) Resume(id string) { h.host(id).faults.set(func(f *faults) { f.paused = false }) }

func (h *harness) Refuse(id string, n int) { h.host(id).faults.set(func(f *faults) { f.refuse = n }) }

func (h *harness) LoseAnswers(id string, n int) {
	h.host(id).faults.set(func(f *faults) { f.lose = n })
}

func (h *harness) Skew(id string, d time.Duration) { h.host(id).clock.skew.Store(int64(d)) }

// SetBalanceBy implements [coordtest.Balancing]: call it before the
// first host.
func (h *harness) SetBalanceBy(b kinesisload.BalanceBy) { h.cfg.BalanceBy = b }

var (
	_ coordtest.Balancing = (*harness)(nil)
	_ coordtest.Harness   = (*harness)(nil)
	_ coordtest.Faults    = (*harness)(nil)
)

// The DynamoDB table keeps the table contract, on dynalite.
func TestTableConformance(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	tb := NewTable(newClient(e.Endpoint, newFaults()), fmt.Sprintf("tidemark-tabletest-%d", tableSeq.Add(1)), 10*time.Second)
	if err := tb.Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	tabletest.Run(t, func(*testing.T) fleet.Table { return tb })
}

// So does it with the SDK's default retries on: a write whose answer was
// lost is sent again by the SDK and refused by its own condition, which
// the protocol reads back (the table cannot tell).
func TestTableConformanceWithSDKRetries(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	ctx := context.Background()
	tb := NewTable(newClientRetries(e.Endpoint, newFaults(), true), fmt.Sprintf("tidemark-tabletest-%d", tableSeq.Add(1)), 10*time.Second)
	if err := tb.Ensure(ctx, true); err != nil {
		t.Fatal(err)
	}
	tabletest.Run(t, func(*testing.T) fleet.Table { return tb })
}
