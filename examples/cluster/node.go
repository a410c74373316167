package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/election/electionmetrics"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// nodeConfig is the `node` subcommand's command line.
type nodeConfig struct {
	ID, Cluster     string
	Raft, Advertise string
	HTTP            string
	DataDir         string
	Bootstrap       []election.Server
	Join            string
	Replaces        string // -replaces: the member this node replaces when it joins
	Store           string
	TokenKey        string
	TLSCert, TLSKey string
	TLSCA           string
	Heartbeat       time.Duration
	WriteEvery      time.Duration
	Resource        string
	FaultEndpoint   bool
	StallAfterHeal  bool // TEST ONLY: nodestall.go
	AddrFile        string
	RaftLogLevel    string
	roles           nodeRoles   // -roles, -role-write-every (node_roles.go)
	tlsConf         *tls.Config // from the TLS flags; nil: plain
	codec           epoch.Codec
}

// nodeMain runs the `node` subcommand until ctx ends (SIGINT, SIGTERM),
// then hands leadership over and exits.
func nodeMain(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("node", stderr)
	var cfg nodeConfig
	var bootstrap string
	fs.StringVar(&cfg.ID, "id", "", "this node's Raft server ID (required; [A-Za-z0-9._-])")
	fs.StringVar(&cfg.Cluster, "cluster", "demo", "election group name; every node and the store must agree")
	fs.StringVar(&cfg.Raft, "raft", "", "Raft transport address to bind and advertise, e.g. 127.0.0.1:7101 (required)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "Raft address peers dial, if not -raft (e.g. -raft 0.0.0.0:7101 -advertise 10.0.0.5:7101)")
	fs.StringVar(&cfg.HTTP, "http", "127.0.0.1:0", "HTTP API listen address (loopback unless told otherwise; port 0: any free port, see -addr-file)")
	fs.StringVar(&cfg.DataDir, "data", "", "data directory for the durable Raft state (required)")
	fs.StringVar(&bootstrap, "bootstrap", "", `initial voters "id=raftaddr,id=raftaddr,..." (first start only; harmless on restart)`)
	fs.StringVar(&cfg.Join, "join", "", "HTTP address of a running node to join through (a follower answers 503 naming the leader; this node then asks the leader)")
	fs.StringVar(&cfg.Replaces, "replaces", "", "with -join: the ID of the voter this node replaces (a dead one): it is removed and this node made a voter in one safe operation")
	fs.StringVar(&cfg.Store, "store", "", "URL of the fenced store, e.g. http://127.0.0.1:7000 (optional)")
	fs.StringVar(&cfg.TokenKey, "token-key", "", "HMAC key file shared with the store (without it tokens are unsigned: a warning is logged)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "this node's PEM certificate (with -tls-key and -tls-ca: mutual TLS for Raft and the HTTP API)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "this node's PEM private key")
	fs.StringVar(&cfg.TLSCA, "tls-ca", "", "the cluster CA's PEM certificate")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", time.Second, "Raft heartbeat timeout; election timeout = heartbeat, leader lease = heartbeat/2")
	fs.DurationVar(&cfg.WriteEvery, "write-every", 0, "while leading, write a counter to the store this often (0: only on POST /write); on losing its epoch the writer makes one last write with its old token, as a paused process would")
	fs.StringVar(&cfg.Resource, "resource", DefaultResource, "the store resource the -write-every writer writes")
	fs.BoolVar(&cfg.FaultEndpoint, "fault-endpoint", false, "enable POST /fault to partition this node (TEST ONLY)")
	fs.BoolVar(&cfg.StallAfterHeal, "stall-after-heal", false, "with -fault-endpoint: after POST /fault heal, withhold this node's epoch for good, a planted liveness bug (TEST ONLY: the fault suite's control)")
	fs.StringVar(&cfg.AddrFile, "addr-file", "", `write "raft=ADDR http=ADDR" to this file once listening`)
	fs.StringVar(&cfg.RaftLogLevel, "raft-log-level", "warn", "log level of the election and hashicorp/raft: trace, debug, info, warn, error, off")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	cfg.roles.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cluster node -id ID -raft ADDR -data DIR (-bootstrap id=addr,... | -join http://ADDR) [flags]\n\nOne Raft node of the election group.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel, "node", cfg.ID)
	if err != nil {
		return err
	}
	if cfg.Bootstrap, err = parseBootstrap(bootstrap); err != nil {
		return err
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "node: %v\n(cluster node -h lists every flag)\n", err)
		return errUsage
	}
	if cfg.codec, err = loadCodec(cfg.TokenKey, log); err != nil {
		return err
	}
	if cfg.TLSCert != "" {
		if cfg.tlsConf, err = transport.MutualTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA); err != nil {
			return err
		}
	}
	n, err := startNode(cfg, log, stderr)
	if err != nil {
		return err
	}
	return n.run(ctx)
}

// check validates the command line.
func (c *nodeConfig) check() error {
	if err := epoch.ValidateName(c.ID); err != nil {
		return fmt.Errorf("-id %q: %v", c.ID, err)
	}
	if err := epoch.ValidateName(c.Cluster); err != nil {
		return fmt.Errorf("-cluster %q: %v", c.Cluster, err)
	}
	if c.Raft == "" {
		return errors.New("-raft is required")
	}
	if c.DataDir == "" {
		return errors.New("-data is required")
	}
	if len(c.Bootstrap) > 0 && c.Join != "" {
		return errors.New("-bootstrap and -join are exclusive: bootstrap a new cluster, or join a running one")
	}
	if len(c.Bootstrap) == 0 && c.Join == "" && !hasState(c.DataDir) {
		return fmt.Errorf("-data %s holds no Raft state and neither -bootstrap nor -join is given: this node would wait forever for a cluster; give -bootstrap to start a new one or -join to join a running one", c.DataDir)
	}
	if c.Replaces != "" {
		if c.Join == "" {
			return errors.New("-replaces needs -join: the replacement joins through a running node")
		}
		if err := epoch.ValidateName(c.Replaces); err != nil {
			return fmt.Errorf("-replaces %q: %v", c.Replaces, err)
		}
		if c.Replaces == c.ID {
			return fmt.Errorf("-replaces %s names this node's own ID: a node whose data was lost rejoins under a new ID", c.Replaces)
		}
	}
	if c.Heartbeat < 10*time.Millisecond {
		return fmt.Errorf("-heartbeat %v is below 10ms", c.Heartbeat)
	}
	if c.StallAfterHeal && !c.FaultEndpoint {
		return errors.New("-stall-after-heal needs -fault-endpoint")
	}
	if c.WriteEvery < 0 {
		return fmt.Errorf("-write-every %v is negative", c.WriteEvery)
	}
	if c.WriteEvery > 0 && c.Store == "" {
		return errors.New("-write-every needs -store")
	}
	tlsSet := 0
	for _, f := range []string{c.TLSCert, c.TLSKey, c.TLSCA} {
		if f != "" {
			tlsSet++
		}
	}
	if tlsSet != 0 && tlsSet != 3 {
		return errors.New("-tls-cert, -tls-key and -tls-ca go together")
	}
	return nil
}

// hasState reports whether dir exists and is not empty: a node restarted on
// it finds its Raft state there and needs neither -bootstrap nor -join.
func hasState(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// node is one running Raft node with its HTTP API.
type node struct {
	cfg      nodeConfig
	log      *slog.Logger
	el       *election.Election
	faulty   *transport.Faulty
	metrics  *nodeMetrics
	ln       net.Listener
	srv      *http.Server
	httpAddr string
	scheme   string       // "http" or "https"
	client   *http.Client // to the store and to other nodes (TLS client certificate when configured)
	store    *storeClient // nil without -store
	// storeDown folds the writers' failures to reach the store into a
	// few lines per outage (outagelog.go).
	storeDown *outageLog
	wg        sync.WaitGroup
	stalled   atomic.Bool // -stall-after-heal struck (nodestall.go)
}

// startNode builds the transport, the election and the HTTP listener. On
// error nothing is left running.
func startNode(cfg nodeConfig, log *slog.Logger, stderr io.Writer) (*node, error) {
	n := &node{cfg: cfg, log: log, scheme: "http", storeDown: newOutageLog(time.Minute)}
	tc := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: clientIdleTimeout} // keepalive.go
	if cfg.tlsConf != nil {
		tc.TLSClientConfig = cfg.tlsConf.Clone()
		n.scheme = "https"
	}
	n.client = &http.Client{Transport: tc, Timeout: 10 * time.Second}
	if cfg.Store != "" {
		n.store = newStoreClient(cfg.Store, n.client)
	}

	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("node: HTTP listen %s: %w", cfg.HTTP, err)
	}
	if cfg.tlsConf != nil {
		// The API requires and verifies a client certificate signed by the
		// cluster CA (MutualTLS's RequireAndVerifyClientCert): a client
		// without one cannot even complete the handshake, let alone POST
		// /join or /resign. Unlike the Raft port it does not ask for a
		// peer's identity: an operator's client-only certificate is enough
		// here, and is refused on the Raft port.
		api := cfg.tlsConf.Clone()
		api.VerifyConnection = nil
		ln = tls.NewListener(ln, api)
	}
	n.ln = ln
	n.httpAddr = ln.Addr().String()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && cfg.tlsConf == nil {
		// Without TLS anyone who reaches the port may /join, /remove or
		// /resign. With -tls-* the API already demands a certificate
		// signed by the cluster CA, so there is nothing to warn about.
		log.Warn("HTTP API listens beyond loopback without TLS; protect it with -tls-cert/-tls-key/-tls-ca", "http", n.httpAddr)
	}

	// The election's and raft's logs (raft's hclog is adapted onto slog
	// inside, its Info demoted to Debug) at -raft-log-level.
	hlog := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: raftLevel(cfg.RaftLogLevel)})).With("node", cfg.ID)
	tr, err := transport.NewTCP(cfg.Raft, cfg.Advertise, transport.Config{TLS: cfg.tlsConf, Logger: hlog, Timeout: 2 * time.Second})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("node: raft transport: %w", err)
	}
	n.faulty = transport.NewFaulty(tr)
	n.el, err = election.New(election.Config{
		ID:                 cfg.ID,
		Cluster:            cfg.Cluster,
		DataDir:            cfg.DataDir,
		Transport:          n.faulty,
		Bootstrap:          cfg.Bootstrap,
		HeartbeatTimeout:   cfg.Heartbeat,
		ElectionTimeout:    cfg.Heartbeat,
		LeaderLeaseTimeout: cfg.Heartbeat / 2,
		Signer:             cfg.codec,
		// Every node advertises its HTTP address with its membership, so
		// a follower can point a client at the leader's API
		// (Status().LeaderMeta, NotLeaderError.LeaderMeta).
		Meta:   n.httpAddr,
		Logger: hlog,
		Roles:  cfg.roles.names,
	})
	if err != nil {
		_ = n.faulty.Close()
		ln.Close()
		return nil, fmt.Errorf("node: %w", err)
	}
	// The library's own metrics (termfence_election_...), and this node's
	// writes to the store as the application counts them.
	n.metrics = newNodeMetrics()
	electionmetrics.MustRegister(n.metrics.reg, n.el)
	n.srv = &http.Server{Handler: n.routes(), ReadHeaderTimeout: serverHeaderTimeout, IdleTimeout: serverIdleTimeout,
		ErrorLog: serverErrorLog(log, "api")}
	return n, nil
}

