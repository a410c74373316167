package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// node is one `cluster node` process.
type node struct {
	id       string
	raft     string // raft bind/advertise address, fixed for the run
	addrFile string
	proc     *proc
}

// cluster is the system under test: the nodes and the store, as processes,
// and the HTTP client that talks to them.
type cluster struct {
	disks    map[string]*powerfs.Disk // PowerLoss: by node ID, and "store"
	cfg      Config
	nodes    []*node
	store    *proc
	storeAF  string
	storeURL string
	client   *http.Client
	tr       *http.Transport
	// dial connects the harness to a node or the store: directly on
	// loopback, or from the lab's client host in netlab mode.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// lab, in netlab mode, holds one host per node, one for the store and
	// one for the harness's clients (labClient).
	lab *netlab.Lab

	key []byte // the HMAC key the nodes and the store share

	mu        sync.Mutex
	storeDown []window // when the store was killed, until it served again
	storeDead []window // when no store process existed at all
	// storeCut, in netlab mode: per node index, when the lab cut that
	// node's link to the store (a node's 5xx then is the cut, not the
	// store failing).
	storeCut map[int][]window
}

// window is a closed time interval on the recorder's clock.
type window struct{ from, to time.Duration }

const clusterName = "chaos"

// Fixed ports in netlab mode: each process has a host of its own.
const (
	labRaftPort  = 7000
	labHTTPPort  = 8080
	labStorePort = 7000
)

// Lab host names in netlab mode: n1..nN for the nodes, then these.
const (
	labStoreHost  = "store"
	labClientHost = "client"
)

// newCluster lays the cluster out: on loopback, or in netlab mode one lab
// host per process (built here; close removes it).
func newCluster(ctx context.Context, cfg Config) (*cluster, error) {
	key := filepath.Join(cfg.Dir, "token.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("5ec7e7", 11)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("chaos: key file: %w", err)
	}
	// IdleConnTimeout below the nodes' 5 s ReadHeaderTimeout: a client that
	// keeps a never-used pooled connection longer can send a request on one
	// the node has just closed (examples/cluster/keepalive.go).
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true, IdleConnTimeout: 2 * time.Second}
	c := &cluster{cfg: cfg, tr: tr, client: &http.Client{Transport: tr}, dial: (&net.Dialer{}).DialContext}
	// addr returns the address process i (node i, or the store at i ==
	// cfg.Nodes) serves port on.
	var addr func(i, port int) (string, error)
	host := func(int) *netlab.Host { return nil }
	if cfg.Netlab {
		lab, err := netlab.New(ctx, netlab.Config{Hosts: append(netlab.Names("n", cfg.Nodes), labStoreHost, labClientHost)})
		if err != nil {
			return nil, fmt.Errorf("chaos: netlab: %w", err)
		}
		c.lab = lab
		hosts := lab.Hosts()
		client := lab.Host(labClientHost)
		c.dial = client.DialContext
		tr.DialContext = client.DialContext
		host = func(i int) *netlab.Host { return hosts[i] }
		addr = func(i, port int) (string, error) { return hosts[i].HostPort(port), nil }
	} else {
		addr = func(int, int) (string, error) { return freePort() }
	}
	storeAddr, err := addr(cfg.Nodes, labStorePort)
	if err != nil {
		c.closeLab()
		return nil, err
	}
	c.storeURL = "http://" + storeAddr
	c.storeAF = filepath.Join(cfg.Dir, "store.addr")
	data := filepath.Join(storeDataDir(cfg), "store."+cfg.Backend)
	if cfg.Backend == "postgres" {
		data = cfg.PostgresDSN
	}
	storeArgs := []string{"store", "-http", storeAddr, "-data", data,
		"-backend", cfg.Backend, "-cluster", clusterName, "-token-key", key, "-addr-file", c.storeAF,
		"-write-delay", cfg.WriteDelay.String(), "-proxy-timeout", cfg.ProxyTimeout.String()}
	if cfg.Unfenced {
		storeArgs = append(storeArgs, "-unfenced")
	}
	if cfg.ReleaseEarly {
		storeArgs = append(storeArgs, "-release-early")
	}
	c.key = []byte(strings.Repeat("5ec7e7", 11))
	c.store = &proc{name: "store", bin: cfg.Binary, args: storeArgs, logPath: filepath.Join(cfg.Dir, "store.log"), addr: storeAddr, host: host(cfg.Nodes)}

	var boot []string
	for i := 0; i < cfg.Nodes; i++ {
		raftAddr, err := addr(i, labRaftPort)
		if err != nil {
			c.closeLab()
			return nil, err
		}
		id := fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, &node{id: id, raft: raftAddr})
		boot = append(boot, id+"="+raftAddr)
	}
	for i, n := range c.nodes {
		httpAddr, err := addr(i, labHTTPPort)
		if err != nil {
			c.closeLab()
			return nil, err
		}
		n.addrFile = filepath.Join(cfg.Dir, n.id+".addr")
		args := []string{"node", "-id", n.id, "-cluster", clusterName, "-raft", n.raft, "-http", httpAddr,
			"-data", filepath.Join(cfg.Dir, n.id), "-bootstrap", strings.Join(boot, ","),
			"-store", c.storeURL, "-token-key", key, "-heartbeat", cfg.Heartbeat.String(),
			"-addr-file", n.addrFile}
		args = append(args, cfg.roleArgs()...) // roles.go
		if !cfg.Netlab {
			// In netlab mode the kernel makes the partitions.
			args = append(args, "-fault-endpoint")
		}
		if cfg.StallAfterHeal {
			args = append(args, "-stall-after-heal") // the liveness control (recovery.go)
		}
		n.proc = &proc{name: n.id, bin: cfg.Binary, args: args, logPath: filepath.Join(cfg.Dir, n.id+".log"), addr: httpAddr, host: host(i)}
	}
	if err := c.mountDisks(); err != nil { // power.go
		c.closeLab()
		return nil, err
	}
	return c, nil
}

