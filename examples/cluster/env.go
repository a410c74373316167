package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// env is what every in-process scenario runs on: three hashicorp/raft nodes
// on loopback TCP (raft-boltdb in a temporary directory, or in-memory
// stores with -volatile), each behind a transport.Faulty, and as many
// stores as the scenario needs — the same HTTP store as `cluster store`,
// served on loopback listeners. Tokens are HMAC-signed with a fresh key, as
// the subcommands do with -token-key. Nothing is simulated but the pause.
type env struct {
	opts   options
	out    io.Writer
	tl     *timeline
	dir    string
	codec  epoch.Codec
	key    []byte // the HMAC key codec holds
	log    *slog.Logger
	logOut io.Writer
	hlog   *slog.Logger

	nodes  []*demoNode
	addrs  []string // the nodes' Raft addresses, kept across restarts
	stores []*storeHandle

	// nodeArgs are extra flags startNodeProcs gives every node process
	// (scenario_roles.go).
	nodeArgs []string
}

// demoNode is one of the in-process Raft nodes.
type demoNode struct {
	id     string
	role   string // "A", "B": assigned as the scenario unfolds
	el     *election.Election
	faulty *transport.Faulty
}

func (n *demoNode) label() string {
	if n.role == "" {
		return n.id
	}
	return n.role + " " + n.id
}

// storeHandle is one served store.
type storeHandle struct {
	name     string // the timeline lane: "store", "audit", ...
	st       *recordStore
	url      string
	c        *storeClient
	unfenced bool
	stop     func()
}