// run serves until ctx ends, then stops: the writer first, then leadership
// is handed to another voter (SIGTERM must not leave the cluster leaderless
// for an election timeout), then Raft and the HTTP server shut down.
func (n *node) run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- n.srv.Serve(n.ln) }()

	wctx, stopWork := context.WithCancel(ctx)
	n.wg.Add(1)
	go n.observe(wctx)
	if n.cfg.WriteEvery > 0 {
		n.wg.Add(1)
		go n.writeLoop(wctx)
	}
	n.startRoleWriters(wctx) // node_roles.go
	if n.cfg.Join != "" {
		n.wg.Add(1)
		go n.joinLoop(wctx)
	} else {
		n.wg.Add(1)
		go n.recordHTTPLoop(wctx)
	}
	raftAddr := string(n.faulty.LocalAddr())
	if err := writeAddrFile(n.cfg.AddrFile, "raft="+raftAddr+" http="+n.httpAddr); err != nil {
		stopWork()
		n.wg.Wait()
		return errors.Join(err, n.shutdown())
	}
	n.log.Info("node running", "pid", os.Getpid(), "raft", raftAddr, "http", n.scheme+"://"+n.httpAddr, "cluster", n.cfg.Cluster,
		"store", n.cfg.Store, "tls", n.cfg.tlsConf != nil, "heartbeat", n.cfg.Heartbeat)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stopWork()
	n.wg.Wait()
	err := n.shutdown()
	if serveErr == nil {
		serveErr = <-errc
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, err)
}

