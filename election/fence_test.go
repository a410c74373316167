package election

import (
	"context"
	"sync"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// memFence is a minimal stand-in for storageguard.NewMemory (not committed
// yet when this test was written): it keeps the highest epoch per resource
// and refuses an older term with a *storageguard.StaleError.
type memFence struct {
	mu   sync.Mutex
	high map[string]epoch.Epoch
}

func newFence() *memFence { return &memFence{high: make(map[string]epoch.Epoch)} }

func (f *memFence) Admit(_ context.Context, resource string, ep epoch.Epoch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h := f.high[resource]; ep.Term < h.Term {
		return &storageguard.StaleError{Resource: resource, Presented: ep, Highest: h}
	}
	f.high[resource] = ep
	return nil
}
