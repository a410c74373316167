package election

import (
	"crypto/tls"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
	"github.com/termfence/termfence/transport/transporttest"
)

// The hostile-peer attacks (huge terms, bad entries, oversized frames), each against a live three-node cluster over the
// real transport. Each was seen failing on main (4f43917): the MaxTerm and
// MaxTerm-1 votes left every node Candidate for good; the nil entry, the
// bad snapshot configuration, the bad LogConfiguration data and the joining
// node's nil entry panicked raft (the test binary died); the non-voter's
// append moved every node's term. What each must show now: the RPC is
// refused with an error, no node crashed, no term jumped, and the cluster
// elects (a leader with a confirmed epoch that everyone follows).

// plainStranger is a raw hashicorp/raft TCP transport that is not a member.
func plainStranger(t *testing.T) raft.Transport {
	t.Helper()
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// survives checks that after an attack no node shut down, no node's term
// rose more than a few elections above maxBefore, and the cluster elects
// again: a leader above term 0 followed by every node.
func (c *tcpCluster) survives(maxBefore uint64) {
	c.t.Helper()
	for _, nd := range c.nodes {
		if s := nd.el.Raft().State(); s == raft.Shutdown {
			c.t.Fatalf("%s is shut down", nd.id)
		}
		if tm := nd.el.Raft().CurrentTerm(); tm > maxBefore+1000 {
			c.t.Errorf("%s is at term %d, from at most %d before the attack", nd.id, tm, maxBefore)
		}
	}
	ld, ep := c.leaderAbove(0)
	if ep.Term > maxBefore+1000 {
		c.t.Errorf("%s leads term %d, from at most %d before the attack", ld.id, ep.Term, maxBefore)
	}
}

func (c *tcpCluster) maxTerm() uint64 {
	var m uint64
	for _, nd := range c.nodes {
		m = max(m, nd.el.Raft().CurrentTerm())
	}
	return m
}

// followerOf returns a node that is not ld.
func (c *tcpCluster) followerOf(ld *tcpNode) *tcpNode { return c.other(ld) }

// lastLog returns nd's last log index and term.
func lastLog(nd *tcpNode) (uint64, uint64) {
	st := nd.el.Raft().Stats()
	i, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
	tm, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
	return i, tm
}

// TestAttackMaxTermVote: one RequestVote with the transfer flag at term
// epoch.MaxTerm (and MaxTerm-1), claiming a voter's ID and address, sent
// over plain TCP to one follower. On main it moved every node to 2^48 and
// no election ever succeeded again.
func TestAttackMaxTermVote(t *testing.T) {
	for _, term := range []uint64{epoch.MaxTerm, epoch.MaxTerm - 1} {
		t.Run(strconv.FormatUint(term, 10), func(t *testing.T) {
			c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
			ld, _ := c.leaderAbove(0)
			to := c.followerOf(ld)
			var claimed *tcpNode
			for _, nd := range c.nodes {
				if nd != to && nd != ld {
					claimed = nd
				}
			}
			before := c.maxTerm()
			err := plainStranger(t).RequestVote("", raft.ServerAddress(to.addr), &raft.RequestVoteRequest{
				RPCHeader: hdr(claimed.id, claimed.addr), Term: term, LastLogIndex: 1 << 40, LastLogTerm: term - 1, LeadershipTransfer: true,
			}, &raft.RequestVoteResponse{})
			if err == nil {
				t.Errorf("the vote at term %d was admitted", term)
			}
			c.survives(before)
		})
	}
}

// TestAttackNilEntry: an AppendEntries that claims the leader, at its term,
// carrying a nil entry. On main raft dereferenced it (raft.go:1512) and the
// process died.
func TestAttackNilEntry(t *testing.T) {
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
	ld, ep := c.leaderAbove(0)
	to := c.followerOf(ld)
	err := plainStranger(t).AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{
		RPCHeader: hdr(ld.id, ld.addr), Term: ep.Term, Entries: []*raft.Log{nil},
	}, &raft.AppendEntriesResponse{})
	if err == nil {
		t.Error("the nil entry was admitted")
	}
	c.survives(ep.Term)
}

