package election

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/termfence/termfence/transport"
)

// TestIndexBounds checks each index rule on its own: every log index an
// RPC names at most MaxIndex, a snapshot's at most IndexJumpLimit, and
// what lies just inside each bound passes.
func TestIndexBounds(t *testing.T) {
	ent := func(i uint64) *raft.Log { return &raft.Log{Index: i, Term: 1, Type: raft.LogNoop} }
	snap := func(idx, conf uint64) *raft.InstallSnapshotRequest {
		return &raft.InstallSnapshotRequest{LastLogIndex: idx, ConfigurationIndex: conf}
	}
	for _, c := range []struct {
		name string
		cmd  any
		ok   bool
	}{
		{"append at MaxIndex", &raft.AppendEntriesRequest{PrevLogEntry: MaxIndex - 1, LeaderCommitIndex: MaxIndex, Entries: []*raft.Log{ent(MaxIndex)}}, true},
		{"append past MaxIndex", &raft.AppendEntriesRequest{PrevLogEntry: MaxIndex, Entries: []*raft.Log{ent(MaxIndex + 1)}}, false},
		{"PrevLogEntry 2^64-1", &raft.AppendEntriesRequest{PrevLogEntry: 1<<64 - 1}, false},
		{"PrevLogEntry past MaxIndex", &raft.AppendEntriesRequest{PrevLogEntry: MaxIndex + 1}, false},
		{"entries wrapping past 2^64", &raft.AppendEntriesRequest{PrevLogEntry: MaxIndex, Entries: []*raft.Log{ent(0)}}, false},
		{"an entry's index past MaxIndex", &raft.AppendEntriesRequest{PrevLogEntry: 5, Entries: []*raft.Log{ent(1 << 63)}}, false},
		{"LeaderCommitIndex 2^64-1", &raft.AppendEntriesRequest{LeaderCommitIndex: 1<<64 - 1}, false},
		{"vote at MaxIndex", &raft.RequestVoteRequest{LastLogIndex: MaxIndex}, true},
		{"vote past MaxIndex", &raft.RequestVoteRequest{LastLogIndex: MaxIndex + 1}, false},
		{"pre-vote at MaxIndex", &raft.RequestPreVoteRequest{LastLogIndex: MaxIndex}, true},
		{"pre-vote 2^64-1", &raft.RequestPreVoteRequest{LastLogIndex: 1<<64 - 1}, false},
		{"snapshot at IndexJumpLimit", snap(IndexJumpLimit, IndexJumpLimit), true},
		{"snapshot past IndexJumpLimit", snap(IndexJumpLimit+1, 1), false},
		{"snapshot at 2^64-1", snap(1<<64-1, 1), false},
		{"snapshot configuration index past the limit", snap(IndexJumpLimit, IndexJumpLimit+1), false},
		{"timeout now", &raft.TimeoutNowRequest{}, true},
	} {
		err := indexes(raft.RPC{Command: c.cmd}, &RefusedError{})
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want admitted %v", c.name, err, c.ok)
		}
		if err != nil && err.Reason != RefusedIndexTooHigh {
			t.Errorf("%s: reason %s, want %s", c.name, err.Reason, RefusedIndexTooHigh)
		}
	}
	if MaxIndex > 1<<48 || IndexJumpLimit+1<<40 != MaxIndex {
		t.Fatalf("MaxIndex %d, IndexJumpLimit %d: not 2^48 and 2^40 below it", MaxIndex, IndexJumpLimit)
	}
}

// TestAttackSnapshotIndexWrap: one InstallSnapshot at LastLogIndex 2^64-1
// claiming the leader, at its term, sent over plain TCP to a follower. On
// c3e6887 it was admitted: the follower's next index wrapped to 0, it won
// the next election with the longest log, and no node held an epoch again.
// Now it is refused as index_too_high, counted, and changes nothing.
func TestAttackSnapshotIndexWrap(t *testing.T) {
	c := newTCPCluster(t, []string{"w1", "w2", "w3"}, nil)
	ld, ep := c.leaderAbove(0)
	to := c.followerOf(ld)
	idxBefore := to.el.Raft().LastIndex()
	before := to.el.Admission().Refused[RefusedIndexTooHigh]
	for _, idx := range []uint64{1<<64 - 1, IndexJumpLimit + 1} {
		err := plainStranger(t).InstallSnapshot("", raft.ServerAddress(to.addr), &raft.InstallSnapshotRequest{
			RPCHeader: hdr(ld.id, ld.addr), SnapshotVersion: raft.SnapshotVersionMax, Term: ep.Term,
			LastLogIndex: idx, LastLogTerm: ep.Term, ConfigurationIndex: 1,
			Configuration: to.el.configurationBytes(t),
		}, &raft.InstallSnapshotResponse{}, eofReader{})
		if err == nil {
			t.Errorf("the snapshot at index %d was admitted", idx)
		}
	}
	if d := to.el.Admission().Refused[RefusedIndexTooHigh] - before; d != 2 {
		t.Errorf("%d refusals counted as index_too_high, want 2", d)
	}
	if idx := to.el.Raft().LastIndex(); idx > IndexJumpLimit || idx < idxBefore {
		t.Errorf("%s's last index went from %d to %d", to.id, idxBefore, idx)
	}
	c.survives(ep.Term)
}

