package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PostgresEnv names the PostgreSQL server of the postgres backend's runs;
// they skip without it.
const PostgresEnv = "TERMFENCE_POSTGRES_DSN"

// postgresSchema makes a schema of the run's own on the server at dsn and
// returns a DSN whose sessions use it (search_path) and name themselves
// after the run (application_name: the session-kill fault finds them by
// it), and a func that drops the schema.
func postgresSchema(ctx context.Context, dsn string, seed int64) (string, func(), error) {
	schema := fmt.Sprintf("chaos_%d", uint64(seed)%1_000_000_000_000)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("chaos: postgres: create schema: %w", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("chaos: postgres DSN: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", "termfence-store-"+schema)
	u.RawQuery = q.Encode()
	drop := func() {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	}
	return u.String(), drop, nil
}

// terminateStoreSessions ends, with pg_terminate_backend, every session of
// the store's (application_name from its DSN) and returns how many, and
// how many of them were in a transaction (a write holding the fence).
func terminateStoreSessions(ctx context.Context, storeDSN string) (killed, inTx int, err error) {
	u, err := url.Parse(storeDSN)
	if err != nil {
		return 0, 0, err
	}
	app := u.Query().Get("application_name")
	q := u.Query()
	q.Del("application_name")
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)),
			count(*) FILTER (WHERE state LIKE 'idle in transaction%' OR (state = 'active' AND xact_start IS NOT NULL))
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&killed, &inTx)
	return killed, inTx, err
}
