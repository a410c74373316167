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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// The demo re-enacts the seed's scenario (Kleppmann's tokens 33 and 34) with
// tokens that are real Raft terms:
//
//	A is elected and takes its epoch (the term it won), writes the initial
//	data and reads it, checks it still leads — then pauses: its writer
//	freezes, and its Raft node is cut off by transport.Faulty for longer
//	than the leader lease. A's Raft node steps down; B is elected in a
//	higher term, reads and writes. A wakes, still believing it leads, and
//	writes with the token it took before the pause.
//
// With the fenced store A's late write is refused and B's update survives;
// with -unfenced the store skips the check and B's update is lost. Nothing
// in the scenario is simulated except the pause itself: three hashicorp/raft
// nodes on loopback TCP with raft-boltdb, and the same HTTP store as the
// `store` subcommand.

// demoTimeout bounds the whole run.
const demoTimeout = 30 * time.Second

func demoMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster", stderr)
	unfenced := fs.Bool("unfenced", false, "run the store without the epoch check (shows the lost update)")
	hb := fs.Duration("heartbeat", 250*time.Millisecond, "Raft heartbeat and election timeout; the leader lease is half of it")
	backendName := fs.String("backend", "sqlite", "the store's storage: sqlite or bolt")
	verbose := fs.Bool("v", false, "log Raft and the store to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cluster [-unfenced] [flags]       the demo\n"+
			"       cluster node [flags]              one Raft node (cluster node -h)\n"+
			"       cluster store [flags]             the fenced store (cluster store -h)\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if *hb < 20*time.Millisecond {
		return fmt.Errorf("-heartbeat %v is below 20ms", *hb)
	}
	logOut := io.Discard
	if *verbose {
		logOut = stderr
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	d := &demo{
		out: stdout, start: time.Now(), unfenced: *unfenced, hb: *hb, backend: *backendName,
		logOut: logOut, log: slog.New(slog.NewTextHandler(logOut, nil)),
	}
	err := d.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("demo did not finish within %v: %w", demoTimeout, err)
	}
	return err
}

// demo is one run of the scenario.
type demo struct {
	out      io.Writer
	start    time.Time
	unfenced bool
	hb       time.Duration
	backend  string
	logOut   io.Writer
	log      *slog.Logger

	mu sync.Mutex // serialises timeline lines

	codec  epoch.Codec
	store  *storeClient
	nodes  []*demoNode
	closed atomic.Bool
}

// demoNode is one of the three Raft nodes.
type demoNode struct {
	id     string
	role   string // "A", "B", "C": assigned as the scenario unfolds
	el     *election.Election
	faulty *transport.Faulty
}

func (n *demoNode) label() string {
	if n.role == "" {
		return n.id
	}
	return n.role + " " + n.id
}

// say prints one timeline line in the seed's style, with the real time in
// milliseconds since the demo started.
func (d *demo) say(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  t=%5dms  %-7s %s\n", time.Since(d.start).Milliseconds(), who, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "termfence-demo-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Nodes and store share an HMAC key file, as the subcommands do.
	keyFile := filepath.Join(dir, "token.key")
	if err := os.WriteFile(keyFile, newKey(), 0o600); err != nil {
		return err
	}
	if d.codec, err = loadCodec(keyFile, d.log); err != nil {
		return err
	}

	stopStore, storeURL, err := d.startStore(ctx, dir)
	if err != nil {
		return err
	}
	defer stopStore()

	if err := d.startNodes(dir); err != nil {
		return err
	}
	defer d.closeNodes()

	mode := "WITH fencing"
	if d.unfenced {
		mode = "WITHOUT fencing (-unfenced: the store skips the epoch check)"
	}
	fmt.Fprintf(d.out, "storage %s\n", mode)
	fmt.Fprintf(d.out, "  three Raft nodes on loopback TCP (raft-boltdb in %s, removed at exit): %s\n", dir, d.addrs())
	fmt.Fprintf(d.out, "  heartbeat %v, leader lease %v; store (%s) at %s; tokens HMAC-signed; token = Raft term\n",
		d.hb, d.hb/2, d.backend, storeURL)
	return d.scenario(ctx)
}

// startStore serves the same store as the `store` subcommand on a loopback
// listener.
func (d *demo) startStore(ctx context.Context, dir string) (stop func(), url string, err error) {
	st, err := openStore(ctx, storeConfig{
		Backend: d.backend, Data: filepath.Join(dir, "store.db"), Cluster: "demo",
		Unfenced: d.unfenced, Verifier: d.codec, Log: d.log,
	})
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return nil, "", err
	}
	srv := &http.Server{Handler: st.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	url = "http://" + ln.Addr().String()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	d.store = newStoreClient(url, hc)
	return func() {
		hc.CloseIdleConnections()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
		st.Close()
	}, url, nil
}

