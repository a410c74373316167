package pgtrigger_test

import (
	"context"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// TestRoleTables: two tables, each guarded for one role of the same group
// (Config.Cluster "<group>.<role>"), take each role's tokens on its own
// table only: a token of the other role, even with a higher grant, is
// refused as foreign, and a role's older grant after a newer one as stale.
func TestRoleTables(t *testing.T) {
	d := newDB(t)
	ctx := context.Background()
	for _, r := range []string{"shard_a", "shard_b"} {
		d.exec(t, "CREATE TABLE "+r+" (id int PRIMARY KEY)")
		d.install(t, pgtrigger.Config{Table: r, Resource: r, Cluster: cluster + "." + r, HMACKey: key, Schema: d.private})
	}
	role := func(r string, grant uint64, owner string) string {
		return sign(t, key, epoch.Epoch{Cluster: cluster + "." + r, Term: grant, Leader: owner})
	}
	insert := func(table, token string, id int) string {
		tx, err := pgtrigger.Begin(ctx, d.pool, token)
		if err != nil {
			return sqlState(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", id); err != nil {
			return sqlState(err)
		}
		return sqlState(tx.Commit(ctx))
	}
	if code := insert("shard_a", role("shard_a", 10, "n1"), 1); code != "" {
		t.Fatalf("shard_a's token on shard_a: SQLSTATE %s", code)
	}
	if code := insert("shard_a", role("shard_b", 99, "n2"), 2); code != pgtrigger.CodeForeign {
		t.Fatalf("shard_b's token on shard_a: SQLSTATE %q, want %s", code, pgtrigger.CodeForeign)
	}
	if code := insert("shard_b", role("shard_b", 99, "n2"), 2); code != "" {
		t.Fatalf("shard_b's token on shard_b: SQLSTATE %s", code)
	}
	if code := insert("shard_a", role("shard_a", 12, "n3"), 3); code != "" {
		t.Fatalf("shard_a's next grant: SQLSTATE %s", code)
	}
	if code := insert("shard_a", role("shard_a", 10, "n1"), 4); code != pgtrigger.CodeStale {
		t.Fatalf("shard_a's older grant: SQLSTATE %q, want %s", code, pgtrigger.CodeStale)
	}
}
