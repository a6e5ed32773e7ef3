package emulator

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDynaliteSurvivesAnAbortedRequest: a client that gives up on a
// request while sending its body (a context cancelled mid-call) does not
// kill dynalite, which throws the request's 'aborted' error from its
// listener and died of it, failing whatever test ran next on it.
func TestDynaliteSurvivesAnAbortedRequest(t *testing.T) {
	e := Start(t, Dynalite)
	addr := strings.TrimPrefix(e.Endpoint, "http://")
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Headers promise a body that never comes whole.
		if _, err := c.Write([]byte("POST / HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/x-amz-json-1.0\r\n" +
			"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{\"Li")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a cancelled client may send
		}
		c.Close()
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.probe(ctx); err != nil {
		t.Fatalf("dynalite no longer answers after aborted requests: %v\n%s", err, e.out.orNone())
	}
}
