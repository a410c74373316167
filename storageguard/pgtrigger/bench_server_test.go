package pgtrigger_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// BenchmarkTriggerInServer measures the guard's cost inside the server,
// without round trips, commit flushes or the client: a procedure runs
// 2,000 one-statement transactions (set_config of the token, a one-row
// UPDATE, COMMIT) with synchronous_commit off, on a plain table, on one
// with a PL/pgSQL statement trigger that does nothing, and on a guarded
// one, the three in turn, seven times. It reports the minimum µs per
// transaction of each and the guard's cost over the plain table
// (guard-added-µs). Run it against two releases in turn to compare them:
//
//	go test -run '^$' -bench BenchmarkTriggerInServer -benchtime 1x ./storageguard/pgtrigger
func BenchmarkTriggerInServer(b *testing.B) {
	d := newDB(b)
	ctx := context.Background()
	d.exec(b, `CREATE TABLE srv_plain (id int PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE srv_noop (id int PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE srv_guarded (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO srv_plain VALUES (1, 0); INSERT INTO srv_noop VALUES (1, 0); INSERT INTO srv_guarded VALUES (1, 0);
CREATE FUNCTION srv_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE TRIGGER noop BEFORE UPDATE ON srv_noop FOR EACH STATEMENT EXECUTE FUNCTION srv_noop()`)
	d.install(b, d.config("srv_guarded"))
	tok := sign(b, key, ep(7, "node-a"))
	tables := []string{"srv_plain", "srv_noop", "srv_guarded"}
	for _, t := range tables {
		d.exec(b, fmt.Sprintf(`CREATE PROCEDURE run_%[1]s(tok text, count int, INOUT us float8) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  FOR i IN 1..count LOOP
    PERFORM set_config('termfence.token', tok, true);
    UPDATE %[1]s SET n = n + 1 WHERE id = 1;
    COMMIT;
  END LOOP;
  us := extract(epoch FROM clock_timestamp() - t0) * 1e6 / count;
END$$`, t))
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		b.Fatal(err)
	}
	// The first transaction raises the fence; every later one is the
	// guard's fast path.
	var warm float64
	if err := conn.QueryRow(ctx, "CALL run_srv_guarded($1, 10, NULL)", tok).Scan(&warm); err != nil {
		b.Fatal(err)
	}
	best := make([][]float64, len(tables))
	for b.Loop() {
		for range 7 {
			for i, t := range tables {
				if _, err := conn.Exec(ctx, "VACUUM "+t); err != nil {
					b.Fatal(err)
				}
				var us float64
				if err := conn.QueryRow(ctx, "CALL run_"+t+"($1, 2000, NULL)", tok).Scan(&us); err != nil {
					b.Fatal(err)
				}
				best[i] = append(best[i], us)
			}
		}
	}
	for i, t := range tables {
		b.ReportMetric(slices.Min(best[i]), "µs/"+t)
	}
	b.ReportMetric(slices.Min(best[2])-slices.Min(best[0]), "guard-added-µs")
}
