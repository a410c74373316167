package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencemetrics"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// The store is the fenced resource outside the consensus group: a table of
// records, one per resource name, each written by some leader under its
// epoch. It is shared by the `store` subcommand and the demo, which serves
// the same handler on a loopback listener.
//
// Every write goes through storageguard (docs/DESIGN.md I4, I7): the token
// is verified first (signature, form, cluster — I6), then the epoch is
// admitted by the fence in the same step as the record write:
//
//   - sqlite: sqlfence's Fence.Tx — the fence raise and the record upsert
//     are one SQLite transaction, so neither exists without the other;
//   - bolt: httpfence.Middleware over a boltfence fence — the record handler
//     runs inside the fence's Do, after the raise is durable, and no newer
//     epoch is admitted until it has returned.
//
// With unfenced set (the control experiment only) the token is still
// verified but its epoch is not compared with anything: a deposed leader's
// late write overwrites its successor's, which is what the README's -unfenced run
// shows.

// DefaultResource is the resource a write or read names when it names none.
const DefaultResource = "register"

// record is one resource's current value and the epoch it was written under.
type record struct {
	Resource string
	Value    string
	Epoch    epoch.Epoch
}

// backend keeps the records. put writes without any fence check; the fenced
// write paths wrap it (see fencedWriter).
type backend interface {
	put(ctx context.Context, rec record) error
	get(ctx context.Context, resource string) (record, bool, error)
	resources(ctx context.Context) ([]string, error)
	fence() storageguard.Fence
	// fencedWriter returns the handler that admits the request's epoch and
	// writes the request's record as one step.
	fencedWriter(g *storageguard.Guard) http.Handler
	close() error
}

// storeConfig configures openStore. Codec verifies tokens (epoch.Plain()
// accepts any well-formed token).
type storeConfig struct {
	Backend  string // "sqlite" (default), "bolt", "postgres-trigger", or one of storeBackends (store_fences.go)
	Data     string // the SQLite file, or the boltfence file (records go next to it); postgres, postgres-trigger: the DSN
	Cluster  string
	Unfenced bool
	Verifier epoch.Verifier
	Log      *slog.Logger
	// TokenKey is the HMAC key Verifier holds (nil: unsigned tokens), for
	// postgres-trigger, which gives it to the database's guard.
	TokenKey []byte
	// PGSchema is postgres-trigger's schema (created if missing; the
	// guard's private schema is PGSchema_private); PGDropSchema drops both
	// at Close. PGAPIOnly leaves the table unguarded and fences only the
	// store's API (pgfence.Tx): the control of every-write-path.
	PGSchema     string
	PGDropSchema bool
	PGAPIOnly    bool
	// WriteDelay, for fault injection: each fenced write waits a random
	// time below it while it holds the fence, so that faults land inside
	// writes. Zero: none.
	WriteDelay time.Duration
	// ReleaseEarly, the fault suite's control experiment: the fence admits
	// an epoch but lets go before the write runs (Middleware backends).
	ReleaseEarly bool
	// ProxyTimeout is httpfence's ProxyConfig.Timeout for the proxy
	// backends. Zero: httpfence's default.
	ProxyTimeout time.Duration
	// OnWrite, if set, is called after every counted write (accepted or
	// refused), outside the store's locks: the demo's timeline uses it.
	OnWrite func(writeEvent)
}

// writeEvent is one counted write: what the store last accepted or refused.
type writeEvent struct {
	At       time.Time `json:"at"`
	Resource string    `json:"resource"`
	Value    string    `json:"value,omitempty"` // accepted writes only
	Epoch    string    `json:"epoch"`           // the epoch presented ("" if none could be read)
	Status   int       `json:"status"`
	Reason   string    `json:"reason,omitempty"` // refused writes only
}

