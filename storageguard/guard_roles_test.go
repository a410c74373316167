package storageguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// TestGuardRoleClusters: a store serving the roles of one group takes each
// role's tokens on that role's resource only; another role's token, even a
// newer one, is refused as foreign before the fence is touched, and so is
// the group's own leader token.
func TestGuardRoleClusters(t *testing.T) {
	ctx := context.Background()
	m := storageguard.NewMemory()
	defer m.Close()
	g := storageguard.NewGuard(m, storageguard.GuardConfig{
		Cluster:    "pay",
		Verifier:   epoch.Plain(),
		ClusterFor: storageguard.RoleClusters("pay", func(res string) string { r, _, _ := strings.Cut(res, "/"); return r }),
	})
	tok := func(cluster string, term uint64, leader string) string {
		s, err := epoch.Plain().Sign(epoch.Epoch{Cluster: cluster, Term: term, Leader: leader})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ok := func(context.Context, epoch.Epoch) error { return nil }
	if err := g.Do(ctx, "shard-1/data", tok("pay.shard-1", 7, "n1"), ok); err != nil {
		t.Fatalf("role's own token: %v", err)
	}
	for _, tc := range []struct{ name, token string }{
		{"another role's newer token", tok("pay.shard-2", 99, "n2")},
		{"the group's leader token", tok("pay", 99, "n2")},
		{"another group's role", tok("other.shard-1", 99, "n2")},
	} {
		err := g.Do(ctx, "shard-1/data", tc.token, ok)
		if !errors.Is(err, storageguard.ErrForeignCluster) {
			t.Errorf("%s on shard-1's resource: %v, want ErrForeignCluster", tc.name, err)
		}
	}
	if err := g.Do(ctx, "shard-1/data", tok("pay.shard-1", 8, "n3"), ok); err != nil {
		t.Fatalf("role's next grant: %v", err)
	}
	if err := g.Do(ctx, "shard-1/data", tok("pay.shard-1", 7, "n1"), ok); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("role's older grant after the newer: %v, want ErrStale", err)
	}
	// A ClusterFor that answers "" falls back to Cluster.
	g2 := storageguard.NewGuard(m, storageguard.GuardConfig{Cluster: "pay", Verifier: epoch.Plain(),
		ClusterFor: func(string) string { return "" }})
	if err := g2.Do(ctx, "plain", tok("pay.shard-1", 1, "n1"), ok); !errors.Is(err, storageguard.ErrForeignCluster) {
		t.Fatalf("a role token where the guard takes the group's: %v, want ErrForeignCluster", err)
	}
}
