//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/termfence/termfence/internal/netlab"
)

// labPort is the raft port of every lab node (each has a host of its own).
const labPort = 7000

// newLabSystems builds a lab of six hosts, tf1..tf3 and raw1..raw3, and
// starts each node of each system as a process of its own in its host:
// `failover -lab-node` (labnode.go), run by Host.Command. The returned
// cleanup stops the processes and removes the lab.
func newLabSystems(p params, dir string) ([]system, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lab, err := netlab.New(ctx, netlab.Config{Hosts: append(netlab.Names("tf", 3), netlab.Names("raw", 3)...)})
	if err != nil {
		return nil, nil, err
	}
	var systems []system
	cleanup := func() {
		for _, s := range systems {
			_ = s.close()
		}
		_ = lab.Close()
	}
	for _, sys := range []struct{ kind, name, prefix string }{
		{"termfence", "termfence", "tf"},
		{"raw", "hashicorp-raft", "raw"},
	} {
		c := &labCluster{p: p, kind: sys.kind, sysName: sys.name, lab: lab, exe: exe,
			logDir: dir, events: make(chan nodeEvent, 4096)}
		var peers []string
		for i := 1; i <= 3; i++ {
			h := lab.Host(fmt.Sprintf("%s%d", sys.prefix, i))
			nd := &labNode{id: h.Name(), host: h, addr: h.HostPort(labPort), dir: filepath.Join(dir, sys.prefix, h.Name())}
			c.nodes = append(c.nodes, nd)
			peers = append(peers, nd.id+"="+nd.addr)
		}
		c.peers = strings.Join(peers, ",")
		systems = append(systems, c)
		for i := range c.nodes {
			if err := c.start(i); err != nil {
				cleanup()
				return nil, nil, err
			}
		}
	}
	for _, s := range systems {
		if err := s.(*labCluster).settle(); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	return systems, cleanup, nil
}

// labCluster is one system's three node processes in the lab.
type labCluster struct {
	p       params
	kind    string // the node's -system: termfence or raw
	sysName string // the result file's system name
	lab     *netlab.Lab
	exe     string
	logDir  string
	peers   string
	nodes   []*labNode
	events  chan nodeEvent // "lead", "resign" and "error" events of every node
}

type nodeEvent struct {
	node int
	ev   labEvent
}

type labNode struct {
	id, addr, dir string
	host          *netlab.Host
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	done          chan struct{} // closed when the process has been reaped

	mu    sync.Mutex
	st    labEvent // its last "state"
	alive bool
}

func (n *labNode) state() (labEvent, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st, n.alive
}

func (c *labCluster) name() string { return c.sysName }

// start runs node i's process in its host, on its data dir.
func (c *labCluster) start(i int) error {
	nd := c.nodes[i]
	args := []string{"-lab-node", "-system", c.kind, "-id", nd.id, "-bind", nd.addr, "-peers", c.peers, "-dir", nd.dir,
		"-ht", c.p.ht.String(), "-et", c.p.et.String(), "-llt", c.p.llt.String()}
	if c.p.verbose {
		args = append(args, "-v")
	}
	cmd := nd.host.Command(context.Background(), c.exe, args...)
	logf, err := os.OpenFile(filepath.Join(c.logDir, nd.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if c.p.verbose {
		cmd.Stderr = io.MultiWriter(logf, os.Stderr)
	} else {
		cmd.Stderr = logf
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s in %v: %w", nd.id, nd.host, err)
	}
	done := make(chan struct{})
	nd.mu.Lock()
	nd.cmd, nd.stdin, nd.done, nd.alive, nd.st = cmd, stdin, done, true, labEvent{}
	nd.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev labEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				fmt.Fprintf(os.Stderr, "failover: %s: %q: %v\n", nd.id, sc.Text(), err)
				continue
			}
			switch ev.Ev {
			case "state":
				nd.mu.Lock()
				nd.st = ev
				nd.mu.Unlock()
			case "error":
				fmt.Fprintf(os.Stderr, "failover: %s: %s\n", nd.id, ev.Msg)
			default:
				select {
				case c.events <- nodeEvent{i, ev}:
				default: // nobody is timing a failover: drop it
				}
			}
		}
		_ = cmd.Wait()
		logf.Close()
		nd.mu.Lock()
		nd.alive, nd.st = false, labEvent{}
		nd.mu.Unlock()
		close(done)
	}()
	return nil
}

