package transport_test

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/transport"
)

type fsm struct{}

func (fsm) Apply(*raft.Log) any                 { return nil }
func (fsm) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots") }
func (fsm) Restore(rc io.ReadCloser) error      { return rc.Close() }

// ExampleFaulty partitions the leader of a three-node in-memory raft cluster
// away from the others: they elect a new leader in a higher term while the
// old one steps down. Heal ends the partition. The same works with NewTCP
// transports; wrap each node's transport and give raft the Faulty.
func ExampleFaulty() {
	var (
		ids    = []raft.ServerID{"a", "b", "c"}
		faulty = map[raft.ServerID]*transport.Faulty{}
		rafts  = map[raft.ServerID]*raft.Raft{}
		mems   []*transport.Inmem
		config raft.Configuration
	)
	for _, id := range ids {
		m := transport.NewInmem(string(id))
		for _, peer := range mems {
			m.Connect(peer) // both directions
		}
		mems = append(mems, m)
		faulty[id] = transport.NewFaulty(m)
		config.Servers = append(config.Servers, raft.Server{ID: id, Address: m.LocalAddr()})
	}
	for _, id := range ids {
		c := raft.DefaultConfig()
		c.LocalID = id
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		c.CommitTimeout = 5 * time.Millisecond
		c.Logger = hclog.NewNullLogger()
		store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		_ = raft.BootstrapCluster(c, store, store, snaps, faulty[id], config)
		r, err := raft.NewRaft(c, fsm{}, store, store, snaps, faulty[id])
		if err != nil {
			fmt.Println(err)
			return
		}
		rafts[id] = r
	}
	defer func() {
		for _, r := range rafts {
			_ = r.Shutdown().Error() // also closes the Faulty and its Inmem
		}
	}()

	// leader polls until exactly one node (other than skip) leads.
	leader := func(skip raft.ServerID) (raft.ServerID, uint64) {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var found []raft.ServerID
			for id, r := range rafts {
				if id != skip && r.State() == raft.Leader {
					found = append(found, id)
				}
			}
			if len(found) == 1 {
				return found[0], rafts[found[0]].CurrentTerm()
			}
		}
		return "", 0
	}

	old, oldTerm := leader("")
	faulty[old].Isolate()
	next, nextTerm := leader(old)
	fmt.Println("new leader elected:", next != "" && next != old)
	fmt.Println("in a higher term:", nextTerm > oldTerm)
	for deadline := time.Now().Add(10 * time.Second); rafts[old].State() == raft.Leader && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("old leader stepped down:", rafts[old].State() != raft.Leader)
	faulty[old].Heal()
	// Output:
	// new leader elected: true
	// in a higher term: true
	// old leader stepped down: true
}

// ExampleNewTCP starts a TCP transport for raft. A host name given as the
// advertise address is kept as given, so peers resolve it themselves.
func ExampleNewTCP() {
	tr, err := transport.NewTCP("127.0.0.1:0", "localhost:7000", transport.Config{
		Logger: slog.New(slog.DiscardHandler),
		// TLS: cfg from transport.MutualTLS(cert, key, ca) for mutual TLS.
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	fmt.Println(tr.LocalAddr())
	// Output: localhost:7000
}
