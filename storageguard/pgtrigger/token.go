package pgtrigger

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
func Begin(ctx context.Context, pool *pgxpool.Pool, token string) (pgx.Tx, error) {
	if pool == nil {
		return nil, errors.New("pgtrigger: Begin: nil pool")
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
