package redisfence_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/redisfence"
)

// The token vectors of docs/TOKEN.md, answered by the verifier inside
// Redis (the library's Lua, run by a real redis-server): it must accept and
// refuse exactly what package epoch's HMAC verifier does.

// codes runs the library's check function over tokens in one pipeline,
// against a fence key that holds nothing, and returns each reply's refusal
// code ("" for an admitted token).
func codes(t testing.TB, c *redis.Client, lib string, tokens []string) []string {
	t.Helper()
	ctx := context.Background()
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(tokens))
	for i, tok := range tokens {
		cmds[i] = pipe.FCallRO(ctx, lib+"_check", []string{"vector-fence"}, tok)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isRedisError(err) {
		t.Fatal(err)
	}
	out := make([]string, len(tokens))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		switch {
		case err == nil && v == "OK":
		case err != nil && isRedisError(err):
			out[i], _, _ = strings.Cut(err.Error(), " ")
		default:
			t.Fatalf("token %q: reply %v, %v", tokens[i], v, err)
		}
	}
	return out
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// codeOf is the code the library must answer for package epoch's verdict
// on a token, by a library of cluster.
func codeOf(e epoch.Epoch, err error, cluster string) string {
	switch {
	case err == nil && e.Cluster == cluster:
		return ""
	case err == nil:
		return "TFFOREIGN"
	case errors.Is(err, epoch.ErrUnsigned):
		return "TFUNSIGNED"
	case errors.Is(err, epoch.ErrBadSignature):
		return "TFBADSIG"
	case errors.Is(err, epoch.ErrMalformed):
		return "TFMALFORMED"
	}
	return "unexpected error " + err.Error()
}

// codeOfVector is the code for a vector's hs256 answer.
func codeOfVector(r vectorResult, cluster string) string {
	switch r.Error {
	case "":
		if r.Epoch.Cluster != cluster {
			return "TFFOREIGN"
		}
		return ""
	case "malformed":
		return "TFMALFORMED"
	case "unsigned":
		return "TFUNSIGNED"
	case "bad_signature":
		return "TFBADSIG"
	}
	return "unknown error kind " + r.Error
}

// TestTokenVectorsInRedis: every token vector is answered by the library's
// verifier as the vectors' hs256 column says, by a library of the cluster
// of each valid vector (admitted, and the raise stores exactly the
// vector's epoch) and of another cluster (refused as foreign). Package
// epoch's verifier agrees on each.
func TestTokenVectorsInRedis(t *testing.T) {
	s := newServer(t)
	f, cfg, verifier := vectors(t)
	ctx := context.Background()
	var toks []string
	clusters := map[string]bool{"other": true}
	for _, v := range f.Tokens {
		raw, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, string(raw))
		if v.HS256.Epoch != nil {
			clusters[v.HS256.Epoch.Cluster] = true
		}
	}
	valid := 0
	n := 0
	for cluster := range clusters {
		n++
		lib := "vec" + strconv.Itoa(n)
		c := cfg
		c.Cluster, c.Library = cluster, lib
		if err := redisfence.Install(ctx, s.admin, c); err != nil {
			t.Fatal(err)
		}
		got := codes(t, s.admin, lib, toks)
		for i, v := range f.Tokens {
			want := codeOfVector(v.HS256, cluster)
			if got[i] != want {
				t.Errorf("library of %s, vector %q: code %q, want %q", cluster, v.Name, got[i], want)
			}
			if e, err := verifier.Verify(toks[i]); codeOf(e, err, cluster) != want {
				t.Errorf("package epoch disagrees with the vector %q: %v, %v", v.Name, e, err)
			}
			if want != "" {
				continue
			}
			valid++
			fence, err := redisfence.Open(ctx, s.admin, redisfence.Options{Library: lib})
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("fence-%s-%d", lib, i)
			if err := fence.Admit(ctx, key, toks[i]); err != nil {
				t.Fatalf("vector %q: Admit: %v", v.Name, err)
			}
			h, err := fence.Highest(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			w := v.HS256.Epoch
			if h.Cluster != w.Cluster || strconv.FormatUint(h.Term, 10) != w.Term || h.Leader != w.Leader {
				t.Errorf("vector %q: raised to %v, want %s/%s/%s", v.Name, h, w.Cluster, w.Term, w.Leader)
			}
		}
	}
	if valid == 0 {
		t.Fatal("no valid hs256 vector was checked")
	}
}

