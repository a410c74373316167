package pgtrigger

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
)

// rollbackTimeout bounds the rollback of a transaction Begin could not
// start: a connection that cannot roll back in time is closed.
const rollbackTimeout = 5 * time.Second

// Setting is the run-time parameter through which a transaction presents
// its token to the guard: SET LOCAL termfence.token = '<token>'.
const Setting = "termfence.token"

// setToken sets Setting for the rest of the transaction.
const setToken = "SELECT pg_catalog.set_config('" + Setting + "', $1, true)"

// Present makes the statements that follow in tx present token to the
// guard, as SET LOCAL termfence.token does: until tx ends, every write to a
// guarded table is checked against token's epoch. Use it in pgfence's Tx
// with the token of the epoch given to Tx.
func Present(ctx context.Context, tx pgx.Tx, token string) error {
	if tx == nil {
		return errors.New("pgtrigger: Present: nil transaction")
	}
	_, err := tx.Exec(ctx, setToken, token)
	return err
}

// Begin starts a transaction on pool that presents token (see Present), in
// the round trip of BEGIN: a Go writer that needs no fence of its own
// writes to guarded tables in it and commits, and the guard does the
// check. The caller must end the transaction (Commit or Rollback).
//
// A token spelled in the token alphabet (every valid token is) travels
// inside the one simple-protocol message "BEGIN; SET LOCAL ...", as psql
// would send it: one parse on the server and no more than a plain BEGIN
// costs. Any other string is sent as a query parameter instead (BEGIN and
// set_config in one batch), never spliced into SQL, and the guard refuses
// it at the first write.
func Begin(ctx context.Context, pool *pgxpool.Pool, token string) (pgx.Tx, error) {
	if pool == nil {
		return nil, errors.New("pgtrigger: Begin: nil pool")
	}
	if literalSafe(token) {
		return pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL " + Setting + " = '" + token + "'"})
	}
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(setToken, token)
	br := pool.SendBatch(ctx, &b)
	tx := br.Tx()
	_, err := br.Exec() // BEGIN
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		tx.Rollback(rctx)
		return nil, err
	}
	return tx, nil
}

// literalSafe reports whether s is a non-empty string of at most
// epoch.MaxTokenLen bytes of the token alphabet (docs/TOKEN.md: names
// [A-Za-z0-9._-], '/', ':', base64url), so that '<s>' is a string literal
// whatever the server's standard_conforming_strings: no quote, no
// backslash, nothing a literal could end at or escape with.
func literalSafe(s string) bool {
	if s == "" || len(s) > epoch.MaxTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '-' || c == '/' || c == ':':
		default:
			return false
		}
	}
	return true
}
