package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/skiptest"
)

// needPostgres returns the test database's DSN, or skips the test saying
// why.
func needPostgres(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		skiptest.Skip(t, "PostgreSQL (set "+dsnEnv+")", "%s is unset: the postgres-trigger store is not tested (source .ci/postgres.sh && pg_start_termfence)", dsnEnv)
	}
	return dsn
}

// sqlWriter is a write path around the store: its own session on the
// store's schema, plain SQL.
func sqlWriter(t *testing.T, dsn, schema string) func(tok, value string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	// write presents tok (none if empty), upserts the register and commits;
	// it returns the SQLSTATE of a refusal, "" if the write committed.
	return func(tok, value string) string {
		t.Helper()
		ctx := context.Background()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if tok != "" {
			if _, err := tx.Exec(ctx, "SELECT set_config('termfence.token', $1, true)", tok); err != nil {
				t.Fatal(err)
			}
		}
		_, err = tx.Exec(ctx, pgUpsert, DefaultResource, value, "demo", 1, "sql")
		if err == nil {
			err = tx.Commit(ctx)
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Code
		}
		if err != nil {
			t.Fatal(err)
		}
		return ""
	}
}

func openPGStore(t *testing.T, dsn, schema string, key []byte, apiOnly, drop bool) (*recordStore, string) {
	t.Helper()
	codec := epoch.Plain()
	if key != nil {
		var err error
		if codec, err = epoch.NewHMAC(key); err != nil {
			t.Fatal(err)
		}
	}
	st, err := openStore(context.Background(), storeConfig{
		Backend: "postgres-trigger", Data: dsn, Cluster: "demo", Verifier: codec,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), TokenKey: key,
		PGSchema: schema, PGDropSchema: drop, PGAPIOnly: apiOnly,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(st.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return st, srv.URL
}

// TestStorePGTrigger: the postgres-trigger store answers its API as the
// other backends do (one fence row for the whole table), and every write
// to its table that goes around the API is checked by the database: no
// token, a stale (replayed) one, a forged one, another cluster's and a
// malformed one are refused with their SQLSTATEs and change nothing; the
// current token is accepted. The same table with -api-only (unguarded, the
// API fenced in Go) accepts the stale and tokenless writes: the control.
func TestStorePGTrigger(t *testing.T) {
	dsn := needPostgres(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	codec := mustCodec(t, string(key))
	forger := mustCodec(t, strings.Repeat("x", 32))
	schema := pgSchemaName()
	_, url := openPGStore(t, dsn, schema, key, false, true)
	hc := client(nil)
	write := func(tok, body string) (int, string) {
		t.Helper()
		var h []string
		if tok != "" {
			h = []string{epoch.Header, tok}
		}
		status, reply, err := post(hc, url+"/write", body, h...)
		if err != nil {
			t.Fatal(err)
		}
		return status, reply
	}
	unsigned, _ := epoch.Plain().Sign(epoch.Epoch{Cluster: "demo", Term: 99, Leader: "n1"})
	foreign, _ := codec.Sign(epoch.Epoch{Cluster: "other", Term: 99, Leader: "n1"})
	for _, s := range []struct {
		name   string
		tok    string
		body   string
		status int
		reply  string
	}{
		{"first epoch", sign(t, codec, 5, "n1"), `{"value":"a"}`, 200, `"term":5`},
		{"same epoch", sign(t, codec, 5, "n1"), `{"value":"b"}`, 200, `"leader":"n1"`},
		{"newer epoch", sign(t, codec, 6, "n2"), `{"value":"c"}`, 200, `"term":6`},
		{"stale epoch", sign(t, codec, 5, "n1"), `{"value":"stale"}`, 409, `"presented":"demo/5/n1","highest":"demo/6/n2"`},
		{"conflicting epoch", sign(t, codec, 6, "n3"), `{"value":"x"}`, 409, `conflicting`},
		{"unsigned huge term", unsigned, `{"value":"x"}`, 401, `unsigned`},
		{"forged huge term", sign(t, forger, 1000, "n1"), `{"value":"x"}`, 403, `signature`},
		{"other cluster", foreign, `{"value":"x"}`, 403, `other`},
		{"no token", "", `{"value":"x"}`, 401, `error`},
		{"malformed token", "demo/7", `{"value":"x"}`, 401, `malformed`},
		// One fence row for the table: an older epoch is stale for every
		// record of it.
		{"other resource, older epoch", sign(t, codec, 1, "n1"), `{"resource":"r2","value":"y"}`, 409, `stale`},
	} {
		if status, reply := write(s.tok, s.body); status != s.status || !strings.Contains(reply, s.reply) {
			t.Errorf("API %s: %d %s; want %d containing %q", s.name, status, reply, s.status, s.reply)
		}
	}

	sqlWrite := sqlWriter(t, dsn, schema)
	badKey, _ := epoch.NewHMAC([]byte(strings.Repeat("k", 32)))
	forged := sign(t, badKey, 6, "n2")
	for _, w := range []struct{ name, tok, code string }{
		{"no token", "", "TF001"},
		{"stale token replayed", sign(t, codec, 5, "n1"), "TF006"},
		{"forged token", forged, "TF004"},
		{"another cluster's token", foreign, "TF005"},
		{"malformed token", "demo/6/", "TF002"},
		{"unsigned token", "demo/6/n2", "TF003"},
		{"conflicting token", sign(t, codec, 6, "n3"), "TF007"},
	} {
		if code := sqlWrite(w.tok, "around the API: "+w.name); code != w.code {
			t.Errorf("SQL write with %s: SQLSTATE %q, want %s", w.name, code, w.code)
		}
	}
	var rec readReply
	if err := getJSON(hc, url+"/read", &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Value != "c" || rec.Term != 6 || rec.Leader != "n2" {
		t.Errorf("after the refused writes the register is %+v; want c under term 6 by n2", rec)
	}
	var ss storeStatus
	if err := getJSON(hc, url+"/status", &ss); err != nil {
		t.Fatal(err)
	}
	if ss.Highest[DefaultResource] != "demo/6/n2" || ss.Accepted != 3 || ss.Refused != 8 {
		t.Errorf("status %+v; want highest demo/6/n2, accepted 3, refused 8", ss)
	}
	if code := sqlWrite(sign(t, codec, 6, "n2"), "around the API, current token"); code != "" {
		t.Errorf("SQL write with the current token: SQLSTATE %s, want accepted", code)
	}
	if code := sqlWrite(sign(t, codec, 7, "n3"), "around the API, newer token"); code != "" {
		t.Errorf("SQL write with a newer token: SQLSTATE %s, want accepted", code)
	}
	if status, reply := write(sign(t, codec, 6, "n2"), `{"value":"d"}`); status != 409 || !strings.Contains(reply, `"highest":"demo/7/n3"`) {
		t.Errorf("API write under term 6 after a SQL writer raised to 7: %d %s; want 409, highest demo/7/n3", status, reply)
	}

	// The control: the same table, unguarded, only the API fenced.
	t.Run("api-only", func(t *testing.T) {
		schema := pgSchemaName()
		_, url := openPGStore(t, dsn, schema, key, true, true)
		if status, reply, err := post(hc, url+"/write", `{"value":"b"}`, epoch.Header, sign(t, codec, 6, "n2")); err != nil || status != 200 {
			t.Fatalf("API write: %d %s %v", status, reply, err)
		}
		if status, reply, _ := post(hc, url+"/write", `{"value":"x"}`, epoch.Header, sign(t, codec, 5, "n1")); status != 409 {
			t.Errorf("API stale write on the api-only store: %d %s; want 409", status, reply)
		}
		sqlWrite := sqlWriter(t, dsn, schema)
		for _, tok := range []string{"", sign(t, codec, 5, "n1")} {
			if code := sqlWrite(tok, "lands"); code != "" {
				t.Errorf("SQL write (token %q) on the unguarded table: SQLSTATE %s; the control expects it to land", tok, code)
			}
		}
	})
}
