package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"sync"

	"github.com/hashicorp/raft"
)

// addrBook is the node's Raft FSM: it replicates which HTTP address each
// node serves its API on, so that a follower can tell a client where the
// leader's API is (the "leader_http" of a 503). Raft knows only transport
// addresses. A leader records its own address when it takes an epoch, and
// the address a joining node gives in POST /join.
//
// It holds no fencing state: epochs come from Raft terms (package election),
// not from this log.
type addrBook struct {
	mu   sync.RWMutex
	http map[string]string // server ID -> HTTP address
}

var (
	_ raft.FSM         = (*addrBook)(nil)
	_ raft.FSMSnapshot = bookSnapshot{}
)

func newAddrBook() *addrBook { return &addrBook{http: make(map[string]string)} }

// bookEntry is one log entry: node ID serves HTTP at addr.
type bookEntry struct {
	ID   string `json:"id"`
	HTTP string `json:"http"`
}

// encodeEntry returns the log entry for id's HTTP address.
func encodeEntry(id, addr string) []byte {
	b, _ := json.Marshal(bookEntry{ID: id, HTTP: addr}) // two strings: cannot fail
	return b
}

// Apply implements raft.FSM.
func (b *addrBook) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var e bookEntry
	if err := json.Unmarshal(l.Data, &e); err != nil || e.ID == "" {
		// Not ours; an entry another version wrote. Ignore rather than
		// stop the FSM.
		return fmt.Errorf("addrbook: ignoring entry %d: not an address entry", l.Index)
	}
	b.mu.Lock()
	b.http[e.ID] = e.HTTP
	b.mu.Unlock()
	return nil
}

// lookup returns the HTTP address recorded for id, or "".
func (b *addrBook) lookup(id string) string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.http[id]
}

// Snapshot implements raft.FSM.
func (b *addrBook) Snapshot() (raft.FSMSnapshot, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return bookSnapshot(maps.Clone(b.http)), nil
}

// Restore implements raft.FSM.
func (b *addrBook) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m := make(map[string]string)
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return fmt.Errorf("addrbook: restore: %w", err)
	}
	b.mu.Lock()
	b.http = m
	b.mu.Unlock()
	return nil
}

type bookSnapshot map[string]string

// Persist implements raft.FSMSnapshot.
func (s bookSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(map[string]string(s)); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("addrbook: snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (bookSnapshot) Release() {}
