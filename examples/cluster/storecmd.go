package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// storeMain runs the `store` subcommand: the fenced store, until ctx ends
// (SIGINT, SIGTERM).
func storeMain(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("store", stderr)
	httpAddr := fs.String("http", "127.0.0.1:7000", "HTTP listen address (port 0: any free port; see -addr-file)")
	data := fs.String("data", "", "the store's file: SQLite database, or Bolt fence file; postgres, postgres-trigger: the PostgreSQL DSN (required)")
	backendName := fs.String("backend", "sqlite", "storage: sqlite, bolt, or postgres-trigger (a PostgreSQL table guarded by pgtrigger: every write path is checked by the database); the fault suite also uses memory, dir, sqlite-do, postgres, proxy-sqlite, proxy-dir")
	pgSchema := fs.String("pg-schema", "termfence_demo", "postgres-trigger: the schema of the records table (the guard's private schema is this with _private)")
	cluster := fs.String("cluster", "demo", "the election group whose epochs this store admits")
	keyFile := fs.String("token-key", "", "HMAC key file shared with the nodes (without it tokens are unsigned: a warning is logged)")
	unfenced := fs.Bool("unfenced", false, "skip the epoch check (control experiment only: shows the lost update)")
	addrFile := fs.String("addr-file", "", "write the actual listen address to this file once listening")
	writeDelay := fs.Duration("write-delay", 0, "fault injection: each fenced write waits a random time below this while it holds the fence")
	releaseEarly := fs.Bool("release-early", false, "fault suite control: the fence lets go before the write runs (shows what the suite catches)")
	proxyTimeout := fs.Duration("proxy-timeout", 0, "the proxy backends' httpfence timeout (0: its default)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cluster store -data FILE [flags]\n\nThe fenced store outside the consensus group.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel, "role", "store")
	if err != nil {
		return err
	}
	if *data == "" {
		fmt.Fprintln(stderr, "store: -data is required: the SQLite or Bolt file (or, for the postgres backends, the DSN)\n(cluster store -h lists every flag)")
		return errUsage
	}
	codec, err := loadCodec(*keyFile, log)
	if err != nil {
		return err
	}
	var key []byte
	if *keyFile != "" {
		if key, err = readKey(*keyFile); err != nil {
			return err
		}
	}
	st, err := openStore(ctx, storeConfig{
		Backend: *backendName, Data: *data, Cluster: *cluster, Unfenced: *unfenced,
		Verifier: codec, Log: log, TokenKey: key, PGSchema: *pgSchema,
		WriteDelay: *writeDelay, ReleaseEarly: *releaseEarly, ProxyTimeout: *proxyTimeout,
	})
	if err != nil {
		return err
	}
	defer st.Close()

	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("store: listen %s: %w", *httpAddr, err)
	}
	srv := &http.Server{Handler: st.Handler(), ReadHeaderTimeout: serverHeaderTimeout, IdleTimeout: serverIdleTimeout,
		ErrorLog: serverErrorLog(log, "store")}
	if err := writeAddrFile(*addrFile, ln.Addr().String()); err != nil {
		ln.Close()
		return err
	}
	shown := *data
	if st.cfg.Backend == "postgres-trigger" {
		shown = "PostgreSQL schema " + *pgSchema // the DSN may hold a password
	}
	log.Info("store listening", "http", ln.Addr().String(), "backend", st.cfg.Backend, "data", shown,
		"cluster", *cluster, "fenced", !*unfenced, "signed_tokens", *keyFile != "")
	return serve(ctx, srv, ln)
}

// serve runs srv on ln until ctx ends, then shuts it down gracefully
// (bounded).
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
