package election

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"sync"

	"github.com/hashicorp/raft"
)

// MaxMetaLen is the largest Config.Meta or Member.Meta, in bytes.
const MaxMetaLen = 1024

// Member metadata travels in the Raft log, in entries this package writes
// itself and keeps from the application's FSM: raft.Log.Extensions marks
// them. A leader records its own Config.Meta before it publishes its first
// epoch (and again whenever the value changed), AddMember records the Meta
// it is given, and every node applies the entries to a map that snapshots
// carry in a header in front of the application's own snapshot.

// metaExtension marks the log entries that carry member metadata.
const metaExtension = "termfence/meta/1"

// snapshotMagic starts a snapshot written by this package: the metadata
// follows (a uvarint length and JSON), then the application's snapshot. A
// snapshot without it (written before this package kept metadata) is the
// application's alone.
const snapshotMagic = "TFMETA1\n"

// snapshotMagicRoles starts a snapshot that carries the role table
// (rolestable.go) too: the metadata as after snapshotMagic, then a uvarint
// length and the role table's JSON, then the application's snapshot.
const snapshotMagicRoles = "TFMETA2\n"

// maxMetaSnapshot bounds the metadata header read from a snapshot.
const maxMetaSnapshot = 64 << 20

// metaEntry is one metadata log entry.
type metaEntry struct {
	ID   string `json:"id"`
	Meta string `json:"meta"`
}

// metaStore is the replicated map server ID -> metadata.
type metaStore struct {
	mu       sync.RWMutex
	m        map[string]string
	onChange func() // called after every change, without the lock
}

func newMetaStore() *metaStore { return &metaStore{m: make(map[string]string)} }

func (s *metaStore) get(id string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[id]
}

func (s *metaStore) set(id, meta string) {
	s.mu.Lock()
	s.m[id] = meta
	s.mu.Unlock()
	if s.onChange != nil {
		s.onChange()
	}
}

func (s *metaStore) replace(m map[string]string) {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	if s.onChange != nil {
		s.onChange()
	}
}

func (s *metaStore) clone() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.m)
}

// isMeta reports whether l is a metadata entry of this package.
func isMeta(l *raft.Log) bool {
	return l.Type == raft.LogCommand && string(l.Extensions) == metaExtension
}

// applyMeta applies a metadata entry. A malformed one (which only another
// version could write) is skipped: stopping the FSM would stop the node.
func (s *metaStore) applyMeta(l *raft.Log) any {
	var ent metaEntry
	if err := json.Unmarshal(l.Data, &ent); err != nil || ent.ID == "" || len(ent.Meta) > MaxMetaLen {
		return fmt.Errorf("election: log entry %d: malformed member metadata", l.Index)
	}
	s.set(ent.ID, ent.Meta)
	return nil
}

// metaFSM is the FSM raft runs: the application's (Config.FSM) with the
// metadata entries taken out, and the metadata in front of its snapshots.
type metaFSM struct {
	user  raft.FSM
	meta  *metaStore
	roles *roleTable
}

// batchMetaFSM is metaFSM for an application FSM that applies in batches.
type batchMetaFSM struct{ metaFSM }

var (
	_ raft.FSM         = metaFSM{}
	_ raft.BatchingFSM = batchMetaFSM{}
	_ raft.FSMSnapshot = metaSnapshot{}
)

// wrapFSM returns the FSM raft is given for the application's FSM user.
func wrapFSM(user raft.FSM, meta *metaStore, roles *roleTable) raft.FSM {
	f := metaFSM{user: user, meta: meta, roles: roles}
	if _, ok := user.(raft.BatchingFSM); ok {
		return batchMetaFSM{f}
	}
	return f
}

// Apply implements raft.FSM.
func (f metaFSM) Apply(l *raft.Log) any {
	if isMeta(l) {
		return f.meta.applyMeta(l)
	}
	if isRoles(l) {
		return f.roles.applyRoles(l)
	}
	return f.user.Apply(l)
}