// newEnv makes the run's temporary directory and token key. Nodes and
// stores are started by the scenario.
func newEnv(o options, stdout, stderr io.Writer) (*env, error) {
	dir, err := os.MkdirTemp("", "termfence-demo-*")
	if err != nil {
		return nil, err
	}
	logOut := o.logOut(stderr)
	e := &env{
		opts: o, out: stdout, tl: newTimeline(stdout, o.scenario), dir: dir,
		logOut: logOut, log: slog.New(slog.NewTextHandler(logOut, nil)),
		hlog: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	keyFile := filepath.Join(dir, "token.key")
	if err := os.WriteFile(keyFile, newKey(), 0o600); err != nil {
		e.close()
		return nil, err
	}
	if e.key, err = readKey(keyFile); err != nil {
		e.close()
		return nil, err
	}
	if e.codec, err = loadCodec(keyFile, e.log); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// close stops the nodes and stores and removes the directory.
func (e *env) close() {
	e.closeNodes()
	for i := len(e.stores) - 1; i >= 0; i-- {
		e.stores[i].stop()
	}
	os.RemoveAll(e.dir)
}

// lease is the leader lease the nodes run with.
func (e *env) lease() time.Duration { return e.opts.hb / 2 }

// addStore serves a store named name (its timeline lane) on loopback. With
// unfenced set it skips the epoch check (tokens are still verified).
func (e *env) addStore(ctx context.Context, name, backend string, unfenced bool) (*storeHandle, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return e.addStoreOn(ctx, name, backend, unfenced, ln, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{IdleConnTimeout: clientIdleTimeout}})
}

// addStoreOn serves a store on ln (which it closes when the store stops)
// and talks to it with hc.
func (e *env) addStoreOn(ctx context.Context, name, backend string, unfenced bool, ln net.Listener, hc *http.Client) (*storeHandle, error) {
	cfg := storeConfig{
		Backend: backend, Data: filepath.Join(e.dir, name+".db"), Cluster: "demo",
		Unfenced: unfenced, Verifier: e.codec, Log: e.log,
	}
	if backend == "postgres-trigger" {
		// A schema of its own, dropped at the end, so that runs sharing a
		// database do not meet.
		dsn, err := e.dsn()
		if err != nil {
			ln.Close()
			return nil, err
		}
		cfg.Data, cfg.TokenKey, cfg.PGSchema, cfg.PGDropSchema, cfg.PGAPIOnly = dsn, e.key, pgSchemaName(), true, e.opts.apiOnly
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: st.Handler(), ReadHeaderTimeout: serverHeaderTimeout, IdleTimeout: serverIdleTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	h := &storeHandle{name: name, st: st, url: "http://" + ln.Addr().String(), unfenced: unfenced}
	var stop func()
	h.c = newStoreClient(h.url, hc)
	var once sync.Once
	h.stop = func() { once.Do(stop) }
	stop = func() {
		hc.CloseIdleConnections()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
		st.Close()
	}
	e.stores = append(e.stores, h)
	e.tl.addResource(name)
	return h, nil
}

// dsnEnv is the environment variable -dsn defaults to.
const dsnEnv = "TERMFENCE_POSTGRES_DSN"

// dsn is the PostgreSQL DSN of the run: -dsn, else $TERMFENCE_POSTGRES_DSN.
func (e *env) dsn() (string, error) {
	if e.opts.dsn != "" {
		return e.opts.dsn, nil
	}
	if d := os.Getenv(dsnEnv); d != "" {
		return d, nil
	}
	return "", failf("this run needs PostgreSQL: give -dsn or set %s", dsnEnv)
}

// startNodes starts three Raft nodes on loopback TCP, each behind a Faulty
// transport, bootstrapped as one cluster. A second call (a restart) binds
// the same addresses; with raft-boltdb the nodes find their state again,
// with -volatile they start from nothing and bootstrap anew.
func (e *env) startNodes() error {
	var servers []election.Server
	var faulty []*transport.Faulty
	closeAll := func() {
		for _, f := range faulty {
			f.Close()
		}
	}
	for i := 1; i <= 3; i++ {
		bind := "127.0.0.1:0"
		if len(e.addrs) == 3 {
			bind = e.addrs[i-1]
		}
		tr, err := listenRetry(bind, e.hlog)
		if err != nil {
			closeAll()
			return err
		}
		f := transport.NewFaulty(tr)
		faulty = append(faulty, f)
		servers = append(servers, election.Server{ID: fmt.Sprintf("n%d", i), Addr: string(f.LocalAddr())})
	}
	if len(e.addrs) == 0 {
		for _, s := range servers {
			e.addrs = append(e.addrs, s.Addr)
			e.tl.addLanes(s.ID)
		}
	}
	e.nodes = nil
	for i, s := range servers {
		el, err := election.New(election.Config{
			ID: s.ID, Cluster: "demo", DataDir: filepath.Join(e.dir, s.ID), InMemory: e.opts.volatile,
			Transport: faulty[i], Bootstrap: servers,
			HeartbeatTimeout: e.opts.hb, ElectionTimeout: e.opts.hb, LeaderLeaseTimeout: e.lease(),
			Signer: e.codec, Logger: e.hlog.With("node", s.ID),
		})
		if err != nil {
			for _, f := range faulty[i:] {
				f.Close()
			}
			e.closeNodes()
			return err
		}
		e.nodes = append(e.nodes, &demoNode{id: s.ID, el: el, faulty: faulty[i]})
	}
	return nil
}

// listenRetry binds a Raft transport; a restart may find its old port
// briefly held by the closing listener, so it retries for a while.
func listenRetry(bind string, hlog *slog.Logger) (transport.Transport, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr, err := transport.NewTCP(bind, "", transport.Config{Timeout: time.Second, Logger: hlog})
		if err == nil || time.Now().After(deadline) {
			return tr, err
		}
		time.Sleep(50 * time.Millisecond) // retry interval for a port being released
	}
}

// closeNodes closes the elections concurrently.
func (e *env) closeNodes() {
	var wg sync.WaitGroup
	for _, n := range e.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.el.Close()
		}()
	}
	wg.Wait()
	e.nodes = nil
}

// header prints the run's first lines: what runs where.
func (e *env) header(mode string) {
	e.tl.print("scenario %s: %s", e.opts.scenario, mode)
	var s []string
	for _, n := range e.nodes {
		s = append(s, n.id+"="+string(n.faulty.LocalAddr()))
	}
	raftStore := "raft-boltdb in " + e.dir + ", removed at exit"
	if e.opts.volatile {
		raftStore = "in-memory Raft stores (-volatile)"
	}
	e.tl.print("  three Raft nodes on loopback TCP (%s): %s", raftStore, strings.Join(s, " "))
	var st []string
	for _, h := range e.stores {
		f := "fenced"
		if h.unfenced {
			f = "UNFENCED"
		}
		st = append(st, fmt.Sprintf("%s (%s, %s) at %s", h.name, h.st.cfg.Backend, f, h.url))
	}
	e.tl.print("  heartbeat %v, leader lease %v; tokens HMAC-signed; token = Raft term", e.opts.hb, e.lease())
	if len(st) > 0 {
		e.tl.print("  %s", strings.Join(st, "; "))
	}
}

