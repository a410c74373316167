package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// lateFINConn is a server-side connection that models a server closing a
// connection idle for closeAfter, with its FIN reaching the client only
// after the client has sent its next request on it (the race of
// keepalive.go, at its worst): a request that arrives on a connection idle
// for closeAfter is not read, and the connection is closed.
type lateFINConn struct {
	net.Conn
	closeAfter time.Duration
	mu         sync.Mutex
	last       time.Time // accepted, or the last response written
}

func (c *lateFINConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.last = time.Now()
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *lateFINConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	idle := time.Since(c.last)
	c.mu.Unlock()
	if n > 0 && idle >= c.closeAfter {
		c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

type lateFINListener struct {
	net.Listener
	closeAfter time.Duration
}

func (l lateFINListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lateFINConn{Conn: c, closeAfter: l.closeAfter, last: time.Now()}, nil
}

// TestStoreWriteAfterServerClosedIdle is the 502 "reused connection
// …, idle 5.022s …: EOF" while the store was up, reproduced: a write, an
// idle pause past the server's timeout, and a write on the pooled
// connection the server has closed. With the client's idle timeout above
// the server's (the example's old 30 s against the store's 5 s header
// timeout) the second write fails with EOF on the reused connection; with
// the example's own ratio (clientIdleTimeout to serverHeaderTimeout) the
// client has dropped the connection and the write goes out on a new one.
// The timeouts are scaled down from the example's by the same factor.
func TestStoreWriteAfterServerClosedIdle(t *testing.T) {
	const serverTimeout = 300 * time.Millisecond // stands for serverHeaderTimeout
	scale := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * float64(serverTimeout) / float64(serverHeaderTimeout))
	}
	for _, c := range []struct {
		name       string
		clientIdle time.Duration
		wantFail   bool
	}{
		{"the old client idle timeout (30 s against 5 s)", scale(30 * time.Second), true},
		{"clientIdleTimeout", scale(clientIdleTimeout), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Write([]byte(`{"ok":true}`))
			}))
			srv.Listener.Close()
			srv.Listener = lateFINListener{Listener: ln, closeAfter: serverTimeout}
			srv.Start()
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: c.clientIdle}
			defer tr.CloseIdleConnections()
			sc := newStoreClient(srv.URL, &http.Client{Transport: tr})
			ctx := context.Background()
			if _, err := sc.write(ctx, "payments/3/node-a", writeRequest{Resource: "r", Value: "1"}); err != nil {
				t.Fatal(err)
			}
			// The injected fault: the connection sits idle past the
			// server's timeout.
			time.Sleep(serverTimeout + serverTimeout/2)
			a, err := sc.write(ctx, "payments/3/node-a", writeRequest{Resource: "r", Value: "2"})
			switch {
			case c.wantFail && err == nil:
				t.Fatalf("the write on a connection the server closed succeeded (%d): the model does not reproduce the race", a.Status)
			case c.wantFail && !strings.Contains(err.Error(), "reused connection"):
				t.Fatalf("the write failed (%v), but not on the reused connection", err)
			case !c.wantFail && err != nil:
				t.Fatalf("write after an idle pause past the server's timeout: %v; the client kept a connection idle longer than the server does", err)
			}
			t.Logf("second write: %v", err)
		})
	}
}

// TestKeepAliveTimesAgree: the example's clients drop an idle connection
// well before its servers may close it.
func TestKeepAliveTimesAgree(t *testing.T) {
	if clientIdleTimeout <= 0 || clientIdleTimeout > serverHeaderTimeout*3/4 || clientIdleTimeout > serverIdleTimeout*3/4 {
		t.Fatalf("clientIdleTimeout %v against serverHeaderTimeout %v and serverIdleTimeout %v: want a margin of a quarter at least", clientIdleTimeout, serverHeaderTimeout, serverIdleTimeout)
	}
}