// startNodes starts three Raft nodes on loopback TCP, each behind a Faulty
// transport, bootstrapped as one cluster.
func (d *demo) startNodes(dir string) error {
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: d.logOut})
	var servers []election.Server
	var faulty []*transport.Faulty
	for i := 1; i <= 3; i++ {
		tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Timeout: time.Second, Logger: hlog})
		if err != nil {
			for _, f := range faulty {
				f.Close()
			}
			return err
		}
		f := transport.NewFaulty(tr)
		faulty = append(faulty, f)
		servers = append(servers, election.Server{ID: fmt.Sprintf("n%d", i), Addr: string(f.LocalAddr())})
	}
	for i, s := range servers {
		el, err := election.New(election.Config{
			ID: s.ID, Cluster: "demo", DataDir: filepath.Join(dir, s.ID),
			Transport: faulty[i], Bootstrap: servers,
			HeartbeatTimeout: d.hb, ElectionTimeout: d.hb, LeaderLeaseTimeout: d.hb / 2,
			Signer: d.codec, Logger: hlog.With("node", s.ID),
		})
		if err != nil {
			for _, f := range faulty[i:] {
				f.Close()
			}
			d.closeNodes()
			return err
		}
		d.nodes = append(d.nodes, &demoNode{id: s.ID, el: el, faulty: faulty[i]})
	}
	return nil
}

// closeNodes closes the elections concurrently.
func (d *demo) closeNodes() {
	if d.closed.Swap(true) {
		return
	}
	var wg sync.WaitGroup
	for _, n := range d.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.el.Close()
		}()
	}
	wg.Wait()
}

func (d *demo) addrs() string {
	var s []string
	for _, n := range d.nodes {
		s = append(s, n.id+"="+string(n.faulty.LocalAddr()))
	}
	return strings.Join(s, " ")
}

// data formats a record value (space-separated items) as the seed prints a
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

// aResult is what A's writer reports after its late write.
type aResult struct {
	answer storeAnswer
	err    error
}

// scenario runs the seed's timeline on the cluster.
func (d *demo) scenario(ctx context.Context) error {
	// Every node runs Lead. The first epoch any node takes makes it A; once
	// A's pause has begun, the first other node with a newer epoch is B.
	// Who plays which is up to Raft.
	type bWin struct {
		n  *demoNode
		ep epoch.Epoch
		ok bool
	}
	var (
		roleMu  sync.Mutex
		a       *demoNode
		epA     epoch.Epoch
		pausing bool
		bTaken  bool
	)
	paused := make(chan epoch.Epoch, 1)
	resume := make(chan struct{})
	aDone := make(chan aResult, 1)
	bDone := make(chan bWin, 1)
	leadCtx, stopLead := context.WithCancel(ctx)
	defer stopLead()
	var leads sync.WaitGroup
	for _, n := range d.nodes {
		leads.Add(1)
		go func() {
			defer leads.Done()
			_ = n.el.Lead(leadCtx, func(_ context.Context, ep epoch.Epoch) error {
				roleMu.Lock()
				switch {
				case a == nil:
					a, epA = n, ep
					n.role = "A"
					roleMu.Unlock()
					// A's writer takes its token once and then — like the
					// seed's paused process — freezes between its check
					// and its write.
					d.writerA(ctx, n, ep, paused, resume, aDone)
				case pausing && !bTaken && n != a && ep.Term > epA.Term:
					bTaken = true
					n.role = "B"
					roleMu.Unlock()
					ok := d.writerB(ctx, n, ep)
					bDone <- bWin{n, ep, ok}
				default:
					roleMu.Unlock()
				}
				return nil
			})
		}()
	}

	select {
	case <-paused:
	case <-ctx.Done():
		return fmt.Errorf("no leader started A's writer: %w", ctx.Err())
	}
	roleMu.Lock()
	var others []*demoNode
	for _, n := range d.nodes {
		if n != a {
			others = append(others, n)
		}
	}
	roleMu.Unlock()

	// The pause: A's writer is already frozen; now its Raft node is cut off.
	pauseStart := time.Now()
	a.faulty.Isolate()
	roleMu.Lock()
	pausing = true
	roleMu.Unlock()
	d.say(a.label(), "stop-the-world pause begins: its writer freezes; its Raft node is cut off (Faulty.Isolate)")
	// Like the seed's client C, another node asks for an epoch while A's
	// lease is live: refused.
	if _, err := others[1].el.Epoch(); err != nil {
		d.say(others[1].id, "asks for an epoch: refused, %v; A's lease is still live", err)
	}

	// A's Raft node notices it has no quorum and steps down; its writer,
	// frozen, does not know.
	if err := waitFor(ctx, func() bool { _, err := a.el.Epoch(); return err != nil }); err != nil {
		return fmt.Errorf("the Raft node of A never stepped down: %w", err)
	}
	d.say("raft", "%s hears from no quorum within its lease (%v): it steps down; A does not know", a.id, d.hb/2)

	// B: whichever of the others Raft elects next reads and writes.
	var b bWin
	select {
	case b = <-bDone:
	case <-ctx.Done():
		return fmt.Errorf("no new leader wrote: %w", ctx.Err())
	}
	if !b.ok {
		return fmt.Errorf("the new leader %s could not write", b.n.id)
	}

	// A wakes up.
	a.faulty.Heal()
	pause := time.Since(pauseStart)
	d.say(a.label(), "pause ends after %dms (lease %v): its Raft node is reachable again", pause.Milliseconds(), d.hb/2)
	close(resume)
	var res aResult
	select {
	case res = <-aDone:
	case <-ctx.Done():
		return fmt.Errorf("the writer of A never finished: %w", ctx.Err())
	}
	stopLead()
	leads.Wait()

	// The result.
	rec, ok, err := d.store.read(ctx, DefaultResource)
	if err != nil || !ok {
		return fmt.Errorf("reading the final data: ok=%v %w", ok, err)
	}
	st, err := d.store.status(ctx)
	if err != nil {
		return fmt.Errorf("store status: %w", err)
	}
	items := strings.Fields(rec.Value)
	lost := 0
	verdict := "B's update survives"
	if !slices.Contains(items, "B") {
		lost = 1
		verdict = "B's update is LOST"
	}
	d.say("result", "data=%s (last written under term %d by %s)  %s", data(rec.Value), rec.Term, rec.Leader, verdict)
	d.say("store", "accepted=%d refused=%d highest=%s", st.Accepted, st.Refused, st.Highest[DefaultResource])
	if res.err != nil {
		return fmt.Errorf("the late write of A got no answer: %w", res.err)
	}
	fmt.Fprintf(d.out, "summary: fenced=%v A=%s epochA=%s B=%s epochB=%s pause=%dms refused=%d lost=%d data=%s elapsed=%dms\n",
		!d.unfenced, a.id, epA, b.n.id, b.ep, pause.Milliseconds(), st.Refused, lost, data(rec.Value),
		time.Since(d.start).Milliseconds())
	return nil
}

