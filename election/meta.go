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
	user raft.FSM
	meta *metaStore
}

// batchMetaFSM is metaFSM for an application FSM that applies in batches.
type batchMetaFSM struct{ metaFSM }

var (
	_ raft.FSM         = metaFSM{}
	_ raft.BatchingFSM = batchMetaFSM{}
	_ raft.FSMSnapshot = metaSnapshot{}
)

// wrapFSM returns the FSM raft is given for the application's FSM user.
func wrapFSM(user raft.FSM, meta *metaStore) raft.FSM {
	f := metaFSM{user: user, meta: meta}
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
	return metaSnapshot{user: us, meta: f.meta.clone()}, nil
}

// Restore implements raft.FSM: the metadata header, if any, then the
// application's snapshot.
func (f metaFSM) Restore(rc io.ReadCloser) error {
	br := bufio.NewReader(rc)
	m := make(map[string]string)
	if head, err := br.Peek(len(snapshotMagic)); err == nil && string(head) == snapshotMagic {
		_, _ = br.Discard(len(snapshotMagic))
		n, err := binary.ReadUvarint(br)
		if err != nil || n > maxMetaSnapshot {
			_ = rc.Close()
			return fmt.Errorf("election: snapshot: bad metadata header (length %d): %v", n, err)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			_ = rc.Close()
			return fmt.Errorf("election: snapshot: reading metadata: %w", err)
		}
		if err := json.Unmarshal(buf, &m); err != nil {
			_ = rc.Close()
			return fmt.Errorf("election: snapshot: decoding metadata: %w", err)
		}
	}
	f.meta.replace(m)
	return f.user.Restore(readCloser{Reader: br, Closer: rc})
}

type readCloser struct {
	io.Reader
	io.Closer
}

// metaSnapshot writes the metadata header, then the application's
// snapshot (whose Persist closes the sink).
type metaSnapshot struct {
	user raft.FSMSnapshot
	meta map[string]string
}

// Persist implements raft.FSMSnapshot.
func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := json.Marshal(s.meta)
	if err == nil {
		var hdr bytes.Buffer
		hdr.WriteString(snapshotMagic)
		hdr.Write(binary.AppendUvarint(nil, uint64(len(b))))
		hdr.Write(b)
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
