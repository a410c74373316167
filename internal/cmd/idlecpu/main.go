// Command idlecpu measures the idle cost of one node of a healthy
// three-node cluster — CPU time per second of wall time — for termfence
// (election.New on transport.NewTCP) and for raw hashicorp/raft
// (NetworkTransport over TCP, the same raft-boltdb stores and timeouts), in
// alternating windows of one run, so both see the same machine. Each
// cluster runs in this process; CPU is the process's user+system time
// (getrusage) over the window, divided by three. With -cpuprofile the
// termfence windows are profiled, for the waker's share:
//
//	go tool pprof -top -focus 'election\.\(\*waker\)' idlecpu cpu.prof
//
// Usage: go run ./internal/cmd/idlecpu [-window 10s] [-rounds 3] [-ht 1s] [-cpuprofile cpu.prof]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/transport"
)

func main() {
	window := flag.Duration("window", 10*time.Second, "length of each measured window")
	rounds := flag.Int("rounds", 3, "windows per implementation (alternating)")
	ht := flag.Duration("ht", time.Second, "HeartbeatTimeout = ElectionTimeout; LeaderLeaseTimeout = ht/2")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the termfence windows here")
	flag.Parse()

	var pf *os.File
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			log.Fatal(err)
		}
		pf = f
	}
	var tf, rr []float64
	for r := range *rounds {
		for _, kind := range []string{"termfence", "raw-raft"} {
			dir, err := os.MkdirTemp("", "idlecpu")
			if err != nil {
				log.Fatal(err)
			}
			var stop func()
			if kind == "termfence" {
				stop, err = startTermfence(dir, *ht)
			} else {
				stop, err = startRaw(dir, *ht)
			}
			if err != nil {
				log.Fatalf("%s: %v", kind, err)
			}
			time.Sleep(2 * *ht) // settle after the first election (a measurement, not a test)
			profiling := kind == "termfence" && pf != nil && r == 0
			if profiling {
				if err := pprof.StartCPUProfile(pf); err != nil {
					log.Fatal(err)
				}
			}
			c0, t0 := cpu(), time.Now()
			time.Sleep(*window)
			c1, t1 := cpu(), time.Now()
			if profiling {
				pprof.StopCPUProfile()
			}
			stop()
			_ = os.RemoveAll(dir)
			perNode := (c1 - c0).Seconds() / t1.Sub(t0).Seconds() / 3 * 1000 // ms of CPU per second
			fmt.Printf("round %d %-9s %.2f ms CPU/s per node\n", r+1, kind, perNode)
			if kind == "termfence" {
				tf = append(tf, perNode)
			} else {
				rr = append(rr, perNode)
			}
		}
	}
	slices.Sort(tf)
	slices.Sort(rr)
	mt, mr := tf[len(tf)/2], rr[len(rr)/2]
	fmt.Printf("median: termfence %.2f ms/s, raw raft %.2f ms/s per node: ratio %.2f\n", mt, mr, mt/mr)
}

// cpu is this process's user+system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startTermfence(dir string, ht time.Duration) (func(), error) {
	ids := []string{"a", "b", "c"}
	var trs []transport.Transport
	var boot []election.Server
	quiet := slog.New(slog.DiscardHandler)
	for _, id := range ids {
		tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: quiet})
		if err != nil {
			return nil, err
		}
		trs = append(trs, tr)
		boot = append(boot, election.Server{ID: id, Addr: string(tr.LocalAddr())})
	}
	var els []*election.Election
	stop := func() {
		for _, el := range els {
			_ = el.Close()
		}
	}
	for i, tr := range trs {
		el, err := election.New(election.Config{
			ID: ids[i], Cluster: "idle", DataDir: filepath.Join(dir, ids[i]), Transport: tr, Bootstrap: boot,
			HeartbeatTimeout: ht, ElectionTimeout: ht, LeaderLeaseTimeout: ht / 2, Logger: quiet,
		})
		if err != nil {
			stop()
			return nil, err
		}
		els = append(els, el)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		for _, el := range els {
			if _, err := el.Epoch(); err == nil {
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("no leader")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

func startRaw(dir string, ht time.Duration) (func(), error) {
	ids := []string{"a", "b", "c"}
	var trs []*raft.NetworkTransport
	var conf raft.Configuration
	for _, id := range ids {
		tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, hclog.NewNullLogger())
		if err != nil {
			return nil, err
		}
		trs = append(trs, tr)
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: tr.LocalAddr()})
	}
	var rs []*raft.Raft
	var stores []*raftboltdb.BoltStore
	stop := func() {
		for _, r := range rs {
			_ = r.Shutdown().Error()
		}
		for _, s := range stores {
			_ = s.Close()
		}
	}
	for i, id := range ids {
		d := filepath.Join(dir, id)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(d, "raft.db")})
		if err != nil {
			stop()
			return nil, err
		}
		stores = append(stores, store)
		logs, err := raft.NewLogCache(512, store)
		if err != nil {
			stop()
			return nil, err
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(d, 2, hclog.NewNullLogger())
		if err != nil {
			stop()
			return nil, err
		}
		c := raft.DefaultConfig()
		c.LocalID = raft.ServerID(id)
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = ht, ht, ht/2
		c.Logger = hclog.NewNullLogger()
		if err := raft.BootstrapCluster(c, logs, store, snaps, trs[i], conf); err != nil {
			stop()
			return nil, err
		}
		r, err := raft.NewRaft(c, nopFSM{}, logs, store, snaps, trs[i])
		if err != nil {
			stop()
			return nil, err
		}
		rs = append(rs, r)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		for _, r := range rs {
			if r.State() == raft.Leader {
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("no leader")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}