// ApplyBatch implements raft.BatchingFSM: the metadata entries are applied
// here, the others handed to the application in one batch, in order.
func (f batchMetaFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	pass := make([]*raft.Log, 0, len(logs))
	at := make([]int, 0, len(logs))
	for i, l := range logs {
		if isMeta(l) {
			out[i] = f.meta.applyMeta(l)
			continue
		}
		if isRoles(l) {
			out[i] = f.roles.applyRoles(l)
			continue
		}
		pass = append(pass, l)
		at = append(at, i)
	}
	if len(pass) > 0 {
		res := f.user.(raft.BatchingFSM).ApplyBatch(pass)
		for j, i := range at {
			if j < len(res) {
				out[i] = res[j]
			}
		}
	}
	return out
}

// Snapshot implements raft.FSM.
func (f metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	us, err := f.user.Snapshot()
	if err != nil {
		return nil, err
	}
	return metaSnapshot{user: us, meta: f.meta.clone(), roles: f.roles.snapshot()}, nil
}

// Restore implements raft.FSM: the metadata header, if any, then the
// application's snapshot.
func (f metaFSM) Restore(rc io.ReadCloser) error {
	br := bufio.NewReader(rc)
	m := make(map[string]string)
	var rs roleState
	head, err := br.Peek(len(snapshotMagic))
	magic := string(head) // copied: Peek's slice is only valid until the next read
	if err == nil && (magic == snapshotMagic || magic == snapshotMagicRoles) {
		_, _ = br.Discard(len(snapshotMagic))
		if err := readSnapshotJSON(br, "metadata", &m); err != nil {
			_ = rc.Close()
			return err
		}
		if magic == snapshotMagicRoles {
			if err := readSnapshotJSON(br, "role table", &rs); err != nil {
				_ = rc.Close()
				return err
			}
		}
	}
	f.meta.replace(m)
	f.roles.restore(rs)
	return f.user.Restore(readCloser{Reader: br, Closer: rc})
}

// readSnapshotJSON reads one uvarint-length-prefixed JSON value of a
// snapshot header into v.
func readSnapshotJSON(br *bufio.Reader, what string, v any) error {
	n, err := binary.ReadUvarint(br)
	if err != nil || n > maxMetaSnapshot {
		return fmt.Errorf("election: snapshot: bad %s header (length %d): %v", what, n, err)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(br, buf); err != nil {
		return fmt.Errorf("election: snapshot: reading %s: %w", what, err)
	}
	if err := json.Unmarshal(buf, v); err != nil {
		return fmt.Errorf("election: snapshot: decoding %s: %w", what, err)
	}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// metaSnapshot writes the metadata header, then the application's
// snapshot (whose Persist closes the sink).
type metaSnapshot struct {
	user  raft.FSMSnapshot
	meta  map[string]string
	roles roleState
}

// Persist implements raft.FSMSnapshot.
func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := json.Marshal(s.meta)
	var rb []byte
	if err == nil {
		rb, err = json.Marshal(s.roles)
	}
	if err == nil {
		var hdr bytes.Buffer
		hdr.WriteString(snapshotMagicRoles)
		hdr.Write(binary.AppendUvarint(nil, uint64(len(b))))
		hdr.Write(b)
		hdr.Write(binary.AppendUvarint(nil, uint64(len(rb))))
		hdr.Write(rb)
		_, err = sink.Write(hdr.Bytes())
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("election: snapshot: writing metadata: %w", err)
	}
	return s.user.Persist(sink)
}

// Release implements raft.FSMSnapshot.
func (s metaSnapshot) Release() { s.user.Release() }

// recordMeta replicates meta as the metadata of member id, unless it is
// empty or already recorded. It needs this node to lead.
func (e *Election) recordMeta(ctx context.Context, id, meta string) error {
	if meta == "" || e.meta.get(id) == meta {
		return nil
	}
	data, err := json.Marshal(metaEntry{ID: id, Meta: meta})
	if err != nil {
		return fmt.Errorf("election: encoding metadata: %w", err)
	}
	err = e.await(ctx, func() raft.Future {
		return e.raft.ApplyLog(raft.Log{Data: data, Extensions: []byte(metaExtension)}, 0)
	})
	if err := e.configErr("record metadata of "+id, err); err != nil {
		return err
	}
	return nil
}