// configurationBytes is the latest configuration of e, encoded as raft
// puts it in a snapshot.
func (e *Election) configurationBytes(t *testing.T) []byte {
	t.Helper()
	f := e.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	return raft.EncodeConfiguration(f.Configuration())
}

// TestAttackSnapshotIndexAtLimit: the highest snapshot index admitted, from
// a voter's claim. The cluster goes on from that index: the node that took
// it leads (its log is the longest), the others install its snapshot, and
// its epoch is confirmed; role epochs made from the indexes that follow
// still validate.
func TestAttackSnapshotIndexAtLimit(t *testing.T) {
	c := newTCPCluster(t, []string{"l1", "l2", "l3"}, nil)
	ld, ep := c.leaderAbove(0)
	to := c.followerOf(ld)
	err := plainStranger(t).InstallSnapshot("", raft.ServerAddress(to.addr), &raft.InstallSnapshotRequest{
		RPCHeader: hdr(ld.id, ld.addr), SnapshotVersion: raft.SnapshotVersionMax, Term: ep.Term,
		LastLogIndex: IndexJumpLimit, LastLogTerm: ep.Term, ConfigurationIndex: 1,
		Configuration: to.el.configurationBytes(t),
	}, &raft.InstallSnapshotResponse{}, eofReader{})
	if err != nil {
		t.Fatalf("the snapshot at IndexJumpLimit was refused: %v", err)
	}
	if idx := to.el.Raft().LastIndex(); idx != IndexJumpLimit {
		t.Fatalf("%s's last index is %d after the snapshot from %s, want %d", to.id, idx, ld.id, IndexJumpLimit)
	}
	// Hand the lead to the node that took the snapshot: the cluster must
	// then run from its index.
	waitFor(t, "a handover to "+to.id, func() bool {
		cur, _ := c.leaderAbove(0)
		if cur == to {
			return true
		}
		_ = cur.el.TransferTo(context.Background(), to.id)
		return false
	})
	nl, nep := c.leaderAbove(0)
	if nl != to {
		t.Fatalf("%s leads, not %s", nl.id, to.id)
	}
	waitFor(t, "every node past the snapshot's index", func() bool {
		for _, nd := range c.nodes {
			if nd.el.Raft().LastIndex() <= IndexJumpLimit {
				return false
			}
		}
		return true
	})
	c.survives(nep.Term)
}

// TestRestartOnDamagedDataDir: raft.NewRaft panics ("log not found") on a
// log with a gap after the last snapshot, and on a snapshot at index
// 2^64-1 (its scan wraps to index 0). On c3e6887 that panic killed the
// process from inside New; now New returns ErrDataDirDamaged naming it,
// and a New on a sound data dir afterwards works.
func TestRestartOnDamagedDataDir(t *testing.T) {
	for _, damage := range []struct {
		name string
		do   func(t *testing.T, dir string)
	}{
		{"a gap in the log", func(t *testing.T, dir string) {
			s, err := openBoltForTest(filepath.Join(dir, "raft.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			if last <= first {
				t.Fatalf("log %d..%d: too short to tear", first, last)
			}
			if err := s.DeleteRange(first, first); err != nil {
				t.Fatal(err)
			}
		}},
		{"a snapshot at 2^64-1", func(t *testing.T, dir string) {
			snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			_, tr := raft.NewInmemTransport("")
			conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "n1"}}}
			sink, err := snaps.Create(raft.SnapshotVersionMax, 1<<64-1, 1, conf, 1, tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(strings.ReplaceAll(damage.name, " ", "_"), func(t *testing.T) {
			c := newCluster(t, 1)
			nd := c.nodes[0]
			c.leader()
			c.stop(nd)
			damage.do(t, nd.dir)
			cfg := c.config(nd)
			cfg.Transport = transport.NewInmem(nd.id)
			el, err := New(cfg)
			if err == nil {
				_ = el.Close()
				t.Fatal("New on the damaged data dir succeeded")
			}
			if !errors.Is(err, ErrDataDirDamaged) {
				t.Fatalf("New: %v, want ErrDataDirDamaged", err)
			}
			t.Logf("New: %v", err)
			_ = cfg.Transport.Close()
			// Nothing was left open: the data dir opens again at once (a
			// bolt lock left behind would make this wait and fail).
			s, err := openBoltForTest(filepath.Join(nd.dir, "raft.db"))
			if err != nil {
				t.Fatalf("reopening the store after the refused start: %v", err)
			}
			_ = s.Close()
		})
	}
}

// openBoltForTest opens a node's raft.db as New does, with a lock timeout.
func openBoltForTest(path string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout}})
}
