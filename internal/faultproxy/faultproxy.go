// Package faultproxy is a fault-injecting HTTP reverse proxy for tests, to put
// between an AWS SDK client and a Kinesis emulator on 127.0.0.1.
//
// Every request is forwarded to the upstream unless a fault is drawn for it.
// The faults are those a Kinesis client meets in production and must survive
// (or, for [FaultDenied], must report clearly), never a silent corruption:
//
//   - [FaultReset]: the upstream answers, the answer is thrown away and the
//     client's connection is reset (hijacked, SO_LINGER 0, closed: a TCP RST).
//   - [FaultServerError]: a 500 InternalFailure or a 503 ServiceUnavailable,
//     with the awsjson error body; the upstream never sees the request.
//   - [FaultThrottle]: HTTP 400 with X-Amzn-ErrorType and the awsjson body
//     ProvisionedThroughputExceededException "Rate exceeded" for data
//     operations (GetRecords, GetShardIterator, PutRecord, PutRecords),
//     LimitExceededException for control operations, as Kinesis sends them.
//   - [FaultDelay]: the request waits a random time up to Config.MaxDelay
//     before it is forwarded.
//   - [FaultTruncate]: the upstream's answer is sent with its full
//     Content-Length but only part of its body, and the connection is
//     closed: the client sees an unexpected EOF, never a short valid body.
//   - [FaultDenied]: HTTP 403 with the error type in Config.DeniedError
//     (default UnrecognizedClientException), as Kinesis answers refused
//     credentials.
//
// Rates are per operation, read from the X-Amz-Target header
// (Kinesis_20131202.GetRecords is the operation "GetRecords"), and can be
// changed while the proxy runs. Decisions come from one RNG seeded with
// Config.Seed, so a sequence of requests made in the same order draws the
// same faults. [Proxy.Counts] tells what was injected.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fault is a kind of injected fault.
type Fault int

// The faults, in the order they are drawn (see [Rates]).
const (
	// FaultDenied answers 403 with Config.DeniedError.
	FaultDenied Fault = iota + 1
	// FaultReset resets the client's connection after the upstream answered.
	FaultReset
	// FaultServerError answers 500 or 503 without forwarding.
	FaultServerError
	// FaultThrottle answers 400 with a throttling error without forwarding.
	FaultThrottle
	// FaultTruncate cuts the upstream's body short, keeping Content-Length.
	// An empty body cannot be cut: its connection is reset instead, and
	// counted as a truncation.
	FaultTruncate
	// FaultDelay holds the request before forwarding it.
	FaultDelay
)

// String returns the fault's name, such as "reset".
func (f Fault) String() string {
	switch f {
	case FaultDenied:
		return "denied"
	case FaultReset:
		return "reset"
	case FaultServerError:
		return "server-error"
	case FaultThrottle:
		return "throttle"
	case FaultTruncate:
		return "truncate"
	case FaultDelay:
		return "delay"
	}
	return fmt.Sprintf("faultproxy.Fault(%d)", int(f))
}

// Rates are the probabilities, each from 0 to 1, that a request gets each
// fault. At most one fault is injected per request: one number is drawn and
// compared with the rates added up in the order Denied, Reset, ServerError,
// Throttle, Truncate, Delay, so their sum must not exceed 1. The zero Rates
// injects nothing.
type Rates struct {
	Denied, Reset, ServerError, Throttle, Truncate, Delay float64
}

func (r Rates) validate(where string) error {
	sum := 0.0
	for _, f := range []struct {
		name string
		v    float64
	}{{"Denied", r.Denied}, {"Reset", r.Reset}, {"ServerError", r.ServerError}, {"Throttle", r.Throttle}, {"Truncate", r.Truncate}, {"Delay", r.Delay}} {
		if !(f.v >= 0 && f.v <= 1) { // also refuses NaN
			return fmt.Errorf("%w: %s.%s = %v: must be between 0 and 1", ErrInvalidConfig, where, f.name, f.v)
		}
		sum += f.v
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("%w: %s: the rates add up to %v, more than 1", ErrInvalidConfig, where, sum)
	}
	return nil
}

