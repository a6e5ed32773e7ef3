package faultproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/kerr"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstream is a minimal Kinesis: it answers every operation with a valid,
// non-empty awsjson body and counts what it received.
type upstream struct {
	srv   *httptest.Server
	calls atomic.Int64
}

const getRecordsBody = `{"Records":[{"Data":"aGVsbG8=","PartitionKey":"k","SequenceNumber":"49590338271490256608559692538361571095921575989136588898"}],"NextShardIterator":"AAAA","MillisBehindLatest":0}`

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch r.Header.Get("X-Amz-Target") {
		case "Kinesis_20131202.GetRecords":
			_, _ = io.WriteString(w, getRecordsBody)
		case "Kinesis_20131202.ListShards":
			_, _ = io.WriteString(w, `{"Shards":[{"ShardId":"shardId-000000000000","HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"1"},"SequenceNumberRange":{"StartingSequenceNumber":"1"}}]}`)
		default:
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func start(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// sdkClient is a Kinesis client on the proxy with the SDK's retries off, so
// that each call is one request and its error is the proxy's fault.
func sdkClient(t *testing.T, endpoint string) *kinesis.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return kinesis.New(kinesis.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("AKID", "secret", ""),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: 1,
	})
}

// rawPost sends one awsjson request for op and returns the response with
// its body read (and the error of reading it).
func rawPost(t *testing.T, c *http.Client, url, op string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "Kinesis_20131202."+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func rawClient(t *testing.T) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestNoFaultForwardsUnchanged(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL})
	resp, body, err := rawPost(t, rawClient(t), p.URL(), "GetRecords")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != getRecordsBody {
		t.Errorf("got %d %q, want 200 with the upstream's body", resp.StatusCode, body)
	}
	out, err := sdkClient(t, p.URL()).GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
	if err != nil {
		t.Fatalf("GetRecords through the proxy: %v", err)
	}
	if len(out.Records) != 1 || string(out.Records[0].Data) != "hello" {
		t.Errorf("GetRecords = %+v, want the upstream's one record", out.Records)
	}
	if diff := cmp.Diff(map[string]Counts{"GetRecords": {Requests: 2}}, p.Counts()); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
}

func TestThrottleIsTypedLikeKinesis(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL, Default: Rates{Throttle: 1}})
	resp, body, err := rawPost(t, rawClient(t), p.URL(), "GetRecords")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest ||
		resp.Header.Get("X-Amzn-ErrorType") != "ProvisionedThroughputExceededException" ||
		string(body) != `{"__type":"ProvisionedThroughputExceededException","message":"Rate exceeded"}` {
		t.Errorf("got %d, X-Amzn-ErrorType %q, body %s", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), body)
	}
	c := sdkClient(t, p.URL())
	_, err = c.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
	var pte *types.ProvisionedThroughputExceededException
	if !errors.As(err, &pte) || !kerr.IsThrottled(err) {
		t.Errorf("GetRecords error = %v, want a ProvisionedThroughputExceededException that kerr.IsThrottled", err)
	}
	_, err = c.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s")})
	var lee *types.LimitExceededException
	if !errors.As(err, &lee) || !kerr.IsThrottled(err) {
		t.Errorf("ListShards error = %v, want a LimitExceededException that kerr.IsThrottled", err)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("the upstream got %d requests, want 0: a throttled request is not forwarded", n)
	}
}

func TestServerErrorIsRetryable(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL, Seed: 3, Default: Rates{ServerError: 1}})
	c := sdkClient(t, p.URL())
	statuses := map[int]bool{}
	for range 20 {
		_, err := c.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s")})
		var re interface{ HTTPStatusCode() int }
		if !errors.As(err, &re) || !kerr.IsRetryable(err) {
			t.Fatalf("ListShards error = %v, want an HTTP error that kerr.IsRetryable", err)
		}
		statuses[re.HTTPStatusCode()] = true
	}
	if diff := cmp.Diff(map[int]bool{500: true, 503: true}, statuses); diff != "" {
		t.Errorf("statuses over 20 requests (-want +got):\n%s", diff)
	}
	if got := p.Total(); got.ServerError != 20 || got.Requests != 20 || got.Faults() != 20 {
		t.Errorf("Total = %+v, want 20 requests, 20 server errors", got)
	}
}

