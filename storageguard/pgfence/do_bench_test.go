package pgfence_test

import (
	"context"
	"testing"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
)

// BenchmarkDo is a same-epoch Do with an empty write: the fence
// transaction that holds the row FOR SHARE while the write runs, and its
// commit.
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	f := openPgfence(b, openPgxPool(b, sqltest.PostgresDSN(b), nil))
	e := ep(7, "node-a")
	if err := f.Admit(ctx, "files/f", e); err != nil {
		b.Fatal(err)
	}
	write := func(context.Context) error { return nil }
	for b.Loop() {
		if err := f.Do(ctx, "files/f", e, write); err != nil {
			b.Fatal(err)
		}
	}
}