// mutate returns a one-edit change of tok: a byte replaced, inserted or
// removed, the token cut short, or a part swapped for another token's.
func mutate(rng *rand.Rand, tok string, others []string) string {
	b := []byte(tok)
	if len(b) == 0 {
		return string(rune('a' + rng.IntN(26)))
	}
	switch rng.IntN(6) {
	case 0, 1: // replace a byte, mostly by one of the token alphabet
		i := rng.IntN(len(b))
		if rng.IntN(3) == 0 {
			b[i] = byte(rng.IntN(256))
		} else {
			const alpha = "abcABC019._-/:tf1hs256=+ "
			b[i] = alpha[rng.IntN(len(alpha))]
		}
	case 2: // insert
		i := rng.IntN(len(b) + 1)
		b = append(b[:i], append([]byte{byte(rng.IntN(128))}, b[i:]...)...)
	case 3: // remove
		i := rng.IntN(len(b))
		b = append(b[:i], b[i+1:]...)
	case 4: // cut
		b = b[:rng.IntN(len(b))]
	case 5: // a field from another token
		o := others[rng.IntN(len(others))]
		p, q := strings.Split(tok, ":"), strings.Split(o, ":")
		i := rng.IntN(len(p))
		if i < len(q) {
			p[i] = q[i]
		}
		return strings.Join(p, ":")
	}
	return string(b)
}

// TestDifferentialMutatedTokens: the library and package epoch give the
// same verdict on every one-byte change of the valid hs256 vectors (every
// position, every printable ASCII byte and a few others), and on random
// edits of valid tokens (bytes replaced, inserted, removed, cut, fields
// swapped between tokens). The brief run tries a few values per position
// and 1000 random edits; TERMFENCE_REDIS_DIFF=N tries every printable byte
// per position and N random edits.
func TestDifferentialMutatedTokens(t *testing.T) {
	s := newServer(t)
	_, cfg, verifier := vectors(t)
	f, _, _ := vectors(t)
	cfg.Cluster = "payments"
	if err := redisfence.Install(context.Background(), s.admin, cfg); err != nil {
		t.Fatal(err)
	}
	var valid []string
	for _, v := range f.Tokens {
		raw, _ := hex.DecodeString(v.Hex)
		if v.HS256.Epoch != nil && strings.HasPrefix(string(raw), "tf1:") {
			valid = append(valid, string(raw))
		}
	}
	// Tokens of the library's cluster, under every key.
	for _, id := range []string{"", "2026-12", "longest_key_id_of_32_bytes-ABCDE"} {
		k := cfg.HMACKey
		var c epoch.Codec
		var err error
		if id == "" {
			c, err = epoch.NewHMAC(k)
		} else {
			c, err = epoch.NewHMACKeys(epoch.HMACKey{ID: id, Secret: cfg.HMACKeys[id]})
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []epoch.Epoch{ep(34, "node-b"), ep(epoch.MaxTerm, "x")} {
			tok, err := c.Sign(e)
			if err != nil {
				t.Fatal(err)
			}
			valid = append(valid, tok)
		}
	}
	// The brief run changes each position to a few values (the next byte,
	// and bytes that end or split a field); the long one to every
	// printable ASCII byte and a few others.
	long := os.Getenv("TERMFENCE_REDIS_DIFF") != ""
	var toks []string
	for _, tok := range valid {
		for i := 0; i < len(tok); i++ {
			for c := 0; c < 256; c++ {
				switch {
				case c == int(tok[i]):
					continue
				case long && (c >= 0x20 && c < 0x7f || c == 0 || c == '\n' || c == 0xff):
				case c == int(tok[i])+1 || c == ':' || c == '/' || c == 0 || c == '=':
				default:
					continue
				}
				b := []byte(tok)
				b[i] = byte(c)
				toks = append(toks, string(b))
			}
		}
	}
	n := 1000
	if v := os.Getenv("TERMFENCE_REDIS_DIFF"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("TERMFENCE_REDIS_DIFF=%q: %v", v, err)
		}
	}
	seed := rand.Uint64()
	t.Logf("seed %d, %d one-byte changes, %d random edits", seed, len(toks), n)
	rng := rand.New(rand.NewPCG(seed, 43))
	for i := 0; i < n; i++ {
		tok := valid[rng.IntN(len(valid))]
		for j := rng.IntN(3); j >= 0; j-- {
			tok = mutate(rng, tok, valid)
		}
		toks = append(toks, tok)
	}
	toks = append(toks, valid...)
	const batch = 5000
	admitted := 0
	for lo := 0; lo < len(toks); lo += batch {
		hi := min(lo+batch, len(toks))
		got := codes(t, s.admin, redisfence.DefaultLibrary, toks[lo:hi])
		for i, code := range got {
			tok := toks[lo+i]
			e, err := verifier.Verify(tok)
			if want := codeOf(e, err, "payments"); code != want {
				t.Errorf("seed %d: token %q: library %q, package epoch %q (%v)", seed, tok, code, want, err)
			}
			if code == "" {
				admitted++
			}
		}
	}
	if admitted < len(valid) {
		t.Fatalf("only %d tokens admitted, fewer than the %d valid ones", admitted, len(valid))
	}
}