func TestDeniedAnswers403(t *testing.T) {
	for _, code := range []string{"", "InvalidSignatureException"} {
		want := code
		if want == "" {
			want = "UnrecognizedClientException"
		}
		t.Run(want, func(t *testing.T) {
			up := newUpstream(t)
			p := start(t, Config{Upstream: up.srv.URL, Default: Rates{Denied: 1}, DeniedError: code})
			_, err := sdkClient(t, p.URL()).ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s")})
			var ae smithy.APIError
			var re interface{ HTTPStatusCode() int }
			if !errors.As(err, &ae) || ae.ErrorCode() != want || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden {
				t.Fatalf("ListShards error = %v, want HTTP 403 %s", err, want)
			}
			if kerr.IsRetryable(err) {
				t.Errorf("kerr.IsRetryable(%v) = true, want false: refused credentials do not heal", err)
			}
		})
	}
}

func TestResetClosesTheConnection(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL, Default: Rates{Reset: 1}})
	_, _, err := rawPost(t, rawClient(t), p.URL(), "GetRecords")
	if err == nil {
		t.Fatal("a reset request succeeded")
	}
	_, err = sdkClient(t, p.URL()).GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
	if err == nil || !kerr.IsRetryable(err) {
		t.Errorf("GetRecords error = %v, want a transport error that kerr.IsRetryable", err)
	}
	// The upstream answered: a reset loses the answer, not the request.
	if got, n := p.Total(), up.calls.Load(); got.Reset != 2 || n != 2 {
		t.Errorf("resets %d, upstream calls %d; want 2 and 2", got.Reset, n)
	}
}

func TestTruncateIsDetectable(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL, Seed: 7, Default: Rates{Truncate: 1}})
	for i := range 10 {
		resp, body, err := rawPost(t, rawClient(t), p.URL(), "GetRecords")
		if err == nil {
			t.Fatalf("request %d: read %d bytes with no error, want an unexpected EOF", i, len(body))
		}
		if resp != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("request %d: error %v, want io.ErrUnexpectedEOF", i, err)
		}
		if len(body) >= len(getRecordsBody) {
			t.Errorf("request %d: got the whole body", i)
		}
	}
	// The SDK must see an error, never a short valid response.
	c := sdkClient(t, p.URL())
	for i := range 10 {
		out, err := c.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
		if err == nil {
			t.Fatalf("SDK call %d: a truncated response was accepted: %+v", i, out)
		}
	}
	if got := p.Total(); got.Truncate != 20 {
		t.Errorf("Total = %+v, want 20 truncations", got)
	}
}

// The SDK's retry classification of a truncated body: the Loader retries
// only what kerr.IsRetryable accepts, so a truncation it does not accept
// would stop a consume loop.
func TestTruncateIsRetryable(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL, Seed: 11, Default: Rates{Truncate: 1}})
	c := sdkClient(t, p.URL())
	for i := range 10 {
		_, err := c.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
		if !kerr.IsRetryable(err) {
			t.Errorf("call %d: kerr.IsRetryable(%v) = false", i, err)
		}
	}
}

func TestPerOperationRates(t *testing.T) {
	up := newUpstream(t)
	for _, key := range []string{"GetRecords", "Kinesis_20131202.GetRecords"} {
		t.Run(key, func(t *testing.T) {
			p := start(t, Config{Upstream: up.srv.URL, Ops: map[string]Rates{key: {Throttle: 1}}})
			c := sdkClient(t, p.URL())
			if _, err := c.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s")}); err != nil {
				t.Errorf("ListShards: %v, want no fault", err)
			}
			if _, err := c.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: aws.String("it")}); !kerr.IsThrottled(err) {
				t.Errorf("GetRecords: %v, want throttled", err)
			}
			want := map[string]Counts{"ListShards": {Requests: 1}, "GetRecords": {Requests: 1, Throttle: 1}}
			if diff := cmp.Diff(want, p.Counts()); diff != "" {
				t.Errorf("Counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetRatesWhileRunning(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL})
	c := sdkClient(t, p.URL())
	ls := func() error {
		_, err := c.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("s")})
		return err
	}
	if err := ls(); err != nil {
		t.Fatalf("before: %v", err)
	}
	if err := p.SetAll(Rates{Denied: 1}); err != nil {
		t.Fatal(err)
	}
	if err := ls(); err == nil {
		t.Error("after SetAll(Denied: 1): no error")
	}
	if err := p.SetRates("ListShards", Rates{}); err != nil {
		t.Fatal(err)
	}
	if err := ls(); err != nil {
		t.Errorf("after SetRates(ListShards, none): %v", err)
	}
	if err := p.SetDefault(Rates{Reset: 2}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("SetDefault(Reset: 2) = %v, want ErrInvalidConfig", err)
	}
}

