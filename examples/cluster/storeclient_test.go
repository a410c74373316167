package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
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
