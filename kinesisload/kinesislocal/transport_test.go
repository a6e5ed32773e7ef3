package kinesislocal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/eventstream"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload/kinesislocal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// encode encodes one event-stream message.
func encode(t *testing.T, msgType, eventType string, payload string) []byte {
	t.Helper()
	var msg eventstream.Message
	msg.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(msgType))
	if msgType == eventstream.ExceptionMessageType {
		msg.Headers.Set(eventstream.ExceptionTypeHeader, eventstream.StringValue(eventType))
	} else {
		msg.Headers.Set(eventstream.EventTypeHeader, eventstream.StringValue(eventType))
	}
	if payload != "" {
		msg.Headers.Set(eventstream.ContentTypeHeader, eventstream.StringValue("application/json"))
		msg.Payload = []byte(payload)
	}
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, msg); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// recordsEvent is a SubscribeToShardEvent with one record, "hello" at
// sequence number 1.
func recordsEvent(t *testing.T) []byte {
	return encode(t, eventstream.EventMessageType, "SubscribeToShardEvent",
		`{"Records":[{"Data":"aGVsbG8=","PartitionKey":"k","SequenceNumber":"1","ApproximateArrivalTimestamp":1.7E9}],`+
			`"ContinuationSequenceNumber":"1","MillisBehindLatest":0}`)
}

// server answers SubscribeToShard with the given event-stream bytes and
// every other call with an empty JSON object; it records each answer's
// target.
func server(t *testing.T, stream []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SubscribeToShard") {
			w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(stream)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// subscribe calls SubscribeToShard with c and returns the data of the
// records of every event until the stream ends (and the type of every
// other event), and the stream's error.
func subscribe(t *testing.T, c *kinesis.Client) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN:      aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1"),
		ShardId:          aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon},
	})
	if err != nil {
		return nil, err
	}
	es := out.GetStream()
	defer es.Close()
	var got []string
	for ev := range es.Events() {
		e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !ok {
			got = append(got, fmt.Sprintf("an event of type %T", ev))
			continue
		}
		for _, r := range e.Value.Records {
			got = append(got, string(r.Data))
		}
	}
	return got, es.Err()
}

// stockClient is a client for endpoint as the SDK makes it, without
// [kinesislocal.Transport].
func stockClient(endpoint string) *kinesis.Client {
	return kinesis.New(kinesis.Options{
		Region:       kinesislocal.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("a", "b", ""),
		HTTPClient:   &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	})
}