// TestAttackBadSnapshotConfiguration: an InstallSnapshot that claims the
// leader, whose Configuration is not msgpack. On main raft panicked in
// DecodeConfiguration.
func TestAttackBadSnapshotConfiguration(t *testing.T) {
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
	ld, ep := c.leaderAbove(0)
	to := c.followerOf(ld)
	idx, _ := lastLog(to)
	err := plainStranger(t).InstallSnapshot("", raft.ServerAddress(to.addr), &raft.InstallSnapshotRequest{
		RPCHeader: hdr(ld.id, ld.addr), SnapshotVersion: raft.SnapshotVersionMax, Term: ep.Term,
		LastLogIndex: idx + 10, LastLogTerm: ep.Term, Configuration: []byte{0xc1, 0xc1}, ConfigurationIndex: idx + 10,
	}, &raft.InstallSnapshotResponse{}, eofReader{})
	if err == nil {
		t.Error("the bad snapshot configuration was admitted")
	}
	c.survives(ep.Term)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// TestAttackBadConfigurationEntry: an AppendEntries that claims the leader
// and appends a LogConfiguration entry whose data is not a configuration.
// On main raft stored it and panicked in DecodeConfiguration.
func TestAttackBadConfigurationEntry(t *testing.T) {
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
	ld, ep := c.leaderAbove(0)
	to := c.followerOf(ld)
	idx, lt := lastLog(to)
	err := plainStranger(t).AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{
		RPCHeader: hdr(ld.id, ld.addr), Term: ep.Term, PrevLogEntry: idx, PrevLogTerm: lt,
		Entries: []*raft.Log{{Index: idx + 1, Term: ep.Term, Type: raft.LogConfiguration, Data: []byte{0xc1}}},
	}, &raft.AppendEntriesResponse{})
	if err == nil {
		t.Error("the bad configuration entry was admitted")
	}
	c.survives(ep.Term)
}

// tlsCA is a cluster CA and the mutual TLS configurations it issues.
type tlsCA struct {
	t  *testing.T
	ca *transporttest.CA
}

func newTLSCA(t *testing.T) *tlsCA {
	ca, err := transporttest.NewCA(t.TempDir(), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	return &tlsCA{t: t, ca: ca}
}

// mutual is the transport's TLS configuration of peer id.
func (c *tlsCA) mutual(id string) *tls.Config {
	cert, key, err := c.ca.Peer(id)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := transport.MutualTLS(cert, key, c.ca.CertFile)
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

// holder is a raw raft transport dialling with a valid peer certificate
// for id: a process holding that certificate (a stranger's, a non-voter's).
func (c *tlsCA) holder(id string) raft.Transport {
	return newTLSStranger(c.t, c.mutual(id))
}

// TestAttackNonVoterAppendTLS: over mutual TLS, a non-voter's certificate
// sends the followers an AppendEntries at term epoch.MaxTerm. On main any
// member's append was admitted, whatever its suffrage: every node moved to
// 2^48 and the cluster never elected again.
func TestAttackNonVoterAppendTLS(t *testing.T) {
	ca := newTLSCA(t)
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, func(id string) transport.Config {
		return transport.Config{TLS: ca.mutual(id), Timeout: 2 * time.Second}
	})
	ld, _ := c.leaderAbove(0)
	if err := ld.el.Raft().AddNonvoter("nv", "127.0.0.1:1", 0, waitLong).Error(); err != nil {
		t.Fatal(err)
	}
	nv := ca.holder("nv")
	before := c.maxTerm()
	for _, term := range []uint64{before + 1, before + 1000, epoch.MaxTerm} {
		for _, nd := range c.nodes {
			if nd == ld {
				continue
			}
			err := nv.AppendEntries("", raft.ServerAddress(nd.addr), &raft.AppendEntriesRequest{
				RPCHeader: hdr("nv", "127.0.0.1:1"), Term: term,
			}, &raft.AppendEntriesResponse{})
			if err == nil {
				t.Errorf("the non-voter's append at term %d to %s was admitted", term, nd.id)
			}
		}
	}
	c.survives(before)
}

// TestAttackJoiningNilEntryTLS: over mutual TLS, a node waiting to join (no
// configuration yet) gets an AppendEntries carrying a nil entry from a
// certificate the CA signed for a stranger. On main a joining node accepted
// any sender's appends and raft panicked on the nil entry.
func TestAttackJoiningNilEntryTLS(t *testing.T) {
	ca := newTLSCA(t)
	tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{TLS: ca.mutual("j1"), Timeout: 2 * time.Second, Logger: quietSlog()})
	if err != nil {
		t.Fatal(err)
	}
	el, err := New(Config{ID: "j1", Cluster: testCluster, DataDir: t.TempDir(), Transport: tr,
		HeartbeatTimeout: tcpHT, ElectionTimeout: tcpET, LeaderLeaseTimeout: tcpLLT, Logger: quietSlog()})
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	defer el.Close()
	m := ca.holder("mallory")
	for _, term := range []uint64{1, 5} {
		err = m.AppendEntries("", tr.LocalAddr(), &raft.AppendEntriesRequest{
			RPCHeader: hdr("mallory", "127.0.0.1:1"), Term: term, Entries: []*raft.Log{nil},
		}, &raft.AppendEntriesResponse{})
		if err == nil {
			t.Errorf("the nil entry at term %d was admitted", term)
		}
	}
	if s := el.Raft().State(); s == raft.Shutdown {
		t.Fatalf("j1 is %v", s)
	}
	// A well-formed append from the same stranger still reaches it (the
	// joining rule: the first leader that appends brings the configuration).
	if err := m.AppendEntries("", tr.LocalAddr(), &raft.AppendEntriesRequest{
		RPCHeader: hdr("mallory", "127.0.0.1:1"), Term: 6,
	}, &raft.AppendEntriesResponse{}); err != nil {
		t.Errorf("a well-formed heartbeat to the joining node: %v", err)
	}
}