// draw maps u, uniform in [0, 1), to a fault or 0.
func (r Rates) draw(u float64) Fault {
	for _, c := range []struct {
		f Fault
		p float64
	}{{FaultDenied, r.Denied}, {FaultReset, r.Reset}, {FaultServerError, r.ServerError}, {FaultThrottle, r.Throttle}, {FaultTruncate, r.Truncate}, {FaultDelay, r.Delay}} {
		if u < c.p {
			return c.f
		}
		u -= c.p
	}
	return 0
}

// Config configures a [Proxy].
type Config struct {
	// Upstream is the base URL requests are forwarded to, such as
	// http://127.0.0.1:4567. Required.
	Upstream string
	// Seed seeds the RNG that draws faults, delays and cut points.
	Seed uint64
	// Default are the rates of an operation not in Ops.
	Default Rates
	// Ops are the rates per operation, keyed by operation name
	// ("GetRecords") or by the full X-Amz-Target value
	// ("Kinesis_20131202.GetRecords"); both mean the same operation.
	Ops map[string]Rates
	// MaxDelay is the longest FaultDelay wait; each wait is drawn
	// uniformly up to it. Default 200 ms.
	MaxDelay time.Duration
	// DeniedError is the error type of FaultDenied, such as
	// "UnrecognizedClientException" (the default) or
	// "InvalidSignatureException".
	DeniedError string
}

// Counts are the requests an operation received and the faults injected
// into them.
type Counts struct {
	Requests                                              int64
	Denied, Reset, ServerError, Throttle, Truncate, Delay int64
}

// Faults returns how many faults were injected in all.
func (c Counts) Faults() int64 {
	return c.Denied + c.Reset + c.ServerError + c.Throttle + c.Truncate + c.Delay
}

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.Denied += o.Denied
	c.Reset += o.Reset
	c.ServerError += o.ServerError
	c.Throttle += o.Throttle
	c.Truncate += o.Truncate
	c.Delay += o.Delay
}

func (c *Counts) count(f Fault) {
	switch f {
	case FaultDenied:
		c.Denied++
	case FaultReset:
		c.Reset++
	case FaultServerError:
		c.ServerError++
	case FaultThrottle:
		c.Throttle++
	case FaultTruncate:
		c.Truncate++
	case FaultDelay:
		c.Delay++
	}
}

// Errors of the proxy.
var (
	// ErrInvalidConfig is wrapped by every error of New about its Config.
	ErrInvalidConfig = errors.New("faultproxy: invalid config")
	// ErrClosed is returned by Close when the proxy is already closed.
	ErrClosed = errors.New("faultproxy: closed")
)

// DefaultMaxDelay is the default Config.MaxDelay.
const DefaultMaxDelay = 200 * time.Millisecond