// TestSubscribeWithoutInitialResponse: an answer as kinesis-local 0.6.2
// sends it (the first event is a SubscribeToShardEvent) fails in the stock
// SDK client and is read through NewClient's.
func TestSubscribeWithoutInitialResponse(t *testing.T) {
	srv := server(t, recordsEvent(t))

	_, err := subscribe(t, stockClient(srv.URL))
	if err == nil || !strings.Contains(err.Error(), "expected initial-response") {
		t.Fatalf("the stock client: %v, want the SDK's \"expected initial-response\" error (else this test shows nothing)", err)
	}

	c, err := kinesislocal.NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := subscribe(t, c)
	if err != nil {
		t.Fatalf("NewClient's client: %v", err)
	}
	if diff := cmp.Diff([]string{"hello"}, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestSubscribeWithInitialResponse: an answer that already begins with an
// initial-response, as Kinesis sends it, is read as it came: no second
// initial-response is added (the SDK would take it for an unknown event).
func TestSubscribeWithInitialResponse(t *testing.T) {
	srv := server(t, append(encode(t, eventstream.EventMessageType, "initial-response", "{}"), recordsEvent(t)...))
	for name, c := range map[string]*kinesis.Client{"stock": stockClient(srv.URL), "kinesislocal": mustClient(t, srv.URL)} {
		got, err := subscribe(t, c)
		if err != nil {
			t.Fatalf("%s client: %v", name, err)
		}
		if diff := cmp.Diff([]string{"hello"}, got); diff != "" {
			t.Errorf("%s client: records (-want +got):\n%s", name, diff)
		}
	}
}

func mustClient(t *testing.T, endpoint string) *kinesis.Client {
	t.Helper()
	c, err := kinesislocal.NewClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTripper answers every request with a copy of resp and body.
type roundTripper struct {
	status int
	body   []byte
	closed *bool
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    rt.status,
		Header:        http.Header{},
		Body:          closeRecorder{bytes.NewReader(rt.body), rt.closed},
		ContentLength: int64(len(rt.body)),
		Request:       req,
	}, nil
}

type closeRecorder struct {
	io.Reader
	closed *bool
}

func (c closeRecorder) Close() error { *c.closed = true; return nil }

// TestTransportBytes checks the exact bytes the SDK would read for each
// kind of answer, and that closing the body closes the answer's.
func TestTransportBytes(t *testing.T) {
	event := recordsEvent(t)
	initial := encode(t, eventstream.EventMessageType, "initial-response", "")
	exception := encode(t, eventstream.ExceptionMessageType, "ResourceInUseException", `{"message":"in use"}`)
	garbage := []byte("not an event stream at all, and longer than a prelude")
	for _, tc := range []struct {
		name   string
		target string
		status int
		body   []byte
		want   []byte
	}{
		{"kinesis-local's answer", "Kinesis_20131202.SubscribeToShard", 200, event, append(initial[:len(initial):len(initial)], event...)},
		{"an exception first", "Kinesis_20131202.SubscribeToShard", 200, exception, append(initial[:len(initial):len(initial)], exception...)},
		{"Kinesis's answer", "Kinesis_20131202.SubscribeToShard", 200, append(initial[:len(initial):len(initial)], event...), append(initial[:len(initial):len(initial)], event...)},
		{"an empty stream", "Kinesis_20131202.SubscribeToShard", 200, nil, nil},
		{"not an event stream", "Kinesis_20131202.SubscribeToShard", 200, garbage, garbage},
		{"cut short", "Kinesis_20131202.SubscribeToShard", 200, event[:len(event)-3], event[:len(event)-3]},
		{"an error answer", "Kinesis_20131202.SubscribeToShard", 400, []byte(`{"__type":"ResourceInUseException"}`), []byte(`{"__type":"ResourceInUseException"}`)},
		{"another call", "Kinesis_20131202.GetRecords", 200, event, event},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed := false
			rt := kinesislocal.Transport(roundTripper{status: tc.status, body: tc.body, closed: &closed})
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:4568/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Amz-Target", tc.target)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("body:\n got %q\nwant %q", got, tc.want)
			}
			if err := resp.Body.Close(); err != nil || !closed {
				t.Errorf("Close: %v, answer's body closed: %v", err, closed)
			}
		})
	}
}

// failingBody yields data, then err.
type failingBody struct {
	data []byte
	err  error
}

func (f *failingBody) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func (f *failingBody) Close() error { return nil }

type bodyTripper struct{ body io.ReadCloser }

func (b bodyTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: b.body, Request: req}, nil
}

// TestTransportBodyFails: a body that fails in its first message gives
// the reader what came and then the body's own error, every time it
// reads again.
func TestTransportBodyFails(t *testing.T) {
	event := recordsEvent(t)
	reset := errors.New("connection reset by peer")
	rt := kinesislocal.Transport(bodyTripper{&failingBody{data: event[:20], err: reset}})
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:4568/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "Kinesis_20131202.SubscribeToShard")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if !errors.Is(err, reset) || !bytes.Equal(got, event[:20]) {
		t.Errorf("ReadAll = %q, %v; want %q, %v", got, err, event[:20], reset)
	}
	if n, err := resp.Body.Read(make([]byte, 8)); n != 0 || !errors.Is(err, reset) {
		t.Errorf("Read after the failure = %d, %v; want 0, %v", n, err, reset)
	}
}

// TestNewClientEndpoint checks the endpoints NewClient refuses, and the
// options of a client it makes.
func TestNewClientEndpoint(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:4568", "localhost:4568", "ftp://127.0.0.1:4568", "http://", "http://[::1"} {
		if _, err := kinesislocal.NewClient(bad); err == nil || !strings.Contains(err.Error(), "kinesislocal: endpoint") {
			t.Errorf("NewClient(%q) = %v, want an error naming the endpoint", bad, err)
		}
	}
	c, err := kinesislocal.NewClient("http://127.0.0.1:4568", func(o *kinesis.Options) { o.Region = "eu-west-1" })
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options()
	creds, err := o.Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := []string{o.Region, aws.ToString(o.BaseEndpoint), creds.AccessKeyID, creds.SecretAccessKey}
	want := []string{"eu-west-1", "http://127.0.0.1:4568", kinesislocal.AccessKeyID, kinesislocal.SecretAccessKey}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("region, endpoint, credentials (-want +got):\n%s", diff)
	}
}
