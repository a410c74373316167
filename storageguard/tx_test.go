package storageguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// memTx is a TxFence over Memory whose "transaction" is the write of Do:
// enough to see what storageguard.Tx does around a fence's Tx.
type memTx struct{ *storageguard.Memory }

type fakeTx struct{}

func (m memTx) Tx(ctx context.Context, resource string, ep epoch.Epoch, fn func(fakeTx) error) error {
	return m.Do(ctx, resource, ep, func(context.Context) error { return fn(fakeTx{}) })
}

// TestGuardRefusalsReachOnRefuse: every refusal the Guard makes before the
// fence — through Verify as through Do and Tx — is passed to OnRefuse
// exactly once; fence refusals are not (they are the fence's to report).
func TestGuardRefusalsReachOnRefuse(t *testing.T) {
	codec, _ := epoch.NewHMAC([]byte("0123456789abcdef0123456789abcdef"))
	var refused []error
	g := storageguard.NewGuard(memTx{storageguard.NewMemory()}, storageguard.GuardConfig{
		Cluster: "c", Verifier: codec, OnRefuse: func(_ string, err error) { refused = append(refused, err) },
	})
	ctx := context.Background()
	sign := func(term uint64) string {
		tok, _ := codec.Sign(epoch.Epoch{Cluster: "c", Term: term, Leader: "n1"})
		return tok
	}
	noop := func(fakeTx, epoch.Epoch) error { return nil }

	if _, err := g.Verify("r", "garbage"); !errors.Is(err, epoch.ErrMalformed) {
		t.Fatalf("Verify(garbage): %v", err)
	}
	if len(refused) != 1 {
		t.Fatalf("Verify's refusal reached OnRefuse %d times, want 1", len(refused))
	}
	if err := storageguard.Tx(ctx, g, "r", "", noop); !errors.Is(err, storageguard.ErrUnauthenticated) {
		t.Fatalf("Tx with no token: %v", err)
	}
	if err := storageguard.Tx(ctx, g, "", sign(2), noop); !errors.Is(err, storageguard.ErrBadResource) {
		t.Fatalf("Tx with no resource: %v", err)
	}
	if len(refused) != 3 {
		t.Fatalf("after Verify and two refused Tx calls OnRefuse saw %d refusals, want 3: %v", len(refused), refused)
	}
	// Admitted, then stale at the fence: not the Guard's refusal.
	var got epoch.Epoch
	if err := storageguard.Tx(ctx, g, "r", sign(2), func(_ fakeTx, ep epoch.Epoch) error { got = ep; return nil }); err != nil || got.Term != 2 {
		t.Fatalf("Tx(term 2): %v, fn got %v", err, got)
	}
	ran := false
	if err := storageguard.Tx(ctx, g, "r", sign(1), func(fakeTx, epoch.Epoch) error { ran = true; return nil }); !errors.Is(err, storageguard.ErrStale) || ran {
		t.Fatalf("Tx(term 1) after term 2: %v (fn ran: %v), want ErrStale without fn", err, ran)
	}
	if len(refused) != 3 {
		t.Fatalf("a fence refusal reached OnRefuse: %v", refused)
	}
}

// TestTxNeedsTxFence: Tx on a Guard whose fence has no Tx for the
// transaction type refuses with ErrNoTx before anything else, and a nil fn
// with ErrBadConfig; neither touches the fence.
func TestTxNeedsTxFence(t *testing.T) {
	ctx := context.Background()
	mem := storageguard.NewMemory()
	g := storageguard.NewGuard(mem, storageguard.GuardConfig{Verifier: epoch.Plain()})
	tok := epoch.Epoch{Cluster: "c", Term: 5, Leader: "n1"}.String()
	err := storageguard.Tx(ctx, g, "r", tok, func(fakeTx, epoch.Epoch) error { return nil })
	if !errors.Is(err, storageguard.ErrNoTx) {
		t.Fatalf("Tx on a Memory fence: %v, want ErrNoTx", err)
	}
	g = storageguard.NewGuard(memTx{mem}, storageguard.GuardConfig{Verifier: epoch.Plain()})
	if err := storageguard.Tx[fakeTx](ctx, g, "r", tok, nil); !errors.Is(err, storageguard.ErrBadConfig) {
		t.Fatalf("Tx with a nil fn: %v, want ErrBadConfig", err)
	}
	if h, _ := mem.Highest(ctx, "r"); !h.IsZero() {
		t.Fatalf("a refused Tx raised the fence to %v", h)
	}
	var nilGuard *storageguard.Guard
	if err := storageguard.Tx(ctx, nilGuard, "r", tok, func(fakeTx, epoch.Epoch) error { return nil }); !errors.Is(err, storageguard.ErrNoFence) {
		t.Fatalf("Tx on a nil Guard: %v, want ErrNoFence", err)
	}
}