// writerA is A's writer, run under A's first epoch.
func (d *demo) writerA(ctx context.Context, a *demoNode, ep epoch.Epoch, paused chan<- epoch.Epoch, resume <-chan struct{}, done chan<- aResult) {
	tok, err := d.codec.Sign(ep)
	if err != nil {
		done <- aResult{err: err}
		paused <- ep
		return
	}
	d.say(a.label(), "elected leader of term %d: takes epoch %s (its token: the term, signed)", ep.Term, ep)
	ans, err := d.store.write(ctx, tok, writeRequest{Resource: DefaultResource, Value: "v0"})
	d.say(a.label(), "writes initial data -> %s", outcome(ans, err, "v0"))
	snap := "v0"
	if rec, ok, err := d.store.read(ctx, DefaultResource); err == nil && ok {
		snap = rec.Value
	}
	d.say(a.label(), "reads %s", data(snap))
	if cur, err := a.el.Epoch(); err == nil && cur == ep {
		d.say(a.label(), "checks Epoch(): still %s, safe to write", cur)
	}
	paused <- ep
	<-resume // frozen
	d.say(a.label(), "wakes; A still believes it leads: it writes with the token it took before the pause (%s)", ep)
	value := snap + " A"
	ans, err = d.store.write(ctx, tok, writeRequest{Resource: DefaultResource, Value: value})
	d.say(a.label(), "writes %s -> %s", data(value), outcome(ans, err, value))
	done <- aResult{answer: ans, err: err}
}

// writerB is the new leader's work: read, then write. It reports whether
// the write was accepted.
func (d *demo) writerB(ctx context.Context, b *demoNode, ep epoch.Epoch) bool {
	tok, err := d.codec.Sign(ep)
	if err != nil {
		return false
	}
	d.say(b.label(), "elected leader of term %d: takes epoch %s", ep.Term, ep)
	rec, ok, err := d.store.read(ctx, DefaultResource)
	if err != nil || !ok {
		return false
	}
	d.say(b.label(), "reads %s", data(rec.Value))
	value := rec.Value + " B"
	ans, err := d.store.write(ctx, tok, writeRequest{Resource: DefaultResource, Value: value})
	d.say(b.label(), "writes %s -> %s", data(value), outcome(ans, err, value))
	return err == nil && ans.Accepted()
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