// data formats a record value (space-separated items) as Kleppmann's example prints a
// list.
func data(v string) string { return "[" + v + "]" }

// outcome describes a store answer for the timeline.
func outcome(a storeAnswer, err error, value string) string {
	switch {
	case err != nil:
		return "no answer: " + err.Error()
	case a.Accepted():
		return "accepted, data=" + data(value)
	case a.Refused():
		return fmt.Sprintf("REFUSED (%d: %s)", a.Status, a.Reason())
	}
	return fmt.Sprintf("failed (%d: %s)", a.Status, a.Reason())
}

// actor is a node acting under one epoch, with the token it signed when it
// took it (and keeps, like Kleppmann's lock holder, through any pause).
type actor struct {
	n   *demoNode
	ep  epoch.Epoch
	tok string
}

func (a *actor) who() string { return a.n.label() }

// write sends one write to a store under the actor's token, and records and
// prints its outcome.
func (e *env) write(ctx context.Context, a *actor, h *storeHandle, resource, value string) (storeAnswer, error) {
	ans, err := h.c.write(ctx, a.tok, writeRequest{Resource: resource, Value: value})
	kind := evNote
	switch {
	case err == nil && ans.Accepted():
		kind = evAccepted
	case err == nil && ans.Refused():
		kind = evRefused
	}
	e.tl.mark(event{Lane: a.n.id, To: h.name, Kind: kind, Term: a.ep.Term, Label: fmt.Sprintf("%s %s t%d", kind, resource, a.ep.Term)})
	target := h.name
	if resource != DefaultResource {
		target += " " + resource
	}
	e.tl.say(a.who(), "writes %s to %s -> %s", data(value), target, outcome(ans, err, value))
	return ans, err
}

// read reads a store's resource (unfenced) and records it.
func (e *env) read(ctx context.Context, a *actor, h *storeHandle, resource string) (string, error) {
	rec, ok, err := h.c.read(ctx, resource)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", failf("%s: %s was never written", h.name, resource)
	}
	e.tl.mark(event{Lane: a.n.id, To: h.name, Kind: evRead, Term: a.ep.Term, Label: "read " + data(rec.Value)})
	e.tl.say(a.who(), "reads %s from %s", data(rec.Value), h.name)
	return rec.Value, nil
}

// newActor signs the epoch's token and records the election.
func (e *env) newActor(n *demoNode, ep epoch.Epoch) (*actor, error) {
	tok, err := e.codec.Sign(ep)
	if err != nil {
		return nil, err
	}
	e.tl.mark(event{Lane: n.id, Kind: evElected, Term: ep.Term, Label: fmt.Sprintf("term %d", ep.Term)})
	return &actor{n: n, ep: ep, tok: tok}, nil
}

// holdEpoch draws the node's epoch as a span until its Raft node steps
// down (or the run ends), and marks the step-down.
func (e *env) holdEpoch(ctx context.Context, a *actor) {
	end := e.tl.begin(a.n.id, spanEpoch, a.ep.Term, fmt.Sprintf("epoch %d", a.ep.Term))
	go func() {
		defer end()
		if waitFor(ctx, func() bool { cur, err := a.n.el.Epoch(); return err != nil || cur != a.ep }) == nil {
			e.tl.mark(event{Lane: a.n.id, Kind: evStepDown, Term: a.ep.Term, Label: "steps down"})
		}
	}()
}

// maxTerm is the highest Raft term any node has reached.
func (e *env) maxTerm() uint64 {
	var t uint64
	for _, n := range e.nodes {
		t = max(t, n.el.Status().Term)
	}
	return t
}

// waitEpoch waits until some node other than except holds an epoch above
// minTerm and returns it.
func (e *env) waitEpoch(ctx context.Context, minTerm uint64, except *demoNode) (*demoNode, epoch.Epoch, error) {
	var got *demoNode
	var ep epoch.Epoch
	err := waitFor(ctx, func() bool {
		for _, n := range e.nodes {
			if n == except {
				continue
			}
			if cur, err := n.el.Epoch(); err == nil && cur.Term > minTerm {
				got, ep = n, cur
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, epoch.Epoch{}, fmt.Errorf("no node took an epoch above term %d: %w", minTerm, err)
	}
	return got, ep, nil
}

// waitFor polls cond every few milliseconds until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