// recordStore is the store's state and HTTP API.
type recordStore struct {
	cfg   storeConfig
	b     backend
	guard *storageguard.Guard
	write http.Handler // the write path: fenced, or (control experiment) not
	mux   *http.ServeMux

	mu         sync.Mutex
	accepted   uint64
	refused    uint64
	refusedBy  map[string]uint64 // presented epoch (or "unauthenticated") -> refusals
	acceptedBy map[string]uint64 // epoch -> accepted writes
	last       [2]*writeEvent    // the last accepted and the last refused write
	// newest is, per resource, the newest epoch accepted by this process,
	// and lost the writes accepted under an older epoch than that: on a
	// fenced store none, on an -unfenced one each is a lost update.
	newest map[string]epoch.Epoch
	lost   uint64
}

// openStore opens the backend named by cfg and builds the HTTP API.
func openStore(ctx context.Context, cfg storeConfig) (*recordStore, error) {
	if cfg.Data == "" {
		return nil, errors.New("store: -data is required (the SQLite or Bolt file)")
	}
	if err := epoch.ValidateName(cfg.Cluster); err != nil {
		return nil, fmt.Errorf("store: -cluster %q: %v", cfg.Cluster, err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	// Like a node's -data, a missing directory is created (postgres,
	// postgres-trigger: the DSN names no directory).
	if cfg.Backend != "postgres" && cfg.Backend != "postgres-trigger" {
		if err := os.MkdirAll(filepath.Dir(cfg.Data), 0o755); err != nil {
			return nil, fmt.Errorf("store: -data %s: %w", cfg.Data, err)
		}
	}
	if cfg.Backend == "" {
		cfg.Backend = "sqlite"
	}
	b, err := openBackend(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &recordStore{cfg: cfg, b: b, refusedBy: make(map[string]uint64), acceptedBy: make(map[string]uint64),
		newest: make(map[string]epoch.Epoch)}
	// Metrics see every path: the fence is wrapped (keeping Tx where it has
	// one, for storageguard.Tx) and the Guard reports its own refusals.
	reg := prometheus.NewRegistry()
	m := fencemetrics.MustNew(reg)
	var f storageguard.Fence
	switch bf := b.fence().(type) {
	case nil:
	case storageguard.TxFence[*sql.Tx]:
		f = fencemetrics.WrapTx(m, bf)
	default:
		f = m.Wrap(bf)
	}
	// Without a key loadCodec returned epoch.Plain() (and warned): an
	// explicit choice. A nil Verifier would make the Guard refuse every
	// token.
	s.guard = storageguard.NewGuard(f, storageguard.GuardConfig{Cluster: cfg.Cluster, Verifier: cfg.Verifier, OnRefuse: m.Refused,
		ClusterFor: roleResourceCluster(cfg.Cluster)}) // store_roles.go
	if cfg.Unfenced {
		cfg.Log.Warn("store: -unfenced: writes are NOT checked against the highest epoch (control experiment only)")
		s.write = http.HandlerFunc(s.unfencedWrite)
	} else {
		s.write = b.fencedWriter(s.guard)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/write", s.handleWrite)
	s.mux.HandleFunc("/read", s.handleRead)
	s.mux.HandleFunc("/status", s.handleStatus)
	s.mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return s, nil
}

// Handler returns the store's HTTP API.
func (s *recordStore) Handler() http.Handler { return s.mux }

// Close closes the backend.
func (s *recordStore) Close() error { return s.b.close() }

// writeRequest is the body of POST /write.
type writeRequest struct {
	Resource string `json:"resource"`
	Value    string `json:"value"`
}

// writeReply is the body of an accepted POST /write.
type writeReply struct {
	OK     bool   `json:"ok"`
	Term   uint64 `json:"term"`
	Leader string `json:"leader"`
}

type writeReqKey struct{}

// requestOf returns the parsed write request handleWrite put in the context.
func requestOf(r *http.Request) writeRequest {
	req, _ := r.Context().Value(writeReqKey{}).(writeRequest)
	return req
}

// handleWrite parses the request, runs the write path and counts the
// outcome.
func (s *recordStore) handleWrite(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	var req writeRequest
	if rb, ok := s.b.(rawBackend); ok && rb.raw() && !s.cfg.Unfenced {
		// A proxy: it reads the body itself, after admission.
		req.Resource = resourceParam(r)
	} else if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "store: "+err.Error())
		return
	}
	if req.Resource == "" {
		req.Resource = DefaultResource
	}
	if err := storageguard.ValidateResource(req.Resource); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rec := &capture{ResponseWriter: w}
	s.write.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), writeReqKey{}, req)))
	if ev, ok := s.count(req, rec); ok && s.cfg.OnWrite != nil {
		s.cfg.OnWrite(ev)
	}
}

