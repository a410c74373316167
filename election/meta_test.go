package election

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// TestLeaderMeta: every node learns the leader's advertised metadata —
// followers through Status and the *NotLeaderError of a refused
// call — before and after a failover, and AddMember records the metadata
// a joining node gives.
func TestLeaderMeta(t *testing.T) {
	c := newMetaCluster(t, 3)
	ctx := context.Background()
	for round := range 2 {
		// Every follower learns the metadata of whoever leads: on a loaded
		// machine raft may change leaders during the wait, and the wait
		// then follows the new leader instead of waiting for the old one
		// forever.
		var ld *node
		var ep epoch.Epoch
		waitFor(t, "every follower to know the current leader's metadata", func() bool {
			ld, ep = c.leader()
			for _, nd := range c.nodes {
				if st := nd.el.Status(); nd != ld && (st.LeaderID != ld.id || st.LeaderMeta != metaOf(ld.id)) {
					return false
				}
			}
			return true
		})
		if st := ld.el.Status(); st.LeaderMeta != metaOf(ld.id) {
			if cur, _ := ld.el.Epoch(); cur == ep {
				t.Fatalf("round %d: the leader %s reports LeaderMeta %q, want %q", round, ld.id, st.LeaderMeta, metaOf(ld.id))
			}
		}
		for _, nd := range c.nodes {
			if nd == ld {
				continue
			}
			_, err := nd.el.Epoch()
			var nl *NotLeaderError
			if !errors.As(err, &nl) {
				t.Fatalf("Epoch() on follower %s: %v, want *NotLeaderError", nd.id, err)
			}
			if cur, _ := ld.el.Epoch(); cur == ep && (nl.LeaderID != ld.id || nl.LeaderMeta != metaOf(ld.id)) {
				t.Fatalf("follower %s's NotLeaderError = %+v, want leader %s with meta %q", nd.id, nl, ld.id, metaOf(ld.id))
			}
		}
		rctx, cancel := context.WithTimeout(ctx, waitLong)
		err := ld.el.Resign(rctx)
		cancel()
		if err != nil {
			t.Fatalf("Resign: %v", err)
		}
		c.leaderAbove(ep.Term, nil)
	}

	c.join("n4")
	onLeader(t, c, "AddMember(n4) with Meta", func(ld *node) error {
		return ld.el.AddMember(ctx, Member{ID: "n4", Addr: "n4", Voter: true, Meta: "http://joined.test"})
	})
	waitFor(t, "n4's metadata on every node", func() bool {
		for _, nd := range c.nodes {
			ms, err := nd.el.Members()
			if err != nil || !slices.Contains(ms, Member{ID: "n4", Addr: "n4", Voter: true, Meta: "http://joined.test"}) {
				return false
			}
		}
		return true
	})
}

// recordingFSM is an application FSM that records what reaches it and
// snapshots as the bytes it was last restored from.
type recordingFSM struct {
	applied [][]byte
	state   []byte
}

func (f *recordingFSM) Apply(l *raft.Log) any {
	f.applied = append(f.applied, l.Data)
	return len(f.applied)
}
func (f *recordingFSM) Snapshot() (raft.FSMSnapshot, error) {
	return rawSnapshot(f.state), nil
}
func (f *recordingFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	f.state = b
	return err
}

type rawSnapshot []byte

func (s rawSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		return err
	}
	return sink.Close()
}
func (rawSnapshot) Release() {}

type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Cancel() error { return nil }
func (*bufSink) Close() error  { return nil }

// TestMetaFSM: metadata entries never reach the application's FSM, its
// own entries do; a snapshot carries the metadata in front of the
// application's bytes and a restore gives each side its own; a snapshot
// written without metadata (before this package kept any) is restored
// whole into the application's FSM.
func TestMetaFSM(t *testing.T) {
	app := &recordingFSM{state: []byte("app-state")}
	meta := newMetaStore()
	f := wrapFSM(app, meta, newRoleTable())
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte(`{"id":"n1","meta":"http://a"}`), Extensions: []byte(metaExtension)})
	f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte("user")})
	if res := f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: []byte("{"), Extensions: []byte(metaExtension)}); res == nil {
		t.Error("a malformed metadata entry was applied without an error")
	}
	if len(app.applied) != 1 || string(app.applied[0]) != "user" || meta.get("n1") != "http://a" {
		t.Fatalf("application saw %q, metadata %v", app.applied, meta.clone())
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	app2, meta2 := &recordingFSM{}, newMetaStore()
	if err := wrapFSM(app2, meta2, newRoleTable()).Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if string(app2.state) != "app-state" || meta2.get("n1") != "http://a" {
		t.Fatalf("restored application state %q, metadata %v", app2.state, meta2.clone())
	}
	app3, meta3 := &recordingFSM{}, newMetaStore()
	meta3.set("stale", "x")
	if err := wrapFSM(app3, meta3, newRoleTable()).Restore(io.NopCloser(bytes.NewReader([]byte("old-format")))); err != nil {
		t.Fatal(err)
	}
	if string(app3.state) != "old-format" || len(meta3.clone()) != 0 {
		t.Fatalf("old snapshot: application state %q, metadata %v", app3.state, meta3.clone())
	}
	bad := append([]byte(snapshotMagic), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
	if err := wrapFSM(&recordingFSM{}, newMetaStore(), newRoleTable()).Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
		t.Fatal("a snapshot with a huge metadata length was restored")
	}
}

// TestConfigMetaTooLong: a Config.Meta above MaxMetaLen is refused by
// Validate (and so by New), naming the field.
func TestConfigMetaTooLong(t *testing.T) {
	cfg := Config{ID: "n1", Cluster: "c", InMemory: true, Transport: transport.NewInmem("n1"), Meta: strings.Repeat("u", MaxMetaLen+1)}
	defer cfg.Transport.Close()
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Meta") {
		t.Fatalf("Validate with a long Meta: %v", err)
	}
	cfg.Meta = strings.Repeat("u", MaxMetaLen)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with Meta of MaxMetaLen: %v", err)
	}
}
