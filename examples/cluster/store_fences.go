package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// The backends below exist for the fault-injection suite (internal/chaos),
// which runs the same nemesis over every fence and both HTTP paths:
//
//   - memory: httpfence.Middleware over storageguard.Memory, records in
//     bbolt. The fence is not durable: a restarted store admits deposed
//     leaders again, so the suite never restarts it.
//   - dir: Middleware over a dirfence directory (unix).
//   - sqlite-do: Middleware over sqlfence's Do on SQLite: the record is
//     written outside the database while the fence transaction holds the
//     write lock.
//   - postgres: sqlfence's Tx on PostgreSQL (-data is the DSN), records in
//     a table of the same database, sessions named termfence-store.
//   - proxy-sqlite, proxy-dir: httpfence.NewProxy over sqlfence (SQLite) or
//     dirfence, forwarding to an unfenced record service inside the store
//     process: the resource comes from the request's "resource" query
//     parameter, since the proxy never reads a body before admission.

// storeBackends lists every -backend name.
var storeBackends = []string{"sqlite", "bolt", "postgres-trigger", "memory", "dir", "sqlite-do", "postgres", "proxy-sqlite", "proxy-dir"}

// PostgresApp is the application_name of the postgres backend's sessions.
const PostgresApp = "termfence-store"

// openBackend opens the backend named by cfg.Backend.
func openBackend(ctx context.Context, cfg storeConfig) (backend, error) {
	var (
		b   backend
		err error
	)
	switch cfg.Backend {
	case "sqlite":
		var sb *sqliteBackend
		if sb, err = openSQLite(ctx, cfg.Data); err == nil {
			sb.delay, b = cfg.delayFunc(), sb
		}
	case "postgres":
		var sb *sqliteBackend
		if sb, err = openPostgres(ctx, cfg.Data); err == nil {
			sb.delay, b = cfg.delayFunc(), sb
		}
	case "bolt", "memory", "dir", "sqlite-do":
		var f storageguard.Fence
		if f, err = openFence(ctx, cfg.Backend, cfg.Data); err == nil {
			var bb *boltBackend
			if bb, err = openRecords(f, cfg.Data); err != nil {
				f.Close()
			} else {
				bb.delay, b = cfg.delayFunc(), bb
			}
		}
	case "proxy-sqlite", "proxy-dir":
		b, err = openProxied(ctx, cfg)
	case "postgres-trigger":
		b, err = openPGTrigger(ctx, cfg)
	default:
		return nil, fmt.Errorf("store: unknown -backend %q (want one of %v)", cfg.Backend, storeBackends)
	}
	if err != nil {
		return nil, err
	}
	if cfg.ReleaseEarly {
		b = releaseEarlyBackend{b}
	}
	return b, nil
}

// openFence opens the fence a Middleware or proxy backend uses: its state
// at path (a bbolt file, a directory, a SQLite file) or, for memory, none.
func openFence(ctx context.Context, kind, path string) (storageguard.Fence, error) {
	switch kind {
	case "bolt":
		return openBoltFence(path)
	case "memory":
		return storageguard.NewMemory(), nil
	case "dir", "proxy-dir":
		return openDirFence(path + ".fence.d")
	case "sqlite-do", "proxy-sqlite":
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		db, err := sql.Open("sqlite", "file:"+path+".fence.db?"+q.Encode())
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		f, err := sqlfence.Open(ctx, db, sqlfence.SQLite)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
		return dbFence{f, db}, nil
	}
	return nil, fmt.Errorf("store: no fence for backend %q", kind)
}

// dbFence closes its database with the fence.
type dbFence struct {
	*sqlfence.Fence
	db *sql.DB
}

func (f dbFence) Close() error { return errors.Join(f.Fence.Close(), f.db.Close()) }

// openPostgres opens the postgres backend: records and fence in the
// database at dsn, through sessions named PostgresApp unless the DSN names
// them.
func openPostgres(ctx context.Context, dsn string) (*sqliteBackend, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: -data is not a PostgreSQL URL: %w", err)
	}
	q := u.Query()
	if q.Get("application_name") == "" {
		q.Set("application_name", PostgresApp)
	}
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: postgres: create records table: %w", err)
	}
	f, err := sqlfence.Open(ctx, db, sqlfence.Postgres)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	return &sqliteBackend{db: db, sf: f, d: sqlfence.Postgres}, nil
}

// delayFunc returns the write delay of cfg: a random sleep below
// WriteDelay, nil without one.
func (cfg storeConfig) delayFunc() func() {
	if cfg.WriteDelay <= 0 {
		return nil
	}
	d := cfg.WriteDelay
	return func() { time.Sleep(rand.N(d)) }
}

