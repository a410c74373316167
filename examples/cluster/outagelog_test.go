package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOutageLogFolds: a leader writing every second to a store that is down
// for ten minutes logs one WARN when the outage starts, one summary a
// minute, and one INFO when the store answers again; every failure is still
// there at Debug.
func TestOutageLogFolds(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := newOutageLog(time.Minute)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o.now = func() time.Time { return clock }
	const failures = 600
	for range failures {
		o.failed(l, "write: no answer from the store", "error", "connection refused")
		clock = clock.Add(time.Second)
	}
	o.ok(l, "write: the store answers again")
	o.ok(l, "write: the store answers again") // no outage: nothing
	counts := map[string]int{}
	var end map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		counts[r["level"].(string)]++
		if r["level"] == "INFO" {
			end = r
		}
	}
	if counts["WARN"] != 10 || counts["DEBUG"] != failures-10 || counts["INFO"] != 1 {
		t.Errorf("lines by level %v for ten minutes down, want 10 WARN (the first and one a minute), %d DEBUG, 1 INFO", counts, failures-10)
	}
	if end["failures"] != float64(failures) || end["after"] != "10m0s" {
		t.Errorf("end of outage %v, want failures=%d after=10m0s", end, failures)
	}
}

// TestServerErrorLog: net/http's own "TLS handshake error" line lands in
// the node's slog stream, in its format, at Debug, not in the standard
// logger's format on stderr.
func TestServerErrorLog(t *testing.T) {
	var out lockedBuffer
	l := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = serverErrorLog(l, "api")
	srv.StartTLS()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // not a TLS client hello
	_, _ = c.Read(make([]byte, 64))
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "TLS handshake error") {
		if time.Now().After(deadline) {
			t.Fatalf("no handshake error logged: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &r); err != nil {
		t.Fatalf("not the node's slog format: %q: %v", out.String(), err)
	}
	if r["level"] != "DEBUG" || r["server"] != "api" || !strings.HasPrefix(r["msg"].(string), "http server: http: TLS handshake error") {
		t.Errorf("record %v: want DEBUG server=api msg=\"http server: http: TLS handshake error …\"", r)
	}
}
