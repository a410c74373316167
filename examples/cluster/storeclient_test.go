package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// TestStoreClientRedirect: a write's token never follows a redirect to
// another origin (the store behind a misconfigured proxy, or an impostor
// answering for it); the redirected write is not sent.
func TestStoreClientRedirect(t *testing.T) {
	var hits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	defer other.Close()
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer store.Close()
	c := newStoreClient(store.URL, &http.Client{})
	_, err := c.write(context.Background(), "payments/3/node-a", writeRequest{Resource: "r", Value: "v"})
	if !errors.Is(err, epoch.ErrRedirect) {
		t.Fatalf("write redirected to another origin: %v, want ErrRedirect", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the other origin got %d requests carrying the token", n)
	}
}

// TestStoreClientNamesTheConnection: a write that gets no answer says
// whether it went on a fresh connection or on a pooled one that sat idle
// (and for how long): a store that hangs up on a connection the node still
// pools looks, without that, like a store that failed the write.
func TestStoreClientNamesTheConnection(t *testing.T) {
	var n atomic.Int64
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			// The second request, on the pooled connection: hang up
			// without an answer.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer store.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := newStoreClient(store.URL, &http.Client{Transport: tr})
	ctx := context.Background()
	if _, err := c.write(ctx, "payments/3/node-a", writeRequest{Resource: "r", Value: "v"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.write(ctx, "payments/3/node-a", writeRequest{Resource: "r", Value: "v"})
	if err == nil || !strings.Contains(err.Error(), "reused connection") || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("write the store hung up on: %v, want it to name the reused, idle connection", err)
	}
	store.Close()
	_, err = c.write(ctx, "payments/3/node-a", writeRequest{Resource: "r", Value: "v"})
	if err == nil || !strings.Contains(err.Error(), "no connection") {
		t.Fatalf("write to a closed store: %v, want \"no connection\"", err)
	}
}