// startNode starts node i and waits until it answers GET /status.
func (c *cluster) startNode(ctx context.Context, i int) error {
	n := c.nodes[i]
	return c.startServing(ctx, n.proc, n.addrFile, "http://"+n.proc.addr+"/status")
}

// startStore starts the store and waits until it answers GET /status.
func (c *cluster) startStore(ctx context.Context) error {
	return c.startServing(ctx, c.store, c.storeAF, c.storeURL+"/status")
}

// startServing starts p and waits until it serves statusURL. A process that
// exits while starting is tried again a few times: its fixed port can be
// held for a moment by another socket (an outgoing connection given that
// port as its ephemeral one) while it was down.
func (c *cluster) startServing(ctx context.Context, p *proc, addrFile, statusURL string) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			sleepCtx(ctx, 200*time.Millisecond)
		}
		_ = os.Remove(addrFile)
		if err = p.start(); err != nil {
			return err
		}
		if err = c.waitServing(ctx, p, addrFile, statusURL); err == nil || p.running() || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (c *cluster) waitServing(ctx context.Context, p *proc, addrFile, statusURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitFile(ctx, addrFile, p); err != nil {
		return err
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, _, err := c.do(ctx, http.MethodGet, statusURL, nil, 500*time.Millisecond); err == nil && st == http.StatusOK {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("chaos: %s exited while starting (see %s)", p.name, p.logPath)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s does not answer %s: %w (see %s)", p.name, statusURL, ctx.Err(), p.logPath)
		case <-tick.C:
		}
	}
}

// noteStoreDown records that the store stopped serving at from and served
// again at to.
func (c *cluster) noteStoreDown(from, to time.Duration) {
	c.mu.Lock()
	c.storeDown = append(c.storeDown, window{from, to})
	c.mu.Unlock()
}

// noteStoreDead records that no store process existed in [from, to].
func (c *cluster) noteStoreDead(from, to time.Duration) {
	c.mu.Lock()
	c.storeDead = append(c.storeDead, window{from, to})
	c.mu.Unlock()
}

// storeDeadThroughout reports whether no store process existed at any
// moment of [from, to].
func (c *cluster) storeDeadThroughout(from, to time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.storeDead {
		if w.from <= from && to <= w.to {
			return true
		}
	}
	return false
}

// noteStoreCut records that node i could not reach the store in
// [from, to].
func (c *cluster) noteStoreCut(i int, from, to time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storeCut == nil {
		c.storeCut = map[int][]window{}
	}
	c.storeCut[i] = append(c.storeCut[i], window{from, to})
}

// storeCutDuring reports whether [from, to] overlaps a time node i's link
// to the store was cut, widened by grace on both sides.
func (c *cluster) storeCutDuring(i int, from, to, grace time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.storeCut[i] {
		if from <= w.to+grace && w.from-grace <= to {
			return true
		}
	}
	return false
}

