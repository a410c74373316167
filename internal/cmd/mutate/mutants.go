package main

// mutant is one planted bug: Original, found exactly once in File, is
// replaced by Replacement, and Packages' tests (only those matching Run,
// if set) must then fail.
type mutant struct {
	ID          string
	File        string
	Original    string
	Replacement string
	Packages    []string
	Run         string // -run pattern; empty: every test of Packages
	What        string
	// Owner names the branch whose tests are meant to kill it,
	// when that is not this one.
	Owner string
}

// Packages shared by many mutants.
var (
	// runAdmission: admission's tests (not TestRefusedLink*, the waker's:
	// under load an attempt they could not judge killed E4 by chance).
	runAdmission = "TestAdmission|TestAttack|TestHostile|TestRefusal|TestTermWindow|TestRenewal|TestForged|TestValidConfiguration"

	pkEpoch    = []string{"./epoch/"}
	pkElection = []string{"./election/"}
	pkCore     = []string{"./storageguard/", "./storageguard/fencetest/"}
	pkCached   = []string{"./storageguard/", "./storageguard/boltfence/"}
	pkPg       = []string{"./storageguard/pgfence/"}
	pkSQL      = []string{"./storageguard/sqlfence/"}
	pkDir      = []string{"./storageguard/dirfence/"}
	pkHTTP     = []string{"./storageguard/httpfence/"}
	pkTrigger  = []string{"./storageguard/pgtrigger/"}
)

