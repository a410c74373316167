package pgtrigger_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// The token vectors of docs/TOKEN.md, answered by the verifier inside the
// database: the guard must accept and refuse exactly what package epoch's
// HMAC verifier does.

type vectorResult struct {
	Epoch *struct{ Cluster, Term, Leader string } `json:"epoch"`
	Error string                                  `json:"error"`
}

type tokenVector struct {
	Name  string       `json:"name"`
	Hex   string       `json:"hex"`
	Plain vectorResult `json:"plain"`
	HS256 vectorResult `json:"hs256"`
}

type vectorFile struct {
	Keys struct {
		HS256       string `json:"hs256"`
		HS256KeyIDs []struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		} `json:"hs256_key_ids"`
	} `json:"keys"`
	Tokens []tokenVector `json:"tokens"`
}

// installVectorKeys installs the guard on table ledger with the vectors'
// hs256 keys for cluster payments: the key without an ID and the keys with
// IDs.
func installVectorKeys(t *testing.T, d *db, f vectorFile) {
	t.Helper()
	k, err := hex.DecodeString(f.Keys.HS256)
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.config("ledger")
	cfg.HMACKey = k
	d.install(t, cfg)
	if len(f.Keys.HS256KeyIDs) == 0 {
		t.Fatal("the vectors have no keys with IDs")
	}
	for _, x := range f.Keys.HS256KeyIDs {
		secret, err := hex.DecodeString(x.Key)
		if err != nil {
			t.Fatal(err)
		}
		d.exec(t, "INSERT INTO "+d.private+".hmac_key (cluster, key_id, key) VALUES ('payments', $1, $2)", x.ID, secret)
	}
}

// codeFor is the SQLSTATE the guard raises for a verifier's answer ("" for
// an epoch).
func codeFor(r vectorResult) string {
	switch r.Error {
	case "":
		return ""
	case "malformed":
		return pgtrigger.CodeMalformed
	case "unsigned":
		return pgtrigger.CodeUnsigned
	case "bad_signature":
		return pgtrigger.CodeBadSignature
	}
	return "unknown error kind " + r.Error
}

type verified struct {
	code, cluster, leader string
	term                  int64
}

// verifyAll runs the guard's verify over tokens in one query.
func verifyAll(t *testing.T, d *db, tokens []string, allowPlain bool) []verified {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `
SELECT coalesce(v.code, ''), coalesce(v.cluster, ''), coalesce(v.term, 0), coalesce(v.leader, '')
FROM unnest($1::text[]) WITH ORDINALITY AS t(tok, i), LATERAL `+d.private+`.verify(t.tok, 'payments', $2) v
ORDER BY t.i`, tokens, allowPlain)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (verified, error) {
		var v verified
		return v, row.Scan(&v.code, &v.cluster, &v.term, &v.leader)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(tokens) {
		t.Fatalf("%d answers for %d tokens", len(got), len(tokens))
	}
	return got
}