// leader returns the index of the node that leads (termfence: holds a
// confirmed epoch), or -1.
func (c *labCluster) leader() int {
	for i, nd := range c.nodes {
		if st, alive := nd.state(); alive && st.Leading {
			return i
		}
	}
	return -1
}

func (c *labCluster) term() (uint64, string) {
	var t uint64
	for _, nd := range c.nodes {
		st, _ := nd.state()
		t = max(t, st.Term)
	}
	if i := c.leader(); i >= 0 {
		return t, c.nodes[i].id
	}
	return t, ""
}

// settle waits until one node leads and every node follows it.
func (c *labCluster) settle() error {
	return waitUntil(c.p.settleTimeout, "the "+c.sysName+" lab cluster to settle", func() bool {
		i := c.leader()
		if i < 0 {
			return false
		}
		for _, nd := range c.nodes {
			if st, alive := nd.state(); !alive || st.Leader != c.nodes[i].id {
				return false
			}
		}
		return true
	})
}

func (c *labCluster) drain() {
	for {
		select {
		case <-c.events:
		default:
			return
		}
	}
}

// failover applies the scenario's fault to the leader and times, on the
// machine's monotonic clock, from the fault to another node's "lead" event
// in a higher term. crash isolates the leader's host (its switch port goes
// down: one netlink request, timed too); killed SIGKILLs its process, on a
// live host; handover asks it to resign, and the clock starts when the
// node starts the handover. After a crash or kill the old leader's process
// is killed (a crashed host reboots), its host rejoins, and it is started
// again on its data dir.
func (c *labCluster) failover(scenario string) (sample, error) {
	if err := c.settle(); err != nil {
		return sample{}, err
	}
	li := c.leader()
	if li < 0 {
		return sample{}, errors.New("no leader")
	}
	ld := c.nodes[li]
	st, _ := ld.state()
	old := st.Term
	c.drain()
	deadline := time.After(c.p.settleTimeout)
	var t0 time.Duration
	var pending []nodeEvent
	smp := sample{won: -1, apply: -1}
	var err error
	switch scenario {
	case scCrash:
		t0 = monoNow()
		err = c.lab.Isolate(ld.host)
		smp.apply = monoNow() - t0
	case scKilled:
		t0 = monoNow()
		err = ld.cmd.Process.Signal(syscall.SIGKILL)
	case scHandover:
		if _, err = io.WriteString(ld.stdin, "resign\n"); err != nil {
			break
		}
	wait:
		for {
			select {
			case e := <-c.events:
				if e.node == li && e.ev.Ev == "resign" {
					t0 = time.Duration(e.ev.At)
					break wait
				}
				pending = append(pending, e) // read out of order: keep it
			case <-deadline:
				err = fmt.Errorf("%s never started the handover", ld.id)
				break wait
			}
		}
	}
	if err == nil {
		next := func() <-chan nodeEvent {
			if len(pending) == 0 {
				return c.events
			}
			ch := make(chan nodeEvent, 1)
			ch <- pending[0]
			pending = pending[1:]
			return ch
		}
	collect:
		for {
			select {
			case e := <-next():
				if e.node != li && e.ev.Ev == "lead" && e.ev.Term > old {
					smp.d = time.Duration(e.ev.At) - t0
					smp.terms = e.ev.Term - old
					if e.ev.Won > 0 {
						smp.won = time.Duration(e.ev.At - e.ev.Won)
					}
					break collect
				}
			case <-deadline:
				err = errors.New("no new leader in time")
				break collect
			}
		}
	}
	if scenario != scHandover {
		_ = ld.cmd.Process.Signal(syscall.SIGKILL)
		<-ld.done
		if scenario == scCrash {
			if rerr := c.lab.Rejoin(ld.host); rerr != nil && err == nil {
				err = rerr
			}
		}
		if serr := c.start(li); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return sample{}, err
	}
	return smp, c.settle()
}

// close ends the node processes: their standard input closes and they
// exit; any still running after a few seconds is killed.
func (c *labCluster) close() error {
	for _, nd := range c.nodes {
		nd.mu.Lock()
		if nd.stdin != nil {
			_ = nd.stdin.Close()
		}
		nd.mu.Unlock()
	}
	timeout := time.After(5 * time.Second)
	for _, nd := range c.nodes {
		if nd.done == nil {
			continue
		}
		select {
		case <-nd.done:
		case <-timeout:
			_ = nd.cmd.Process.Kill()
			<-nd.done
		}
	}
	return nil
}

var _ system = (*labCluster)(nil)