// count records one write's outcome: accepted, or refused by the guard or
// the fence (401, 403, 409). Other failures (a bad request, a storage error)
// are neither, and ok is false for them.
func (s *recordStore) count(req writeRequest, rec *capture) (ev writeEvent, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev = writeEvent{At: time.Now(), Resource: req.Resource, Status: rec.status}
	switch rec.status {
	case http.StatusOK:
		s.accepted++
		var rep writeReply
		if json.Unmarshal(rec.body.Bytes(), &rep) == nil {
			ep := epoch.Epoch{Cluster: clusterOfResource(s.cfg.Cluster, req.Resource), Term: rep.Term, Leader: rep.Leader}
			ev.Epoch = ep.String()
			s.acceptedBy[ev.Epoch]++
			if n := s.newest[req.Resource]; ep.Term < n.Term {
				s.lost++
				s.cfg.Log.Warn("store: LOST UPDATE: accepted a write under an older epoch over a newer leader's (-unfenced)",
					"resource", req.Resource, "epoch", ev.Epoch, "newest", n.String(), "value", req.Value)
			} else {
				s.newest[req.Resource] = ep
			}
		}
		ev.Value = req.Value
		s.last[0] = &ev
	case http.StatusConflict, http.StatusUnauthorized, http.StatusForbidden:
		s.refused++
		var ref httpfence.Refusal
		key := "unauthenticated"
		if json.Unmarshal(rec.body.Bytes(), &ref) == nil {
			ev.Reason = ref.Error
			if ref.Presented != nil {
				key = ref.Presented.String()
				ev.Epoch = key
			}
		}
		s.refusedBy[key]++
		s.last[1] = &ev
	default:
		return ev, false
	}
	return ev, true
}

// capture records a response's status and (small) body while passing them
// on.
type capture struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

// Unwrap lets http.ResponseController reach the connection through
// capture: httpfence's proxy sets the client connection's deadlines and
// full duplex through it, and without Unwrap both silently fail.
func (c *capture) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len() < 4096 {
		c.body.Write(b)
	}
	return c.ResponseWriter.Write(b)
}

// refuseWrite answers a refused or failed write exactly as httpfence's
// proxy and Middleware do (so both backends answer alike).
func refuseWrite(w http.ResponseWriter, resource string, err error) {
	status, body := httpfence.RefusalFor(resource, err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", epoch.Header)
	}
	writeJSON(w, status, body)
}

// accept answers an accepted write.
func accept(w http.ResponseWriter, ep epoch.Epoch) {
	writeJSON(w, http.StatusOK, writeReply{OK: true, Term: ep.Term, Leader: ep.Leader})
}

// unfencedWrite is the control experiment's write path: the token must be
// authentic, but its epoch is not compared with the highest.
func (s *recordStore) unfencedWrite(w http.ResponseWriter, r *http.Request) {
	req := requestOf(r)
	tok, err := httpfence.TokenFrom(r)
	var ep epoch.Epoch
	if err == nil {
		ep, err = s.guard.Verify(req.Resource, tok)
	}
	if err != nil {
		refuseWrite(w, req.Resource, err)
		return
	}
	if err := s.b.put(r.Context(), record{Resource: req.Resource, Value: req.Value, Epoch: ep}); err != nil {
		refuseWrite(w, req.Resource, err)
		return
	}
	accept(w, ep)
}