// TestTokenVectorsInDatabase: every token vector that PostgreSQL can hold
// as text (valid UTF-8 without NUL) is answered by the guard's verifier as
// the vectors' hs256 column says (the empty token is CodeNoToken); with
// AllowPlain, unsigned tokens as the plain column says. Every one-byte
// change of a valid hs256 vector to another printable ASCII byte (or 0x01,
// newline, DEL) is refused, with and without AllowPlain.
func TestTokenVectorsInDatabase(t *testing.T) {
	d := newDB(t)
	b, err := os.ReadFile("../../docs/token-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	d.exec(t, "CREATE TABLE ledger (id int)")
	installVectorKeys(t, d, f)

	var toks []string
	var vecs []tokenVector
	skipped := 0
	for _, v := range f.Tokens {
		raw, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(raw) || strings.IndexByte(string(raw), 0) >= 0 {
			skipped++ // a session cannot present it: SET fails before the guard runs
			continue
		}
		toks = append(toks, string(raw))
		vecs = append(vecs, v)
	}
	for _, allowPlain := range []bool{false, true} {
		got := verifyAll(t, d, toks, allowPlain)
		for i, v := range vecs {
			want := v.HS256
			if allowPlain && !strings.HasPrefix(toks[i], "tf1:") && !strings.Contains(toks[i], ":") {
				want = v.Plain
			}
			code := codeFor(want)
			if toks[i] == "" {
				code = pgtrigger.CodeNoToken
			}
			if e := v.Plain.Epoch; e != nil && (want.Epoch != nil || want.Error == "unsigned") {
				if term, err := strconv.ParseUint(e.Term, 10, 64); err != nil || term > maxTerm {
					// A text form above the guard's term bound is
					// malformed there.
					code, want = pgtrigger.CodeMalformed, vectorResult{Error: "malformed"}
				}
			}
			g := got[i]
			if g.code != code {
				t.Errorf("allowPlain=%v %q: SQLSTATE %q, want %q", allowPlain, v.Name, g.code, code)
				continue
			}
			if want.Epoch != nil && (g.cluster != want.Epoch.Cluster || strconv.FormatInt(g.term, 10) != want.Epoch.Term || g.leader != want.Epoch.Leader) {
				t.Errorf("allowPlain=%v %q: epoch %s/%d/%s, want %+v", allowPlain, v.Name, g.cluster, g.term, g.leader, *want.Epoch)
			}
		}
	}

	var changed []string
	for i, v := range vecs {
		if v.HS256.Epoch == nil {
			continue
		}
		tok := []byte(toks[i])
		for p := range tok {
			for c := byte(1); c < 0x80; c++ {
				if c != tok[p] && (c >= ' ' || c == 1 || c == '\n') {
					m := append([]byte(nil), tok...)
					m[p] = c
					changed = append(changed, string(m))
				}
			}
		}
	}
	if len(changed) == 0 {
		t.Fatal("no valid hs256 vector to change")
	}
	for _, allowPlain := range []bool{false, true} {
		for i, g := range verifyAll(t, d, changed, allowPlain) {
			if g.code == "" {
				t.Errorf("allowPlain=%v: %q, one byte changed, verifies as %s/%d/%s", allowPlain, changed[i], g.cluster, g.term, g.leader)
			}
		}
	}
	t.Logf("%d vectors answered (%d skipped: not PostgreSQL text), %d one-byte changes refused", len(vecs), skipped, len(changed))
}

// TestTokenVectorsThroughTrigger: the same one-byte changes, now presented
// to the trigger itself on a write, with the fence at the vector's epoch so
// that its fast path (an authentic token of the highest epoch) is where a
// changed token would slip through: none is admitted, the vector itself is.
func TestTokenVectorsThroughTrigger(t *testing.T) {
	d := newDB(t)
	b, err := os.ReadFile("../../docs/token-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	d.exec(t, "CREATE TABLE ledger (id int)")
	installVectorKeys(t, d, f)
	// try presents each token on its own write, in a subtransaction, and
	// counts the writes admitted.
	d.exec(t, `CREATE FUNCTION try_tokens(toks text[]) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int := 0; tok text;
BEGIN
  FOREACH tok IN ARRAY toks LOOP
    BEGIN
      PERFORM set_config('termfence.token', tok, true);
      INSERT INTO ledger VALUES (1);
      n := n + 1;
    EXCEPTION WHEN sqlstate 'TF001' OR sqlstate 'TF002' OR sqlstate 'TF003' OR sqlstate 'TF004'
              OR sqlstate 'TF005' OR sqlstate 'TF006' OR sqlstate 'TF007' THEN
    END;
  END LOOP;
  RETURN n;
END$$`)
	// The key without an ID and a key with one: both vectors are of
	// epoch payments/34/node-b.
	for _, name := range []string{"hs256", "hs256 with a key ID"} {
		var tok string
		for _, v := range f.Tokens {
			if v.Name == name {
				raw, _ := hex.DecodeString(v.Hex)
				tok = string(raw)
			}
		}
		if tok == "" {
			t.Fatalf("no vector %q", name)
		}
		if n := d.count(t, "SELECT try_tokens($1)", []string{tok}); n != 1 {
			t.Fatalf("the vector %q itself: %d writes admitted, want 1", name, n)
		}
		var changed []string
		for p := range len(tok) {
			for c := byte(1); c < 0x80; c++ {
				if c != tok[p] {
					m := []byte(tok)
					m[p] = c
					changed = append(changed, string(m))
				}
			}
		}
		if n := d.count(t, "SELECT try_tokens($1)", changed); n != 0 {
			t.Fatalf("%d of %d one-byte changes of the vector %q admitted", n, len(changed), name)
		}
		if n := d.count(t, "SELECT try_tokens($1)", []string{tok}); n != 1 {
			t.Fatalf("the vector %q is no longer admitted after the changes", name)
		}
	}
}
