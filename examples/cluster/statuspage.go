package main

import (
	"context"
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// The status page: GET / serves a small page (ui/, embedded in the binary:
// no build step, no framework) that polls GET /cluster, this node's view of
// the whole cluster, and redraws it. Both are read-only: they change
// nothing, and carry no tokens (epochs are public; tokens are not).

//go:embed ui
var uiFiles embed.FS

// uiHandler serves / (index.html) and /ui/*.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && !strings.HasPrefix(r.URL.Path, "/ui/") {
			writeError(w, http.StatusNotFound, "node: no such endpoint: "+r.URL.Path)
			return
		}
		if !allow(w, r, http.MethodGet) {
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		// The page only talks to its own origin; it may not be framed.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, sub, "index.html")
			return
		}
		http.StripPrefix("/ui", files).ServeHTTP(w, r)
	})
}

// clusterView is the body of GET /cluster.
type clusterView struct {
	Cluster     string        `json:"cluster"`
	Self        string        `json:"self"`
	Leader      string        `json:"leader"`       // as this node knows it
	LeaderTerm  uint64        `json:"leader_term"`  // the leader's own term, if it answered
	LeaderEpoch string        `json:"leader_epoch"` // the epoch the leader holds now, if it answered
	Members     []memberView  `json:"members"`
	StoreURL    string        `json:"store_url,omitempty"`
	Store       *storeStatus  `json:"store,omitempty"`
	StoreError  string        `json:"store_error,omitempty"`
	At          time.Time     `json:"at"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

// memberView is one member and its own /status, or why there is none.
type memberView struct {
	ID     string      `json:"id"`
	Raft   string      `json:"raft"`
	HTTP   string      `json:"http"`
	Voter  bool        `json:"voter"`
	Status *nodeStatus `json:"status,omitempty"`
	Error  string      `json:"error,omitempty"`
}

// handleCluster asks every member with a recorded HTTP address for its
// /status (concurrently, each bounded, so a paused node cannot stall the
// page) and the store for its /status.
func (n *node) handleCluster(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), 700*time.Millisecond)
	defer cancel()
	st := n.el.Status()
	v := clusterView{Cluster: n.cfg.Cluster, Self: n.cfg.ID, Leader: st.LeaderID, StoreURL: n.cfg.Store, At: start}
	members, err := n.el.Members()
	if err != nil {
		members = nil
	}
	v.Members = make([]memberView, len(members))
	var wg sync.WaitGroup
	for i, mb := range members {
		m := &v.Members[i]
		m.ID, m.Raft, m.Voter, m.HTTP = mb.ID, mb.Addr, mb.Voter, mb.Meta
		if m.ID == n.cfg.ID {
			self := n.status()
			m.Status, m.HTTP = &self, n.httpAddr
			continue
		}
		if m.HTTP == "" {
			m.Error = "HTTP address not recorded yet"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ms nodeStatus
			if err := n.getJSON(ctx, n.nodeURL(m.HTTP)+"/status", &ms); err != nil {
				m.Error = "unreachable"
				return
			}
			m.Status = &ms
		}()
	}
	if n.store != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss, err := n.store.status(ctx)
			if err != nil {
				v.StoreError = "store unreachable: " + err.Error()
				return
			}
			v.Store = &ss
		}()
	}
	wg.Wait()
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	for _, m := range v.Members {
		if m.ID == v.Leader && m.Status != nil {
			v.LeaderTerm, v.LeaderEpoch = m.Status.Term, m.Status.Epoch
		}
	}
	v.Elapsed = time.Since(start)
	writeJSON(w, http.StatusOK, v)
}

// getJSON GETs url with the node's client and decodes a 200 answer.
func (n *node) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &httpStatusError{resp.StatusCode}
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(v)
}

type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string { return http.StatusText(e.code) }