// shutdown hands leadership over (bounded), closes the election and stops
// the HTTP server.
func (n *node) shutdown() error {
	if _, err := n.el.Epoch(); err == nil {
		rctx, cancel := context.WithTimeout(context.Background(), 4*n.cfg.Heartbeat)
		if _, _, err := n.handOver(rctx, "shutdown", ""); err != nil {
			n.log.Warn("shutdown: could not hand leadership over", "error", err)
		}
		cancel()
	}
	cerr := n.el.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	serr := n.srv.Shutdown(sctx)
	n.client.CloseIdleConnections()
	n.log.Info("node stopped")
	return errors.Join(cerr, serr)
}

// observe follows this node's view of the leadership and logs each epoch
// it takes. (The election itself records this node's HTTP address, its
// Config.Meta, before its first epoch, and counts epochs for /metrics.)
func (n *node) observe(ctx context.Context) {
	defer n.wg.Done()
	var lastEpoch uint64
	for l := range n.el.Observe(ctx) {
		if l.Leading() && l.Epoch.Term > lastEpoch {
			lastEpoch = l.Epoch.Term
			n.log.Info("took epoch", "epoch", l.Epoch.String())
		}
	}
}

// writeLoop is the -write-every writer: under election.Lead, while this node
// holds an epoch, it writes a counter to the store every interval, stamped
// with the token of that epoch.
func (n *node) writeLoop(ctx context.Context) {
	defer n.wg.Done()
	err := n.el.Lead(ctx, func(lctx context.Context, ep epoch.Epoch) error {
		return n.leadWrites(ctx, lctx, ep)
	})
	if err != nil && ctx.Err() == nil {
		n.log.Warn("writer stopped", "error", err)
	}
}

