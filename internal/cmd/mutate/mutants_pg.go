package main

// Packages and -run patterns of the PostgreSQL set.
var (
	pkSQLFence  = []string{"./storageguard/sqlfence/"}
	pkPgFence   = []string{"./storageguard/pgfence/"}
	pkPgTrigger = []string{"./storageguard/pgtrigger/"}
	runPgRaise  = "TestPostgresRaise|TestPgfenceRaise|TestGuardRaise|TestRaisesSurviveServerCrash"
	runPgRepl   = "TestReplicatedWritesRefused|TestPreparedTransactionHolds"
)

// pgMutants are bugs planted in the PostgreSQL fences' durable raises and
// their turn (storageguard/internal/pgproto and its users): -set pg. They
// need TERMFENCE_POSTGRES_DSN and PostgreSQL's binaries.
var pgMutants = []mutant{
	{ID: "PG-durable", File: "storageguard/internal/pgproto/pgproto.go", Packages: append(append(append([]string(nil), pkSQLFence...), pkPgFence...), pkPgTrigger...), Run: runPgRaise,
		What:        "a raise commits as the session says (synchronous_commit off)",
		Original:    "\"THEN pg_catalog.set_config('synchronous_commit', 'on', true) END\"",
		Replacement: "\"THEN NULL END\""},
	{ID: "PG-sqlfence-refn", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQLFence, Run: runPgRaise,
		What:        "sqlfence's Tx lets its fn lower synchronous_commit under a raise",
		Original:    "\t\tif mode == exclusive && f.d == Postgres {",
		Replacement: "\t\tif false {"},
	{ID: "PG-pgfence-refn", File: "storageguard/pgfence/pgfence.go", Packages: pkPgFence, Run: runPgRaise,
		What:        "pgfence's Tx lets its fn lower synchronous_commit under a raise",
		Original:    "\t\tif exclusive {\n\t\t\tif _, err := tx.Exec(ctx, qDurable); err != nil {",
		Replacement: "\t\tif false {\n\t\t\tif _, err := tx.Exec(ctx, qDurable); err != nil {"},
	{ID: "PG-guard-durable", File: "storageguard/pgtrigger/guard.sql", Packages: pkPgTrigger, Run: runPgRaise,
		What:        "a raise of the guarded fence table commits as the writer's session says",
		Original:    "  -- synchronous_commit on, whatever the writer's session says.\n  PERFORM @durable@;",
		Replacement: "  -- synchronous_commit on, whatever the writer's session says.\n  PERFORM 1;"},
	{ID: "PG-turn", File: "storageguard/internal/pgproto/pgproto.go", Packages: append(append(append([]string(nil), pkSQLFence...), pkPgFence...), pkPgTrigger...), Run: runPgRaise,
		What:        "the same epoch takes no turn: FOR SHARE is granted ahead of a waiting raise",
		Original:    "\treturn \"pg_catalog.pg_advisory_xact_lock_shared(\" + LockKey(alias+\".tableoid\", alias+\".resource\") + \") IS NULL\"",
		Replacement: "\treturn \"false\""},
	{ID: "PG-turn-raise", File: "storageguard/internal/pgproto/pgproto.go", Packages: append(append(append([]string(nil), pkSQLFence...), pkPgFence...), pkPgTrigger...), Run: runPgRaise,
		What:        "a raise does not ask for its turn: later sharers get in ahead of it",
		Original:    "\treturn \"pg_catalog.pg_advisory_xact_lock(\" + LockKey(alias+\".tableoid\", alias+\".resource\") + \") IS NULL\"",
		Replacement: "\treturn \"false\""},
	{ID: "PG-guard-turn", File: "storageguard/pgtrigger/guard.sql", Packages: pkPgTrigger, Run: runPgRaise,
		What:        "the guard's fast path takes no turn",
		Original:    "  PERFORM @lockshared@\n",
		Replacement: "  PERFORM 1\n"},
	{ID: "PG-replica", File: "storageguard/pgtrigger/install.go", Packages: pkPgTrigger, Run: runPgRepl,
		What:        "no row trigger: the apply worker's replicated writes land unchecked",
		Original:    "\t\tif r.kind == \"r\" {\n",
		Replacement: "\t\tif false {\n"},
	{ID: "PG-prepared-audit", File: "storageguard/pgtrigger/audit.go", Packages: pkPgTrigger, Run: runPgRepl,
		What:        "Audit does not see prepared transactions",
		Original:    "  JOIN pg_catalog.pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.pid IS NULL",
		Replacement: "  JOIN pg_catalog.pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.pid IS NOT NULL"},
	{ID: "PG-nested", File: "storageguard/internal/txretry/held.go", Packages: append(append([]string{"./storageguard/internal/txretry/"}, pkSQLFence...), pkPgFence...), Run: "TestNested|NestedDoWithRaisePending",
		What:        "a Do nested in a Do's write takes its turn behind a pending raise (deadlock until its context ends)",
		Original:    "\tif h == nil || !h.active.Load() {",
		Replacement: "\tif true {"},
	{ID: "PG-nested-escape", File: "storageguard/internal/txretry/held.go", Packages: append(append([]string{"./storageguard/internal/txretry/"}, pkSQLFence...), pkPgFence...), Run: "TestNested|NestedDoWithRaisePending",
		What:        "a write's context kept past the write still counts as a hold",
		Original:    "\t\tdefer h.active.Store(false)",
		Replacement: "\t\tdefer h.active.Store(true)"},
}