// mutants: the first measurement's survivors (EP3, E1b, E3, T3, T3b, D4, D5) and weak
// kills (P1, E5, H1, Q1) first, then realistic one-to-three-line bugs in
// the epoch rules, the election's triple read and confirmation, admission,
// the fence rule and each fence's raise, lock and sync, and the HTTP hold.
var mutants = []mutant{
	// The first measurement's survivors and weak kills.
	{ID: "EP3", File: "epoch/token.go", Packages: pkEpoch,
		What:        "an HMAC codec falls back on its signing key for an unknown key ID",
		Original:    "\tk, ok := c.keys[id]\n\tif !ok {\n",
		Replacement: "\tk, ok := c.keys[id]\n\tif !ok && c.sign != nil {\n\t\tk, ok = c.sign, true\n\t}\n\tif !ok {\n"},
	{ID: "E1b", File: "election/epoch.go", Packages: pkElection, Run: "TestEpoch|TestStepDown",
		What:        "Epoch builds the epoch from CurrentTerm read again after the triple read",
		Original:    "return epoch.Epoch{Cluster: e.cfg.Cluster, Term: t, Leader: e.cfg.ID}, nil",
		Replacement: "_ = t\n\t\treturn epoch.Epoch{Cluster: e.cfg.Cluster, Term: e.raft.CurrentTerm(), Leader: e.cfg.ID}, nil"},
	{ID: "E3", File: "election/wake.go", Packages: pkElection, Run: "TestStandOnRefused|TestPlaceAmong|TestRefusedLinkKeepsLeader",
		What:        "a follower stands on a refused probe without a majority's evidence",
		Original:    "\tcase 1+lost < p.quorum:\n",
		Replacement: "\tcase false:\n"},
	{ID: "T3", File: "storageguard/pgtrigger/guard.sql", Packages: pkTrigger, Owner: "i26p",
		What:        "the trigger's first stale check off by one",
		Original:    "\n    ELSIF v.term < h_term THEN",
		Replacement: "\n    ELSIF v.term + 1 < h_term THEN"},
	{ID: "T3b", File: "storageguard/pgtrigger/guard.sql", Packages: pkTrigger, Owner: "i26p",
		What:        "the trigger's stale check in the raise path off by one",
		Original:    "\n  ELSIF v.term < h_term THEN",
		Replacement: "\n  ELSIF v.term + 1 < h_term THEN"},
	{ID: "D4", File: "storageguard/dirfence/file.go", Packages: pkDir, Owner: "i31",
		What:        "load trusts a record another process wrote without syncing the file",
		Original:    "\t\tif err := d.syncUnless(skipLoadData, e.f, syncData); err != nil {\n\t\t\t// Never trust",
		Replacement: "\t\tif err := error(nil); err != nil {\n\t\t\t// Never trust"},
	{ID: "D5", File: "storageguard/dirfence/file.go", Packages: pkDir, Owner: "i31",
		What:        "load trusts a record without syncing the directory",
		Original:    "\t\tif !e.synced {\n\t\t\tif err := d.syncUnless(skipLoadDir, d.dirFile, syncDir); err != nil {\n\t\t\t\te.closeFile()",
		Replacement: "\t\tif false {\n\t\t\tif err := d.syncUnless(skipLoadDir, d.dirFile, syncDir); err != nil {\n\t\t\t\te.closeFile()"},
	{ID: "P1", File: "storageguard/pgfence/pgfence.go", Packages: pkPg,
		What:        "pgfence raises without locking the fence row FOR UPDATE",
		Original:    "\" FROM termfence_fence WHERE resource = $1 FOR UPDATE\"",
		Replacement: "\" FROM termfence_fence WHERE resource = $1\""},
	{ID: "E5", File: "election/admission.go", Packages: pkElection, Run: runAdmission, Owner: "i25",
		What:        "admission lets a non-voter's vote request through",
		Original:    "!ok || s.Suffrage != raft.Voter || s.Address != addr {",
		Replacement: "!ok || s.Address != addr {"},
	{ID: "H1", File: "storageguard/httpfence/proxy.go", Packages: pkHTTP, Owner: "i26h",
		What:        "the proxy without its client deadline",
		Original:    "rc.SetReadDeadline(deadline), rc.SetWriteDeadline(deadline.Add(writeGrace))",
		Replacement: "rc.SetReadDeadline(time.Time{}), rc.SetWriteDeadline(time.Time{})"},
	// Q1's killing test is the conformance suite's RaiseReturns (a 15 s
	// bound); the power-loss tests before it in file order would each
	// wait for acknowledgements (2 minutes) first.
	{ID: "Q1", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQL, Run: "^(TestSQLite|TestPostgres)$",
		What:        "sqlfence's high-water update outside the transaction",
		Original:    "if _, err := tx.ExecContext(ctx, f.qUpdate, ep.Cluster, int64(ep.Term), ep.Leader, key); err != nil {",
		Replacement: "if _, err := f.db.ExecContext(ctx, f.qUpdate, ep.Cluster, int64(ep.Term), ep.Leader, key); err != nil {"},

	// epoch: validation and tokens.
	{ID: "EP-term0", File: "epoch/epoch.go", Packages: pkEpoch, What: "Validate accepts term 0",
		Original: "\tif e.Term == 0 {\n", Replacement: "\tif false {\n"},
	{ID: "EP-maxterm", File: "epoch/epoch.go", Packages: pkEpoch, What: "Validate accepts MaxTerm+1",
		Original: "\tif e.Term > MaxTerm {\n", Replacement: "\tif e.Term > MaxTerm+1 {\n"},
	{ID: "EP-name", File: "epoch/epoch.go", Packages: pkEpoch, What: "names may be one byte longer",
		Original: "\tif len(s) > MaxNameLen {\n", Replacement: "\tif len(s) > MaxNameLen+1 {\n"},
	{ID: "EP-unsigned", File: "epoch/token.go", Packages: pkEpoch, What: "an unsigned token passes a signed verifier",
		Original: "\t\treturn token{}, nil, ErrUnsigned\n", Replacement: "\t\treturn t, nil, nil\n"},
	{ID: "EP-alg", File: "epoch/token.go", Packages: pkEpoch, What: "the algorithm field is not checked",
		Original: "\tif alg != \"\" && t.alg != alg {\n", Replacement: "\tif false {\n"},
	{ID: "EP-hmac", File: "epoch/token.go", Packages: pkEpoch, What: "an HMAC mismatch is accepted",
		Original: "\tif subtle.ConstantTimeCompare(k.mac(sum[:0], t.text), sig) != 1 {\n", Replacement: "\tif subtle.ConstantTimeCompare(k.mac(sum[:0], t.text), sig) != 1 && false {\n"},
	{ID: "EP-ed25519", File: "epoch/token.go", Packages: pkEpoch, What: "any Ed25519 signature is accepted",
		Original: "\t\tif ed25519.Verify(p, msg, sig) {\n", Replacement: "\t\tif ed25519.Verify(p, msg, sig) || len(sig) > 0 {\n"},

	// election: triple read, confirmation, waker.
	{ID: "E1", File: "election/epoch.go", Packages: pkElection, Run: "TestEpoch|TestStepDown|TestTripleRead",
		What: "the triple read does not compare the two terms", Original: "return t1, leader && t1 == t2", Replacement: "return t1, leader && t2 > 0"},
	{ID: "E1c", File: "election/epoch.go", Packages: pkElection, Run: "TestEpoch|TestStepDown",
		What: "held trusts the published term alone", Original: "return p, ok && p != 0 && t == p", Replacement: "return p, p != 0 && (ok || t >= 0)"},
	{ID: "E2", File: "election/epoch.go", Packages: pkElection, Run: "TestStepDown|TestEpoch|TestConfirm",
		What: "confirm publishes after a step-down between win and commit", Original: "\t\tif !ok || t1 != t0 {\n", Replacement: "\t\tif !ok {\n"},
	{ID: "E2b", File: "election/epoch.go", Packages: pkElection, Run: "TestStepDown|TestEpoch",
		What: "an older term's commit counts as this term's", Original: "err == nil && l.Term == t0 {", Replacement: "err == nil && l.Term <= t0 {"},
	{ID: "E2c", File: "election/epoch.go", Packages: pkElection, Run: "TestEpoch|TestMaxTerm|TestTerm|TestConfirm",
		What: "an epoch is handed out above MaxTerm", Original: "\t\tif t1 > epoch.MaxTerm {\n", Replacement: "\t\tif t1 > epoch.MaxTerm+1 {\n"},
	{ID: "E2d", File: "election/epoch.go", Packages: pkElection, Run: "TestEpoch|TestStepDown|TestConfirm",
		What: "confirm does not withdraw on losing leadership", Original: "\t\tif !e.won.Load() || e.view.State() != raft.Leader {\n\t\t\te.unpublish()\n", Replacement: "\t\tif !e.won.Load() || e.view.State() != raft.Leader {\n"},
	{ID: "E3b", File: "election/wake.go", Packages: pkElection, Run: "TestStandOnRefused|TestPlaceAmong",
		What: "a follower before the first that can win stands", Original: "\tif !refused || !p.voter || p.rank < p.winner {\n", Replacement: "\tif !refused || !p.voter {\n"},
	{ID: "E3c", File: "election/wake.go", Packages: pkElection, Run: "TestStandOnRefused|TestPlaceAmong",
		What: "the first follower that can win off by one", Original: "p.winner = max(min(len(voters)/2, len(ids)-1), 0)", Replacement: "p.winner = max(min(len(voters)/2-1, len(ids)-1), 0)"},
	{ID: "E4", File: "election/admission.go", Packages: pkElection, Run: runAdmission, Owner: "i25",
		What: "admission lets a term above MaxTerm through", Original: "\tcase t > epoch.MaxTerm:\n\t\treturn false\n", Replacement: "\tcase t > epoch.MaxTerm+1:\n\t\treturn false\n"},
	{ID: "E6", File: "election/admission.go", Packages: pkElection, Run: runAdmission, Owner: "i25",
		What: "admission lets a non-member append", Original: "\tcase !ok || s.Address != addr:\n\t\te.Reason = RefusedNotMember\n", Replacement: "\tcase ok && s.Address != addr:\n\t\te.Reason = RefusedNotMember\n"},
	{ID: "E7", File: "election/admission.go", Packages: pkElection, Run: runAdmission + "|TestTimeoutNow", Owner: "i25",
		What: "a TimeoutNow from a non-leader is admitted", Original: "leaderID == \"\" || leaderID != id || leaderAddr != addr || !ok", Replacement: "leaderID == \"\" || leaderAddr == \"\" || !ok"},

	// The fence rule and the cached fence.
	{ID: "R1", File: "storageguard/rule.go", Packages: pkCore, What: "Decide accepts an older term",
		Original: "\tcase presented.Term < highest.Term:\n", Replacement: "\tcase presented.Term+1 < highest.Term:\n"},
	{ID: "R2", File: "storageguard/rule.go", Packages: pkCore, What: "Decide accepts the highest term from another leader",
		Original: "\tcase presented.Leader != highest.Leader:\n", Replacement: "\tcase false:\n"},
	{ID: "R3", File: "storageguard/rule.go", Packages: pkCore, What: "Decide accepts another cluster's epoch",
		Original: "\tif presented.Cluster != highest.Cluster {\n", Replacement: "\tif false {\n"},
	{ID: "R4", File: "storageguard/rule.go", Packages: pkCore, What: "resource names may be one byte longer",
		Original: "\tif len(resource) > MaxResourceLen {\n", Replacement: "\tif len(resource) > MaxResourceLen+1 {\n"},
	{ID: "C1", File: "storageguard/cached.go", Packages: pkCached, What: "the cached fence raises without waiting for older writes",
		Original: "\t\tok, err := e.g.Lock(ctx, gen)\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}", Replacement: "\t\tok, err, _ := true, ctx.Err(), gen\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}"},
	{ID: "C2", File: "storageguard/cached.go", Packages: pkCached, What: "the cached fence trusts its cache after a failed Raise",
		Original: "\t\t\te.loaded = false\n\t\t\treturn err\n", Replacement: "\t\t\treturn err\n"},
	{ID: "C3", File: "storageguard/cached.go", Packages: pkCached, What: "the cached fence does not persist a raise",
		Original: "\t\tif err := s.Raise(ctx, resource, ep); err != nil {\n", Replacement: "\t\tif err := error(nil); err != nil {\n"},
	{ID: "C4", File: "storageguard/cached.go", Packages: pkCached, What: "the hot path runs a write for a refused epoch",
		Original: "\t\t\tif err != nil {\n\t\t\t\te.g.Unshare()\n\t\t\t\treturn err\n\t\t\t}\n\t\t\tif !d.Raise {", Replacement: "\t\t\tif err != nil || !d.Raise {"},

	// pgfence and sqlfence.
	{ID: "P2", File: "storageguard/pgfence/pgfence.go", Packages: pkPg, What: "pgfence's same-epoch transactions take no lock",
		Original: "\t\t\" FROM termfence_fence WHERE resource = $1 FOR SHARE\"\n", Replacement: "\t\t\" FROM termfence_fence WHERE resource = $1\"\n"},
	{ID: "P3", File: "storageguard/pgfence/pgfence.go", Packages: pkPg, What: "pgfence does not write the raise",
		Original: "\t\tif _, err := tx.Exec(ctx, qUpdate, ep.Cluster, int64(ep.Term), ep.Leader, key); err != nil {\n", Replacement: "\t\tif false {\n"},
	{ID: "P4", File: "storageguard/pgfence/pgfence.go", Packages: pkPg, What: "pgfence's Do holds no lock while the write runs",
		Original: "\t\tb.Queue(qSelectHold, key)\n", Replacement: "\t\tb.Queue(qSelect, key)\n"},
	{ID: "Q2", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQL, What: "sqlfence raises on PostgreSQL without FOR UPDATE",
		Original: "\t\t\t\" FROM termfence_fence WHERE resource = $1 FOR UPDATE\"\n", Replacement: "\t\t\t\" FROM termfence_fence WHERE resource = $1\"\n"},
	{ID: "Q3", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQL, What: "sqlfence's same-epoch transactions take no lock on PostgreSQL",
		Original: "\t\t\t\" FROM termfence_fence WHERE resource = $1 FOR SHARE\"\n", Replacement: "\t\t\t\" FROM termfence_fence WHERE resource = $1\"\n"},
	{ID: "Q4", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQL, What: "sqlfence raises over a SQLite connection that does not sync",
		Original: "\tif f.d == SQLite {\n\t\t// Every transaction, not only a raise:", Replacement: "\tif false {\n\t\t// Every transaction, not only a raise:"},

	// dirfence and boltfence.
	{ID: "D1", File: "storageguard/dirfence/file.go", Packages: pkDir, What: "dirfence does not sync a raise",
		Original: "\tif err := d.syncUnless(skipRaiseData, e.f, syncData); err != nil {\n\t\td.unraise(e, target)\n", Replacement: "\tif err := error(nil); err != nil {\n\t\td.unraise(e, target)\n"},
	{ID: "D2", File: "storageguard/dirfence/file.go", Packages: pkDir, What: "dirfence reads the older of its two slots",
		Original: "ok && (slot < 0 || s > seq) {", Replacement: "ok && (slot < 0 || s < seq) {"},
	{ID: "B1", File: "storageguard/boltfence/boltfence.go", Packages: []string{"./storageguard/boltfence/"}, What: "boltfence does not write the raise",
		Original: "\t\treturn tx.Bucket(bucket).Put([]byte(resource), v)\n", Replacement: "\t\t_ = v\n\t\treturn nil\n"},

	// The Guard and the HTTP hold.
	{ID: "G1", File: "storageguard/guard.go", Packages: []string{"./storageguard/"}, What: "the Guard admits a token that did not verify",
		Original: "\tif err == nil {\n\t\tep, err = g.verify(resource, token)\n\t}\n", Replacement: "\tif err == nil {\n\t\tep, _ = g.verify(resource, token)\n\t}\n"},
	{ID: "G2", File: "storageguard/guard.go", Packages: []string{"./storageguard/"}, What: "the Guard accepts another cluster's token",
		Original: "\tif want := g.clusterOf(resource); want != \"\" && ep.Cluster != want {\n", Replacement: "\tif want := g.clusterOf(resource); false && ep.Cluster != want {\n"},
}