// The same seed and the same sequence of requests draw the same faults.
func TestSeedIsDeterministic(t *testing.T) {
	up := newUpstream(t)
	outcomes := func(seed uint64) []string {
		p := start(t, Config{Upstream: up.srv.URL, Seed: seed, MaxDelay: time.Millisecond,
			Default: Rates{Denied: 0.1, Reset: 0.1, ServerError: 0.1, Throttle: 0.1, Truncate: 0.1, Delay: 0.1}})
		c := rawClient(t)
		var out []string
		for range 60 {
			resp, _, err := rawPost(t, c, p.URL(), "GetRecords")
			switch {
			case resp == nil && err != nil:
				out = append(out, "transport")
			case err != nil:
				out = append(out, "body")
			default:
				out = append(out, resp.Header.Get("X-Amzn-ErrorType")+" "+resp.Status)
			}
		}
		return out
	}
	a, b := outcomes(42), outcomes(42)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two runs with seed 42 differ (-first +second):\n%s", diff)
	}
	kinds := map[string]bool{}
	for _, o := range a {
		kinds[o] = true
	}
	if len(kinds) < 4 {
		t.Errorf("60 requests at 60%% fault rate gave only outcomes %v", kinds)
	}
}

// A delayed request ends when the proxy closes; Close does not wait out the
// delay.
func TestCloseEndsDelays(t *testing.T) {
	up := newUpstream(t)
	p, err := New(Config{Upstream: up.srv.URL, MaxDelay: time.Hour, Default: Rates{Delay: 1}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	c := rawClient(t)
	go func() {
		_, _, err := rawPost(t, c, p.URL(), "GetRecords")
		errc <- err
	}()
	for p.Total().Delay == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; err == nil {
		t.Error("the delayed request succeeded after Close")
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream got %d requests, want 0", n)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

func TestDelayForwards(t *testing.T) {
	up := newUpstream(t)
	p := start(t, Config{Upstream: up.srv.URL, MaxDelay: 5 * time.Millisecond, Default: Rates{Delay: 1}})
	resp, body, err := rawPost(t, rawClient(t), p.URL(), "GetRecords")
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != getRecordsBody {
		t.Fatalf("delayed request: %v, %v, %q; want the upstream's answer", err, resp, body)
	}
	if got := p.Total(); got.Delay != 1 || up.calls.Load() != 1 {
		t.Errorf("Total %+v, upstream calls %d; want 1 delay, 1 call", got, up.calls.Load())
	}
}

func TestNewRefusesInvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no upstream", Config{}, `Upstream = ""`},
		{"not http", Config{Upstream: "https://x"}, `Upstream = "https://x"`},
		{"negative delay", Config{Upstream: "http://x", MaxDelay: -1}, "MaxDelay = -1ns"},
		{"rate above 1", Config{Upstream: "http://x", Default: Rates{Reset: 1.5}}, "Default.Reset = 1.5"},
		{"negative rate", Config{Upstream: "http://x", Ops: map[string]Rates{"GetRecords": {Delay: -0.1}}}, "Ops[GetRecords].Delay = -0.1"},
		{"sum above 1", Config{Upstream: "http://x", Default: Rates{Reset: 0.6, Throttle: 0.6}}, "add up to 1.2"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig containing %q", tt.name, err, tt.want)
		}
	}
}

func TestFaultString(t *testing.T) {
	got := []string{}
	for f := FaultDenied; f <= FaultDelay+1; f++ {
		got = append(got, f.String())
	}
	want := []string{"denied", "reset", "server-error", "throttle", "truncate", "delay", "faultproxy.Fault(7)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