// Proxy is a running fault-injecting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	upstream  string
	maxDelay  time.Duration
	denied    string
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	served    chan struct{} // closed when Serve has returned
	stop      chan struct{} // closed by Close: ends delays
	url       string

	mu      sync.Mutex
	rng     *rand.Rand
	def     Rates
	ops     map[string]Rates
	counts  map[string]*Counts
	closed  bool
	handles sync.WaitGroup // handlers running
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to
// cfg.Upstream. Stop it with [Proxy.Close].
func New(cfg Config) (*Proxy, error) {
	if cfg.Upstream == "" {
		return nil, fmt.Errorf("%w: Upstream = \"\": an upstream URL is required", ErrInvalidConfig)
	}
	if !strings.HasPrefix(cfg.Upstream, "http://") {
		return nil, fmt.Errorf("%w: Upstream = %q: must be an http:// URL", ErrInvalidConfig, cfg.Upstream)
	}
	if cfg.MaxDelay < 0 {
		return nil, fmt.Errorf("%w: MaxDelay = %v: must not be negative", ErrInvalidConfig, cfg.MaxDelay)
	}
	if err := cfg.Default.validate("Default"); err != nil {
		return nil, err
	}
	ops := map[string]Rates{}
	for op, r := range cfg.Ops {
		if err := r.validate("Ops[" + op + "]"); err != nil {
			return nil, err
		}
		ops[opName(op)] = r
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.DeniedError == "" {
		cfg.DeniedError = "UnrecognizedClientException"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		upstream:  strings.TrimRight(cfg.Upstream, "/"),
		maxDelay:  cfg.MaxDelay,
		denied:    cfg.DeniedError,
		ln:        ln,
		transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		served:    make(chan struct{}),
		stop:      make(chan struct{}),
		url:       "http://" + ln.Addr().String(),
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		def:       cfg.Default,
		ops:       ops,
		counts:    map[string]*Counts{},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

// URL returns the proxy's base URL, http://127.0.0.1:port: the client's
// endpoint.
func (p *Proxy) URL() string { return p.url }

// SetDefault replaces the rates of operations not set with SetRates or
// Config.Ops. It returns an error, and changes nothing, for invalid rates.
func (p *Proxy) SetDefault(r Rates) error {
	if err := r.validate("Default"); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.def = r
	return nil
}

// SetRates replaces the rates of one operation (by name or full target).
// It returns an error, and changes nothing, for invalid rates.
func (p *Proxy) SetRates(op string, r Rates) error {
	if err := r.validate("Ops[" + op + "]"); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops[opName(op)] = r
	return nil
}

// SetAll sets r as the default and as the rates of every operation, so
// that every request draws from r.
func (p *Proxy) SetAll(r Rates) error {
	if err := r.validate("rates"); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.def = r
	for op := range p.ops {
		p.ops[op] = r
	}
	return nil
}

// Counts returns what each operation received, keyed by operation name
// ("GetRecords"; "" for a request without X-Amz-Target).
func (p *Proxy) Counts() map[string]Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Counts, len(p.counts))
	for op, c := range p.counts {
		out[op] = *c
	}
	return out
}

// Total returns the counts of every operation added up.
func (p *Proxy) Total() Counts {
	var t Counts
	for _, c := range p.Counts() {
		t.add(c)
	}
	return t
}

// Close stops the proxy: it stops accepting, closes every connection,
// ends pending delays and waits for the running handlers. A second Close
// returns ErrClosed.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	err := p.srv.Close() // closes the listener and every connection
	<-p.served
	p.handles.Wait() // handlers of hijacked connections are not tracked by srv
	p.transport.CloseIdleConnections()
	return err
}

// opName returns the operation of an X-Amz-Target value or name.
func opName(target string) string {
	if i := strings.LastIndexByte(target, '.'); i >= 0 {
		return target[i+1:]
	}
	return target
}