// proxiedBackend is a proxy backend: httpfence.NewProxy over a fence, in
// front of an unfenced record service on a loopback listener of its own.
type proxiedBackend struct {
	*boltBackend
	srv     *http.Server
	backend string // the record service's URL
	timeout time.Duration
	log     *log.Logger
}

func openProxied(ctx context.Context, cfg storeConfig) (backend, error) {
	f, err := openFence(ctx, cfg.Backend, cfg.Data)
	if err != nil {
		return nil, err
	}
	bb, err := openRecords(f, cfg.Data)
	if err != nil {
		f.Close()
		return nil, err
	}
	bb.delay = cfg.delayFunc()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		bb.close()
		return nil, fmt.Errorf("store: record service: %w", err)
	}
	p := &proxiedBackend{boltBackend: bb, backend: "http://" + ln.Addr().String(), timeout: cfg.ProxyTimeout,
		log: slogLogger(cfg)}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serveRecord), ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// serveRecord is the record service behind the proxy: it writes whatever
// reaches it, under the epoch of the token the proxy verified and
// forwarded. It is unfenced: only the proxy in front orders its writes.
func (p *proxiedBackend) serveRecord(w http.ResponseWriter, r *http.Request) {
	ep, err := epoch.Plain().Verify(r.Header.Get(epoch.Header))
	if err != nil {
		writeError(w, http.StatusBadRequest, "records: "+err.Error())
		return
	}
	var req writeRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "store: "+err.Error())
		return
	}
	if req.Resource == "" {
		req.Resource = DefaultResource
	}
	if want := resourceParam(r); req.Resource != want {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("records: body names resource %q, the fenced request %q", req.Resource, want))
		return
	}
	if p.delay != nil {
		p.delay()
	}
	// The proxy cancels a request it cut off at its timeout, and from then
	// on no longer holds the fence for it: a record service must not apply
	// it (the proxy's documented non-guarantee; this check narrows the
	// window to the put itself).
	if err := r.Context().Err(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "records: request cut off: "+err.Error())
		return
	}
	if err := p.put(r.Context(), record{Resource: req.Resource, Value: req.Value, Epoch: ep}); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	accept(w, ep)
}

// resourceParam is the resource a proxied write names in its query.
func resourceParam(r *http.Request) string {
	if res := r.URL.Query().Get("resource"); res != "" {
		return res
	}
	return DefaultResource
}

// fencedWriter is the proxy in front of the record service.
func (p *proxiedBackend) fencedWriter(g *storageguard.Guard) http.Handler {
	target, _ := url.Parse(p.backend)
	return httpfence.NewProxy(g, target, httpfence.ProxyConfig{
		Resource:     resourceParam,
		Timeout:      p.timeout,
		ForwardToken: true,
		ErrorLog:     p.log,
	})
}

// raw reports that writes reach this backend's writer unparsed: the proxy
// must be the first to read the body.
func (p *proxiedBackend) raw() bool { return true }

func (p *proxiedBackend) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(p.srv.Shutdown(ctx), p.boltBackend.close())
}

// releaseEarlyBackend is the control experiment of the fault suite: its
// fence admits an epoch (checking and raising it) but lets go before the
// write runs, as a fence that dropped its hold early would. The suite must
// catch the writes of deposed leaders that land after their successors'.
type releaseEarlyBackend struct{ backend }

// fence is the store's fence as the Guard sees it: one that releases
// early. (The Tx backends do not write through the Guard's fence: the
// control runs on a Middleware backend.)
func (b releaseEarlyBackend) fence() storageguard.Fence { return releaseEarly{b.backend.fence()} }

func (b releaseEarlyBackend) raw() bool {
	r, ok := b.backend.(rawBackend)
	return ok && r.raw()
}

// releaseEarly is a Fence whose Do admits ep and then runs write outside
// any hold.
type releaseEarly struct{ storageguard.Fence }

func (f releaseEarly) Do(ctx context.Context, r string, ep epoch.Epoch, write func(context.Context) error) error {
	if err := f.Fence.Admit(ctx, r, ep); err != nil {
		return err
	}
	return write(ctx)
}

// rawBackend is a backend whose writer must get the request body unread.
type rawBackend interface{ raw() bool }

// slogLogger is the store's logger for the proxy's ErrorLog (cut-off
// requests, lost fences).
func slogLogger(cfg storeConfig) *log.Logger {
	if cfg.Log == nil {
		return log.New(io.Discard, "", 0)
	}
	return slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn)
}
