package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchJob is a second write path to the store's table: a nightly job with
// its own PostgreSQL session that writes plain SQL, with no termfence code
// at all — the README's "unfenced batch job writing the same table". It may
// present a token the way any SQL client can (SET LOCAL termfence.token,
// here set_config), or none.
type batchJob struct {
	conn *pgx.Conn
}

// newBatchJob connects to dsn with the store's schema first in the
// search_path, as a job configured for that database would.
func newBatchJob(ctx context.Context, dsn, schema string) (*batchJob, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("batch job: %w", err)
	}
	cfg.RuntimeParams["search_path"] = schema
	cfg.RuntimeParams["application_name"] = "nightly-batch-job"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("batch job: %w", err)
	}
	return &batchJob{conn: conn}, nil
}

func (j *batchJob) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = j.conn.Close(ctx)
}

// write upserts resource=value in one transaction, presenting tok first
// unless it is empty. A refusal by the database is returned as its
// SQLSTATE and message, with a nil error; err is for anything else.
func (j *batchJob) write(ctx context.Context, tok string, rec record) (code, msg string, err error) {
	tx, err := j.conn.Begin(ctx)
	if err != nil {
		return "", "", fmt.Errorf("batch job: %w", err)
	}
	defer func() {
		if err != nil || code != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	if tok != "" {
		if _, err = tx.Exec(ctx, "SELECT set_config('termfence.token', $1, true)", tok); err != nil {
			return "", "", fmt.Errorf("batch job: %w", err)
		}
	}
	_, err = tx.Exec(ctx, pgUpsert, rec.Resource, rec.Value, rec.Epoch.Cluster, int64(rec.Epoch.Term), rec.Epoch.Leader)
	if err == nil {
		err = tx.Commit(ctx)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "TF") {
		return pe.Code, pe.Message, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("batch job: %w", err)
	}
	return "", "", nil
}

// runEveryWritePath is the README's "every write path must check": the
// store's records live in a PostgreSQL table, and a nightly batch job that
// A started writes the same table through its own session, around the
// store's API. The table is guarded by pgtrigger, so the database itself
// checks every write: B's batch job with B's token is accepted; after A's
// pause, A's write through the API is refused by the store, and A's batch
// job is refused by the database, with no token and with A's (stale) one.
// With -api-only the table is not guarded and only the API is fenced (in
// Go, pgfence.Tx): the API still refuses A, but the batch job's writes
// land, and B's update is lost — a fenced API beside an unfenced batch job
// is an unfenced system.
func runEveryWritePath(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", "postgres-trigger", false)
	if err != nil {
		return nil, err
	}
	dsn, err := e.dsn()
	if err != nil {
		return nil, err
	}
	job, err := newBatchJob(ctx, dsn, st.st.cfg.PGSchema)
	if err != nil {
		return nil, err
	}
	defer job.close()
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	guarded := !e.opts.apiOnly
	mode := "the store's table in PostgreSQL, GUARDED by pgtrigger: the database checks every write"
	if !guarded {
		mode = "the store's table in PostgreSQL, NOT guarded (-api-only): only the store's API is fenced (pgfence.Tx)"
	}
	e.header(mode)
	e.tl.say("batch", "a nightly batch job writes table %s.cluster_records through its own PostgreSQL session, plain SQL, around the store's API", st.st.cfg.PGSchema)

	var (
		snap                         string
		batchRefused, batchAccepted  int
		codes                        []string
		apiRefused                   int
		currentAccepted, staleLanded int
	)
	// batch runs one write of the job and records it.
	batch := func(ctx context.Context, a *actor, tok, how string, rec record) (bool, error) {
		code, msg, err := job.write(ctx, tok, rec)
		if err != nil {
			return false, err
		}
		kind, result := evAccepted, "accepted by the database"
		if code != "" {
			kind, result = evRefused, fmt.Sprintf("REFUSED by the database (SQLSTATE %s: %s)", code, msg)
			batchRefused++
			codes = append(codes, code)
		} else {
			batchAccepted++
		}
		e.tl.mark(event{Lane: a.n.id, To: st.name, Kind: kind, Term: a.ep.Term, Label: fmt.Sprintf("batch %s t%d", kind, a.ep.Term)})
		e.tl.say(a.who(), "its batch job (%s) writes %s to %s -> %s", how, data(rec.Value), rec.Resource, result)
		return code == "", nil
	}
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if _, err := e.write(ctx, a, st, DefaultResource, "v0"); err != nil {
				return err
			}
			snap, err = e.read(ctx, a, st, DefaultResource)
			if err == nil {
				e.tl.say(a.who(), "starts its nightly batch job and hands it its token")
			}
			return err
		},
		asB: func(ctx context.Context, b *actor) error {
			v, err := e.read(ctx, b, st, DefaultResource)
			if err != nil {
				return err
			}
			ans, err := e.write(ctx, b, st, DefaultResource, v+" B")
			if err == nil && !ans.Accepted() {
				return failf("the new leader's write was not accepted: %d %s", ans.Status, ans.Reason())
			}
			if err != nil {
				return err
			}
			// B's own batch job, with B's token: the current epoch's
			// writes are accepted on every path.
			ok, err := batch(ctx, b, b.tok, "with B's token", record{Resource: "nightly-report", Value: "report by B", Epoch: b.ep})
			if ok {
				currentAccepted++
			}
			return err
		},
		after: func(ctx context.Context, a *actor) error {
			ans, err := e.write(ctx, a, st, DefaultResource, snap+" A")
			if err != nil {
				return err
			}
			if ans.Refused() {
				apiRefused++
			}
			rec := record{Resource: DefaultResource, Value: snap + " A batch", Epoch: a.ep}
			for _, c := range []struct{ tok, how string }{
				{"", "no token: it never checks"},
				{a.tok, "with the token A handed it before the pause"},
			} {
				ok, err := batch(ctx, a, c.tok, c.how, rec)
				if err != nil {
					return err
				}
				if ok {
					staleLanded++
				}
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	rec, ok, err := st.c.read(ctx, DefaultResource)
	if err != nil || !ok {
		return nil, failf("reading the final data: ok=%v %v", ok, err)
	}
	ss, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}
	lost := 0
	verdict := "B's update survives: every write path was checked"
	if !strings.Contains(" "+rec.Value+" ", " B ") {
		lost = 1
		verdict = "B's update is LOST: the API was fenced, the batch job was not"
	}
	e.tl.say("result", "data=%s (last written under term %d by %s)  %s", data(rec.Value), rec.Term, rec.Leader, verdict)
	e.tl.say("store", "API: accepted=%d refused=%d highest=%s", ss.Accepted, ss.Refused, ss.Highest[DefaultResource])
	codeList := "none"
	if len(codes) > 0 {
		codeList = strings.Join(codes, ",")
	}
	sum := newSummary("every-write-path").
		add("guarded", guarded).
		add("A", run.a.n.id).add("epochA", run.a.ep).
		add("B", run.b.n.id).add("epochB", run.b.ep).
		add("api_refused", apiRefused).
		add("batch_current_accepted", currentAccepted).
		add("batch_stale_landed", staleLanded).
		add("batch_refused", batchRefused).add("batch_codes", codeList).
		add("lost", lost).add("data", list(rec.Value))
	sum.ok = lost == 0 && staleLanded == 0 && apiRefused == 1 && currentAccepted == 1
	return sum, nil
}