// decide draws the fault of one request of op, and the random number its
// fault needs (delay length or cut point), and counts them.
func (p *Proxy) decide(op string) (f Fault, u float64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, 0, false
	}
	r, found := p.ops[op]
	if !found {
		r = p.def
	}
	f = r.draw(p.rng.Float64())
	u = p.rng.Float64()
	c := p.counts[op]
	if c == nil {
		c = &Counts{}
		p.counts[op] = c
	}
	c.Requests++
	c.count(f)
	p.handles.Add(1)
	return f, u, true
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	op := opName(r.Header.Get("X-Amz-Target"))
	f, u, ok := p.decide(op)
	if !ok {
		http.Error(w, "faultproxy: closed", http.StatusServiceUnavailable)
		return
	}
	defer p.handles.Done()
	// Read the whole request first, as the server would.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	switch f {
	case FaultDenied:
		msg := "The security token included in the request is invalid."
		if p.denied == "InvalidSignatureException" {
			msg = "The request signature we calculated does not match the signature you provided."
		}
		writeAWSError(w, http.StatusForbidden, p.denied, msg)
		return
	case FaultServerError:
		if u < 0.5 {
			writeAWSError(w, http.StatusInternalServerError, "InternalFailure", "faultproxy: injected internal failure")
		} else {
			writeAWSError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "faultproxy: injected service unavailable")
		}
		return
	case FaultThrottle:
		switch op {
		case "GetRecords", "GetShardIterator", "PutRecord", "PutRecords":
			writeAWSError(w, http.StatusBadRequest, "ProvisionedThroughputExceededException", "Rate exceeded")
		default:
			writeAWSError(w, http.StatusBadRequest, "LimitExceededException", "Rate exceeded")
		}
		return
	case FaultDelay:
		d := time.Duration(u * float64(p.maxDelay))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-p.stop:
			t.Stop()
			reset(w) // an empty 200 would look like an answer
			return
		}
	}

	if op == "SubscribeToShard" {
		p.stream(w, r, body, f, u)
		return
	}
	resp, respBody, err := p.forward(r.Context(), r, body)
	if err != nil {
		writeAWSError(w, http.StatusBadGateway, "ServiceUnavailable", "faultproxy: upstream: "+err.Error())
		return
	}
	switch f {
	case FaultReset:
		reset(w)
		return
	case FaultTruncate:
		if len(respBody) == 0 {
			// Nothing to cut: a reset is the closest detectable fault.
			reset(w)
			return
		}
		copyHeader(w.Header(), resp.Header)
		w.Header().Set("Content-Length", fmt.Sprint(len(respBody)))
		w.WriteHeader(resp.StatusCode)
		cut := int(u * float64(len(respBody))) // 0 <= cut < len
		_, _ = w.Write(respBody[:cut])
		// Less than Content-Length was written: net/http closes the
		// connection after the handler returns, and the client reads
		// an unexpected EOF. Hijack to make that explicit and immediate.
		if rc := http.NewResponseController(w); rc.Flush() == nil {
			if conn, _, err := rc.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
		return
	}
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("Content-Length", fmt.Sprint(len(respBody)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// stream forwards a SubscribeToShard call and streams its event stream
// back as it comes, flushing after every read, until either side ends it
// or the proxy closes. A Reset fault resets the connection at once; a
// Truncate fault cuts the stream after a random share of its first
// 64 KiB (the client reads an unexpected EOF mid-stream).
func (p *Proxy) stream(w http.ResponseWriter, r *http.Request, body []byte, f Fault, u float64) {
	if f == FaultReset {
		reset(w)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeAWSError(w, http.StatusBadGateway, "ServiceUnavailable", "faultproxy: upstream: "+err.Error())
		return
	}
	copyHeader(out.Header, r.Header)
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		writeAWSError(w, http.StatusBadGateway, "ServiceUnavailable", "faultproxy: upstream: "+err.Error())
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	limit := int64(-1)
	if f == FaultTruncate {
		limit = int64(u * (64 << 10))
	}
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := resp.Body.Read(buf)
		if limit >= 0 && sent+int64(n) > limit {
			n = int(limit - sent)
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			sent += int64(n)
			_ = rc.Flush()
		}
		if limit >= 0 && sent >= limit {
			if conn, _, herr := rc.Hijack(); herr == nil {
				_ = conn.Close()
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// forward sends the request upstream and reads the whole answer.
func (p *Proxy) forward(ctx context.Context, r *http.Request, body []byte) (*http.Response, []byte, error) {
	out, err := http.NewRequestWithContext(ctx, r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	copyHeader(out.Header, r.Header)
	out.Host = r.Host // the SDK signed the Host header it sent
	out.ContentLength = int64(len(body))
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, b, nil
}

// hopByHop are the headers that belong to one connection, not the message.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

func copyHeader(dst, src http.Header) {
	for k, vs := range maps.All(src) {
		if hopByHop[http.CanonicalHeaderKey(k)] {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}

// writeAWSError writes an awsjson 1.1 error as Kinesis does.
func writeAWSError(w http.ResponseWriter, status int, typ, msg string) {
	body := fmt.Sprintf(`{"__type":%q,"message":%q}`, typ, msg)
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.1")
	h.Set("X-Amzn-ErrorType", typ)
	h.Set("X-Amzn-RequestId", "faultproxy")
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// reset closes the client's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2, which the SDK does not speak to an
		// http:// endpoint): a 503 is the nearest retryable fault.
		writeAWSError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "faultproxy: cannot reset this connection")
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
