package sqlfence

import (
	"context"
	"database/sql"
)

// OpenUnchecked is Open accepting any SQLite settings, at Open and at
// every raise, for the control of the power-loss test.
func OpenUnchecked(ctx context.Context, db *sql.DB, d Dialect) (*Fence, error) {
	return open(ctx, db, d, false)
}

// RecheckDurable switches the settings check of a fence from OpenUnchecked
// back on for its transactions.
func RecheckDurable(f *Fence) { f.noDurableCheck = false }