// leadWrites writes under one epoch (writeUnder, in nodewrite.go). The
// token is signed once, when the epoch is taken, like Kleppmann's lock
// holder with its token.
//
// It deliberately behaves like Kleppmann's paused process: when it learns
// that its epoch is gone (lctx ends) it makes one more write with the token
// it holds before it stops. A process frozen anywhere in its loop (SIGSTOP,
// a GC pause, a VM migration) learns of its deposition only after it
// resumes, and a write it had already decided on then reaches the store
// late; this writer makes that late write every time, so the fence's
// refusal is observable on every pause, not only when the pause happens to
// land between its check and its write. (A writer woken from a pause
// between writes makes two: the one due when it woke, before Raft told it,
// and that last one. An -unfenced store counts both as lost updates.)
// Writes run under the process's context, not lctx: cancelling lctx is a
// notice that arrives after the fact, and the store's fence is what makes
// the late write harmless. A refusal (409) ends the writer at once; a
// leader that lost its epoch without a successor writing yet gets its last
// write accepted, which is correct — the store has seen no newer epoch.
//
// It returns nil in every case, so election.Lead never resigns on its
// behalf: a refusal stops the writer until this node's next epoch.
func (n *node) leadWrites(ctx, lctx context.Context, ep epoch.Epoch) error {
	return n.writeUnder(ctx, lctx, ep, writer{resource: n.cfg.Resource, every: n.cfg.WriteEvery, log: n.log, what: "write", held: "epoch"})
}

// joinLoop asks the cluster to add this node as a voter, through the node
// given by -join, following redirects to the leader, until it succeeds or
// ctx ends. Adding a voter that is already one is harmless, so a restarted
// node simply joins again.
func (n *node) joinLoop(ctx context.Context) {
	defer n.wg.Done()
	target := n.cfg.Join
	body := joinRequest{ID: n.cfg.ID, Addr: string(n.faulty.LocalAddr()), HTTP: n.httpAddr, Replaces: n.cfg.Replaces}
	lastStatus := -1
	for attempt := 0; ; attempt++ {
		next, status, err := n.tryJoin(ctx, target, body)
		if err == nil {
			n.log.Info("joined the cluster", "via", target)
			return
		}
		if next != "" {
			target = next
		} else {
			target = n.cfg.Join
		}
		// Every tenth attempt, and every change of answer (a refusal says
		// what to fix: the operator should see it at once).
		if attempt%10 == 0 || status != lastStatus {
			lastStatus = status
			n.log.Info("join: retrying", "error", err, "next", target)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.cfg.Heartbeat / 2): // poll interval
		}
	}
}