// quietSlog discards logs.
func quietSlog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestAttackWindowGap: a peer raises two nodes' terms by the whole window,
// twice, while the third hears nothing: the third is then more than the
// window behind, and its own window alone would refuse the real leader's
// appends for good. Found by FuzzLiveCluster (the first random run of
// TestLiveClusterRandom: z1 at 12884902095 refused z2's appends at
// 17179869391 until the 30 s wait ran out). The lagging node now catches
// up on evidence: its pre-vote round's answers from both other voters.
func TestAttackWindowGap(t *testing.T) {
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
	ld, _ := c.leaderAbove(0)
	lag := c.followerOf(ld)
	var b *tcpNode
	for _, nd := range c.nodes {
		if nd != ld && nd != lag {
			b = nd
		}
	}
	tr := plainStranger(t)
	for range 2 {
		for _, to := range []*tcpNode{ld, b} {
			claim := b
			if to == b {
				claim = ld
			}
			term := to.el.Raft().CurrentTerm() + TermWindow
			_ = tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{
				RPCHeader: hdr(claim.id, claim.addr), Term: term,
			}, &raft.AppendEntriesResponse{})
		}
	}
	if gap := b.el.Raft().CurrentTerm() - lag.el.Raft().CurrentTerm(); gap <= TermWindow {
		t.Fatalf("the attack left a gap of %d, not more than the window", gap)
	}
	c.leaderAbove(2 * TermWindow)
}

// TestAttackNodeAhead: a peer claiming to be the leader pushes one
// follower's term up by the whole window, twice, while the others hear
// nothing: that follower is then more than the window ahead, so the others
// refuse its pre-votes as too high, and the leader, whose appends it
// refuses as stale, refused its answers' term the same way, kept leading
// and never learned. Found by FuzzLiveCluster (a forged snapshot and a vote
// left z2 a Candidate at 2^32+1 above the others for minutes). The leader
// now sees the answer's term clamped to the top of its window: it steps
// down, and the next pre-vote rounds raise the others window by window.
func TestAttackNodeAhead(t *testing.T) {
	c := newTCPCluster(t, []string{"a1", "a2", "a3"}, nil)
	ld, _ := c.leaderAbove(0)
	ahead := c.followerOf(ld)
	tr := plainStranger(t)
	for range 2 {
		term := ahead.el.Raft().CurrentTerm() + TermWindow
		_ = tr.AppendEntries("", raft.ServerAddress(ahead.addr), &raft.AppendEntriesRequest{
			RPCHeader: hdr(ld.id, ld.addr), Term: term,
		}, &raft.AppendEntriesResponse{})
	}
	if gap := ahead.el.Raft().CurrentTerm() - ld.el.Raft().CurrentTerm(); gap <= TermWindow {
		t.Fatalf("the attack left %s %d ahead of the leader, not more than the window", ahead.id, gap)
	}
	c.leaderAbove(2 * TermWindow)
}
