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

// TestRoundTripperRedirects: a token never follows a redirect to another
// origin (another port here: an attacker's server, or a misconfigured
// load balancer); the redirected request is not sent at all. A redirect
// within the origin is stamped afresh.
func TestRoundTripperRedirects(t *testing.T) {
	var otherHits atomic.Int64
	var otherToken atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		otherToken.Store(r.Header.Get(epoch.Header))
	}))
	defer other.Close()
	var finalToken atomic.Value
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cross":
			http.Redirect(w, r, other.URL+"/x", http.StatusTemporaryRedirect)
		case "/same":
			http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
		case "/final":
			finalToken.Store(r.Header.Get(epoch.Header))
		}
	}))
	defer home.Close()
	client := &http.Client{Transport: epoch.RoundTripper(nil, func() (string, error) { return "prod/34/node-b", nil })}
	defer client.CloseIdleConnections()
	post := func(c *http.Client, path string, header bool) error {
		req, _ := http.NewRequest(http.MethodPost, home.URL+path, strings.NewReader("write"))
		if header {
			req.Header.Set(epoch.Header, "prod/34/node-b")
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := post(client, "/cross", false); !errors.Is(err, epoch.ErrRedirect) {
		t.Fatalf("cross-origin redirect through RoundTripper: %v, want ErrRedirect", err)
	}
	if n := otherHits.Load(); n != 0 {
		t.Fatalf("the other origin got %d requests (token %q)", n, otherToken.Load())
	}
	if err := post(client, "/same", false); err != nil {
		t.Fatal(err)
	}
	if got, _ := finalToken.Load().(string); got != "prod/34/node-b" {
		t.Fatalf("same-origin redirect carried token %q", got)
	}

	// A client that sets the header itself: http.Client copies it to every
	// redirect, whatever the host, unless CheckRedirect stops it.
	plain := &http.Client{}
	if err := post(plain, "/cross", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := otherToken.Load().(string); got != "prod/34/node-b" {
		t.Fatalf("without CheckRedirect the token went along, as expected of http.Client; got %q", got)
	}
	hits := otherHits.Load()
	guarded := &http.Client{CheckRedirect: epoch.CheckRedirect}
	if err := post(guarded, "/cross", true); !errors.Is(err, epoch.ErrRedirect) {
		t.Fatalf("cross-origin redirect under CheckRedirect: %v, want ErrRedirect", err)
	}
	if otherHits.Load() != hits {
		t.Fatal("CheckRedirect let the request with its token go to the other origin")
	}
	finalToken.Store("")
	if err := post(guarded, "/same", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := finalToken.Load().(string); got != "prod/34/node-b" {
		t.Fatalf("same-origin redirect under CheckRedirect carried %q", got)
	}
}