// recordHTTPLoop makes sure the cluster knows this node's HTTP address (its
// member metadata) before it ever leads, so that every node's status page
// can show every member: a follower (bootstrapped with the others, so it
// never joined) asks the leader with a POST /join naming itself — for a
// member at its own address that changes no configuration, it only records
// the address (election.AddMember). A leader records its own. It stops once
// the address is recorded.
func (n *node) recordHTTPLoop(ctx context.Context) {
	defer n.wg.Done()
	body := joinRequest{ID: n.cfg.ID, Addr: string(n.faulty.LocalAddr()), HTTP: n.httpAddr}
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for n.memberMeta(n.cfg.ID) != n.httpAddr {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, h := n.leaderInfo()
		if id == "" || id == n.cfg.ID || h == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, n.cfg.Heartbeat)
		_, _, err := n.tryJoin(rctx, h, body)
		cancel()
		if err != nil {
			n.log.Debug("recording this node's HTTP address with the leader", "error", err)
		}
	}
}

// tryJoin sends one POST /join and returns the answer's status (0: no
// answer). On a "not leader" answer it returns the leader's HTTP address
// to try next.
func (n *node) tryJoin(ctx context.Context, target string, body joinRequest) (next string, status int, err error) {
	var reply errorBody
	status, err = n.postJSON(ctx, n.nodeURL(target)+"/join", body, &reply)
	if err != nil {
		return "", 0, err
	}
	if status == http.StatusOK {
		return "", status, nil
	}
	return reply.LeaderHTTP, status, fmt.Errorf("join via %s: %d %s", target, status, reply.Error)
}

// nodeURL turns a node's address (host:port, or a URL) into its API base
// URL.
func (n *node) nodeURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	return n.scheme + "://" + addr
}

// handOver hands this node's leadership over (election.Handover: to the
// voter to, or with to "" to one this leader reaches), logs what became of
// it, and returns the next leader's ID and HTTP address. how names the
// cause in the log: shutdown, resign, transfer. The ways leadership can end
// are told apart: handed to a successor (its ID logged); stepped down
// because no quorum answered, with nothing handed over (every node stopping
// at once); handed over, but the next leader not known here before ctx
// ended. Only the last two give "" for both, and none is an error: this
// node no longer leads. Other errors are Handover's.
func (n *node) handOver(ctx context.Context, how, to string) (id, httpAddr string, err error) {
	l, err := n.el.Handover(ctx, to)
	switch {
	case err == nil:
		n.log.Info(how+": handed leadership over", "leader", l.LeaderID, "term", l.Term)
		return l.LeaderID, l.LeaderMeta, nil
	case errors.Is(err, election.ErrNoSuccessor):
		n.log.Info(how+": stepped down without handing over: no quorum of voters answered", "detail", err.Error())
		return "", "", nil
	case ctx.Err() != nil && n.el.Status().State != raft.Leader:
		n.log.Info(how+": handed leadership over; the next leader is not known here yet", "error", err)
		return "", "", nil
	}
	return "", "", err
}

// leaderInfo returns the leader this node knows of and its HTTP address.
func (n *node) leaderInfo() (id, httpAddr string) {
	st := n.el.Status()
	if st.LeaderID == "" {
		return "", ""
	}
	return st.LeaderID, st.LeaderMeta
}

// memberMeta returns the metadata (HTTP address) member id advertises, or "".
func (n *node) memberMeta(id string) string {
	ms, err := n.el.Members()
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.ID == id {
			return m.Meta
		}
	}
	return ""
}

// raftLevel is the slog level of a -raft-log-level value (hclog's names).
func raftLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "trace":
		return slog.LevelDebug - 4
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "error":
		return slog.LevelError
	case "off":
		return slog.LevelError + 100
	}
	return slog.LevelWarn
}

// nodeMetrics are the node's Prometheus metrics (GET /metrics), on a
// registry of its own: the election's (package electionmetrics) and the
// outcome of this node's writes to the store.
type nodeMetrics struct {
	reg                                        *prometheus.Registry
	writesAccepted, writesRefused, writeErrors prometheus.Counter
}

func newNodeMetrics() *nodeMetrics {
	reg := prometheus.NewRegistry()
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "termfence_example_store_writes_total",
		Help: "Writes this node sent to the store, by the store's answer: accepted, refused (stale, conflicting, forged or unsigned epoch) or error (no answer).",
	}, []string{"result"})
	reg.MustRegister(writes)
	return &nodeMetrics{
		reg:            reg,
		writesAccepted: writes.WithLabelValues("accepted"),
		writesRefused:  writes.WithLabelValues("refused"),
		writeErrors:    writes.WithLabelValues("error"),
	}
}
