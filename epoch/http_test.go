package epoch_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/epoch"
)

func TestRoundTripperStamps(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Values(epoch.Header))
	}))
	defer srv.Close()
	client := &http.Client{Transport: epoch.RoundTripper(srv.Client().Transport, func() (string, error) {
		return "prod/34/node-b", nil
	})}
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("x"))
	req.Header.Set(epoch.Header, "prod/1/stale") // replaced, not appended
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := got.Load().([]string); len(v) != 1 || v[0] != "prod/34/node-b" {
		t.Fatalf("server saw %q", v)
	}
	if req.Header.Get(epoch.Header) != "prod/1/stale" {
		t.Fatal("RoundTripper modified the caller's request")
	}
	srv.CloseClientConnections()
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestRoundTripperTokenFailure(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer srv.Close()
	lost := errors.New("not leader")
	for name, tok := range map[string]func() (string, error){
		"error": func() (string, error) { return "", lost },
		"empty": func() (string, error) { return "", nil },
		"nil":   nil,
	} {
		body := &closeRecorder{Reader: strings.NewReader("payload")}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		_, err := epoch.RoundTripper(nil, tok).RoundTrip(req)
		if err == nil {
			t.Fatalf("%s: request sent without a token", name)
		}
		if name == "error" && !errors.Is(err, lost) {
			t.Fatalf("%s: error %v does not wrap the token error", name, err)
		}
		if !body.closed {
			t.Fatalf("%s: request body not closed", name)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("server received %d requests", n)
	}
}