// storeDownDuring reports whether [from, to] overlaps a time the store was
// down, widened by grace on both sides.
func (c *cluster) storeDownDuring(from, to, grace time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.storeDown {
		if from <= w.to+grace && w.from-grace <= to {
			return true
		}
	}
	return false
}

// close kills every process (continuing stopped ones first) and reaps them.
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, p := range c.procs() {
		wg.Add(1)
		go func() { defer wg.Done(); p.kill() }()
	}
	wg.Wait()
	c.unmountDisks() // power.go
	c.tr.CloseIdleConnections()
	c.closeLab()
}

// closeLab removes the lab, in netlab mode, once its processes are gone.
func (c *cluster) closeLab() {
	if c.lab == nil {
		return
	}
	if err := c.lab.Close(); err != nil {
		fmt.Fprintf(c.cfg.Log, "chaos: netlab close: %v\n", err)
	}
}

func (c *cluster) procs() []*proc {
	ps := []*proc{c.store}
	for _, n := range c.nodes {
		ps = append(ps, n.proc)
	}
	return ps
}

// do sends one request with its own timeout and returns the status and body.
func (c *cluster) do(ctx context.Context, method, url string, body any, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// nodeStatus is a node's GET /status body.
type nodeStatus struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Term       uint64 `json:"term"`
	Leader     string `json:"leader"`
	LeaderAddr string `json:"leader_addr"`
	Epoch      string `json:"epoch"`
	// Held is role -> role epoch for the roles the node holds (roles.go).
	Held map[string]string `json:"held,omitempty"`
}

// status asks node i for its status.
func (c *cluster) status(ctx context.Context, i int, timeout time.Duration) (nodeStatus, error) {
	st, b, err := c.do(ctx, http.MethodGet, "http://"+c.nodes[i].proc.addr+"/status", nil, timeout)
	if err != nil {
		return nodeStatus{}, err
	}
	if st != http.StatusOK {
		return nodeStatus{}, fmt.Errorf("chaos: %s status: %d %s", c.nodes[i].id, st, b)
	}
	var s nodeStatus
	if err := json.Unmarshal(b, &s); err != nil {
		return nodeStatus{}, fmt.Errorf("chaos: %s status: %w", c.nodes[i].id, err)
	}
	return s, nil
}

// leaderEpoch returns the epoch a status claims, if it claims one.
func (s nodeStatus) leaderEpoch() (epoch.Epoch, bool) {
	if s.State != "Leader" || s.Epoch == "" {
		return epoch.Epoch{}, false
	}
	ep, err := epoch.Parse(s.Epoch)
	if err != nil {
		// Not the text form: fall back to the fields beside it.
		return epoch.Epoch{Cluster: clusterName, Term: s.Term, Leader: s.ID}, s.Term > 0
	}
	return ep, true
}

// post sends a JSON POST to node i and checks for 2xx.
func (c *cluster) post(ctx context.Context, i int, path string, body any) error {
	st, b, err := c.do(ctx, http.MethodPost, "http://"+c.nodes[i].proc.addr+path, body, 2*time.Second)
	if err != nil {
		return err
	}
	if st/100 != 2 {
		return fmt.Errorf("chaos: %s %s: %d %s", c.nodes[i].id, path, st, bytes.TrimSpace(b))
	}
	return nil
}

// fault drives node i's transport.Faulty through POST /fault.
func (c *cluster) fault(ctx context.Context, i int, op string, peers ...string) error {
	body := map[string]any{"op": op}
	if len(peers) > 0 {
		body["peers"] = peers
	}
	return c.post(ctx, i, "/fault", body)
}

// indexOf returns the index of the node with id, or -1.
func (c *cluster) indexOf(id string) int {
	for i, n := range c.nodes {
		if n.id == id {
			return i
		}
	}
	return -1
}

// parseStoreHighest reads the "highest" map of the store's GET /status body
// as terms per resource.
func parseStoreHighest(body []byte) (map[string]uint64, error) {
	var st struct {
		Highest map[string]string `json:"highest"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("chaos: store status: %w", err)
	}
	out := make(map[string]uint64, len(st.Highest))
	for res, s := range st.Highest {
		ep, err := epoch.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("chaos: store status: highest of %s: %w", res, err)
		}
		out[res] = ep.Term
	}
	return out, nil
}
