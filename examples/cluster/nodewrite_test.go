package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
)

// TestWriterLastWrite: the -write-every writer, once it learns its epoch
// is gone, makes exactly one more write with its old token and stops: the
// write always late, after the one that may have been in flight when the
// epoch was lost (a process paused mid-write, whose write landed before its
// successor's) — so a fenced store always gets a late write to refuse. It
// can learn between writes (a resign, or a pause between writes: then the
// write due when it wakes comes first) or during a write. The store
// accepts everything, as an -unfenced one does.
func TestWriterLastWrite(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lostAtWrite int // the write during which lctx ends; 0: before the first
	}{
		{"lost between writes", 0},
		{"lost during a write", 1},
		{"lost during a later write", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lctx, lose := context.WithCancel(context.Background())
			defer lose()
			if tc.lostAtWrite == 0 {
				lose()
			}
			var mu sync.Mutex
			writes := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				writes++
				if writes == tc.lostAtWrite {
					lose()
				}
				mu.Unlock()
				writeJSON(w, http.StatusOK, writeReply{OK: true})
			}))
			defer srv.Close()
			n := writerNode(t, srv)
			ep := epoch.Epoch{Cluster: "demo", Term: 2, Leader: "n1"}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			done := make(chan error, 1)
			go func() {
				done <- n.writeUnder(context.Background(), lctx, ep, writer{resource: "register", every: time.Millisecond, log: log, what: "write", held: "epoch"})
			}()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := max(tc.lostAtWrite, 1) + 1
			if writes != want {
				t.Errorf("the writer made %d writes, want %d: one more with the old token after it learned, then none", writes, want)
			}
		})
	}
}

// TestWriterShutdownQuiet: a write cut off because the node is shutting
// down (its context ends while the store has not answered) ends the writer
// without a warning: "write: no answer from the store" on every SIGTERM of
// a leader read as a fault. (A cut-off write is counted nowhere.)
func TestWriterShutdownQuiet(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		close(arrived)
		<-r.Context().Done() // never answers; the client gives up
	}))
	defer srv.Close()
	n := writerNode(t, srv)
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	done := make(chan error, 1)
	go func() {
		done <- n.writeUnder(ctx, context.Background(), epoch.Epoch{Cluster: "demo", Term: 2, Leader: "n1"},
			writer{resource: "register", every: time.Millisecond, log: log, what: "write", held: "epoch"})
	}()
	<-arrived
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); s != "" {
		t.Errorf("a write cut off by shutdown was logged:\n%s", s)
	}
}

// writerNode is a node n1, without Raft or HTTP API, whose store is srv.
func writerNode(t *testing.T, srv *httptest.Server) *node {
	t.Helper()
	codec, err := epoch.NewHMAC(newKey())
	if err != nil {
		t.Fatal(err)
	}
	return &node{cfg: nodeConfig{ID: "n1", codec: codec}, metrics: newNodeMetrics(), store: newStoreClient(srv.URL, srv.Client())}
}
