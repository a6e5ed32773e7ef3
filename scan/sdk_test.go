package scan_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/scan"
)

// TestResolveSwitchesSDKRetriesOff points a real *kinesis.Client, whose
// default retryer would make 3 attempts per call, at a server that always
// fails with a retryable error: the server sees exactly the Resolver's
// attempts, 1 + Retries.
func TestResolveSwitchesSDKRetriesOff(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"__type":"InternalFailure","message":"try again"}`))
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := kinesis.New(kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	for _, retries := range []int{-1, 1, 3} {
		requests.Store(0)
		r := newResolver(t, scan.Config{Retries: retries, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		_, err := r.Resolve(context.Background(), scan.Request{Client: client, Stream: "s", Shards: []string{shard0}})
		if err == nil {
			t.Fatalf("retries %d: Resolve succeeded against a failing server", retries)
		}
		want := int64(1 + max(retries, 0))
		if got := requests.Load(); got != want {
			t.Errorf("retries %d: the server saw %d requests, want %d: %v", retries, got, want, err)
		}
	}
}