// readReply is the body of GET /read.
type readReply struct {
	Resource string `json:"resource"`
	Value    string `json:"value"`
	Term     uint64 `json:"term"`
	Leader   string `json:"leader"`
}

// handleRead serves GET /read?resource=r. Reads are not fenced: a reader
// may act on a value that a newer leader is about to replace. A read that
// carries a Fencing-Token is checked first (Guard.Check: refused if the
// token's epoch is older than the resource's highest, which it does not
// raise); a read that passed the check can still be stale by the time the
// reader uses it.
func (s *recordStore) handleRead(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	res := r.URL.Query().Get("resource")
	if res == "" {
		res = DefaultResource
	}
	if err := storageguard.ValidateResource(res); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if tok := r.Header.Get(epoch.Header); tok != "" && !s.cfg.Unfenced {
		if _, err := s.guard.Check(r.Context(), res, tok); err != nil {
			refuseWrite(w, res, err)
			return
		}
	}
	rec, ok, err := s.b.get(r.Context(), res)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "store: read: "+err.Error())
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("store: resource %q was never written", res))
		return
	}
	writeJSON(w, http.StatusOK, readReply{Resource: rec.Resource, Value: rec.Value, Term: rec.Epoch.Term, Leader: rec.Epoch.Leader})
}

// storeStatus is the body of GET /status.
type storeStatus struct {
	Accepted     uint64            `json:"accepted"`
	Refused      uint64            `json:"refused"`
	Highest      map[string]string `json:"highest"`       // resource -> highest epoch (the fence's high-water mark)
	RefusedBy    map[string]uint64 `json:"refused_by"`    // presented epoch -> refusals
	AcceptedBy   map[string]uint64 `json:"accepted_by"`   // epoch -> accepted writes
	LastAccepted *writeEvent       `json:"last_accepted"` // null until one
	LastRefused  *writeEvent       `json:"last_refused"`  // null until one
	Fenced       bool              `json:"fenced"`
	Backend      string            `json:"backend"`
	// LostUpdates counts writes accepted under an older epoch than one the
	// store had already accepted for that resource: 0 on a fenced store,
	// each a newer leader's update overwritten on an -unfenced one.
	LostUpdates uint64 `json:"lost_updates"`
}

// handleStatus serves GET /status. Counts are since this process started;
// the records and high-water marks are durable.
func (s *recordStore) handleStatus(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	st, err := s.status(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "store: status: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *recordStore) status(ctx context.Context) (storeStatus, error) {
	st := storeStatus{Highest: map[string]string{}, Fenced: !s.cfg.Unfenced, Backend: s.cfg.Backend}
	s.mu.Lock()
	st.Accepted, st.Refused, st.LostUpdates = s.accepted, s.refused, s.lost
	st.RefusedBy, st.AcceptedBy = maps.Clone(s.refusedBy), maps.Clone(s.acceptedBy)
	for i, p := range []**writeEvent{&st.LastAccepted, &st.LastRefused} {
		if s.last[i] != nil {
			ev := *s.last[i]
			*p = &ev
		}
	}
	s.mu.Unlock()
	names, err := s.b.resources(ctx)
	if err != nil {
		return storeStatus{}, err
	}
	for _, res := range names {
		var h epoch.Epoch
		if s.cfg.Unfenced {
			// No fence keeps a high-water mark: report, as a fenced store
			// does, the newest epoch accepted (by this process; after a
			// restart, until a write, the epoch of the stored record).
			s.mu.Lock()
			h = s.newest[res]
			s.mu.Unlock()
			if h.IsZero() {
				rec, ok, err := s.b.get(ctx, res)
				if err != nil {
					return storeStatus{}, err
				}
				if ok {
					h = rec.Epoch
				}
			}
		} else if h, err = s.b.fence().Highest(ctx, res); err != nil {
			return storeStatus{}, err
		}
		if !h.IsZero() {
			st.Highest[res] = h.String()
		}
	}
	return st, nil
}
