package storageguard_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// gtSpy returns a Spy over a Memory fence.
func gtSpy() *fencetest.Spy { return &fencetest.Spy{Fence: storageguard.NewMemory()} }

// gtKey is the HMAC key the guard tests sign with.
var gtKey = []byte("termfence test key, 32 bytes or more")

func gtCodec(t testing.TB, key []byte) epoch.Codec {
	t.Helper()
	c, err := epoch.NewHMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func gtSign(t testing.TB, s epoch.Signer, ep epoch.Epoch) string {
	t.Helper()
	tok, err := s.Sign(ep)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func gtEp(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

// gtWrite runs a Guard.Do whose write records the epoch it was given.
func gtWrite(g *storageguard.Guard, resource, token string) (epoch.Epoch, bool, error) {
	var got epoch.Epoch
	ran := false
	err := g.Do(context.Background(), resource, token, func(_ context.Context, e epoch.Epoch) error {
		got, ran = e, true
		return nil
	})
	return got, ran, err
}

func TestGuardForgedHugeTermDoesNotRaiseFence(t *testing.T) {
	codec := gtCodec(t, gtKey)
	spy := gtSpy()
	g := storageguard.NewGuard(spy, storageguard.GuardConfig{Cluster: "payments", Verifier: codec})

	leader := gtSign(t, codec, gtEp(5, "node-a"))
	if got, ran, err := gtWrite(g, "ledger", leader); err != nil || !ran || got != gtEp(5, "node-a") {
		t.Fatalf("real leader: got %v ran=%v err=%v", got, ran, err)
	}

	huge := gtEp(epoch.MaxTerm, "mallory")
	otherKey := gtCodec(t, []byte("a different key that nobody shares!!"))
	signedElsewhere := gtSign(t, otherKey, huge)
	real := gtSign(t, codec, huge)
	tampered := strings.Replace(leader, "/5/node-a", "/4611686018427387904/node-a", 1)
	if tampered == leader {
		t.Fatal("test bug: tampering did not change the token")
	}
	cases := []struct {
		name  string
		token string
		cause error
	}{
		{"unsigned", huge.String(), epoch.ErrUnsigned},
		{"other key", signedElsewhere, epoch.ErrBadSignature},
		{"tampered term", tampered, epoch.ErrBadSignature},
		{"signature of another token", real[:strings.LastIndexByte(real, ':')] + leader[strings.LastIndexByte(leader, ':'):], epoch.ErrBadSignature},
	}
	before := spy.Calls.Load()
	for _, c := range cases {
		_, ran, err := gtWrite(g, "ledger", c.token)
		if !errors.Is(err, storageguard.ErrUnauthenticated) || !errors.Is(err, c.cause) {
			t.Errorf("%s: err = %v, want ErrUnauthenticated wrapping %v", c.name, err, c.cause)
		}
		if ran {
			t.Errorf("%s: write ran", c.name)
		}
		if _, err := g.Admit(context.Background(), "ledger", c.token); !errors.Is(err, storageguard.ErrUnauthenticated) {
			t.Errorf("%s: Admit err = %v", c.name, err)
		}
		if _, err := g.Check(context.Background(), "ledger", c.token); !errors.Is(err, storageguard.ErrUnauthenticated) {
			t.Errorf("%s: Check err = %v", c.name, err)
		}
	}
	if n := spy.Calls.Load() - before; n != 0 {
		t.Fatalf("refused tokens reached the fence %d times", n)
	}
	h, err := g.Highest(context.Background(), "ledger")
	if err != nil || h != gtEp(5, "node-a") {
		t.Fatalf("highest = %v, %v; want the real leader's epoch", h, err)
	}
	// Real leaders keep writing: the current one, then its successor.
	if _, ran, err := gtWrite(g, "ledger", leader); err != nil || !ran {
		t.Fatalf("real leader after forgeries: ran=%v err=%v", ran, err)
	}
	if got, ran, err := gtWrite(g, "ledger", gtSign(t, codec, gtEp(6, "node-b"))); err != nil || !ran || got != gtEp(6, "node-b") {
		t.Fatalf("next leader: got %v ran=%v err=%v", got, ran, err)
	}
}

func TestGuardMalformedAndMissingTokens(t *testing.T) {
	for _, v := range []struct {
		name string
		v    epoch.Verifier
	}{{"plain", epoch.Plain()}, {"hmac", gtCodec(t, gtKey)}} {
		spy := gtSpy()
		g := storageguard.NewGuard(spy, storageguard.GuardConfig{Verifier: v.v})
		for _, tok := range []string{
			"garbage", "payments/05/node-a", "payments/0/node-a", "pay ments/5/node-a",
			"tf9:hs256:payments/5/node-a:AAAA", strings.Repeat("a", epoch.MaxTokenLen+1),
			"payments/5/" + strings.Repeat("n", epoch.MaxNameLen+1),
		} {
			_, ran, err := gtWrite(g, "ledger", tok)
			if !errors.Is(err, epoch.ErrMalformed) || ran {
				t.Errorf("%s: token %.40q: ran=%v err=%v, want epoch.ErrMalformed", v.name, tok, ran, err)
			}
		}
		_, ran, err := gtWrite(g, "ledger", "")
		if !errors.Is(err, storageguard.ErrUnauthenticated) || ran {
			t.Errorf("%s: empty token: ran=%v err=%v, want ErrUnauthenticated", v.name, ran, err)
		}
		if n := spy.Calls.Load(); n != 0 {
			t.Errorf("%s: refused tokens reached the fence %d times", v.name, n)
		}
	}
}

func TestGuardForeignCluster(t *testing.T) {
	codec := gtCodec(t, gtKey)
	spy := gtSpy()
	g := storageguard.NewGuard(spy, storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	foreign := epoch.Epoch{Cluster: "billing", Term: 99, Leader: "node-x"}
	_, ran, err := gtWrite(g, "ledger", gtSign(t, codec, foreign))
	var fe *storageguard.ForeignError
	if !errors.Is(err, storageguard.ErrForeignCluster) || !errors.As(err, &fe) || ran {
		t.Fatalf("ran=%v err=%v, want *ForeignError", ran, err)
	}
	if fe.Presented != foreign || fe.Cluster != "payments" || fe.Resource != "ledger" {
		t.Fatalf("ForeignError = %+v", fe)
	}
	if n := spy.Calls.Load(); n != 0 {
		t.Fatalf("foreign token reached the fence %d times", n)
	}

	// Without GuardConfig.Cluster the fence's own check still refuses a
	// second cluster on a resource.
	g2 := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	if _, _, err := gtWrite(g2, "ledger", gtSign(t, codec, gtEp(1, "node-a"))); err != nil {
		t.Fatal(err)
	}
	if _, ran, err := gtWrite(g2, "ledger", gtSign(t, codec, foreign)); !errors.Is(err, storageguard.ErrForeignCluster) || ran {
		t.Fatalf("fence's cluster check: ran=%v err=%v", ran, err)
	}
}

func TestGuardStaleAndConflict(t *testing.T) {
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	if _, _, err := gtWrite(g, "ledger", gtSign(t, codec, gtEp(34, "node-b"))); err != nil {
		t.Fatal(err)
	}
	_, ran, err := gtWrite(g, "ledger", gtSign(t, codec, gtEp(33, "node-a")))
	var se *storageguard.StaleError
	if !errors.As(err, &se) || !errors.Is(err, storageguard.ErrStale) || ran {
		t.Fatalf("stale: ran=%v err=%v", ran, err)
	}
	if se.Presented != gtEp(33, "node-a") || se.Highest != gtEp(34, "node-b") {
		t.Fatalf("StaleError = %+v", se)
	}
	if _, err := g.Check(context.Background(), "ledger", gtSign(t, codec, gtEp(33, "node-a"))); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Check stale: %v", err)
	}
	_, ran, err = gtWrite(g, "ledger", gtSign(t, codec, gtEp(34, "node-c")))
	var ce *storageguard.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, storageguard.ErrConflict) || ran {
		t.Fatalf("conflict: ran=%v err=%v", ran, err)
	}
	// Another resource has its own high-water mark.
	if _, ran, err := gtWrite(g, "other", gtSign(t, codec, gtEp(33, "node-a"))); err != nil || !ran {
		t.Fatalf("other resource: ran=%v err=%v", ran, err)
	}
}

func TestGuardDoReturnsWriteError(t *testing.T) {
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	boom := errors.New("boom")
	err := g.Do(context.Background(), "ledger", gtSign(t, codec, gtEp(1, "node-a")), func(context.Context, epoch.Epoch) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want write's error", err)
	}
}

func TestGuardAdmitRaisesCheckDoesNot(t *testing.T) {
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	ctx := context.Background()
	if got, err := g.Check(ctx, "ledger", gtSign(t, codec, gtEp(7, "node-a"))); err != nil || got != gtEp(7, "node-a") {
		t.Fatalf("Check: %v %v", got, err)
	}
	if h, _ := g.Highest(ctx, "ledger"); !h.IsZero() {
		t.Fatalf("Check raised the fence to %v", h)
	}
	if got, err := g.Admit(ctx, "ledger", gtSign(t, codec, gtEp(7, "node-a"))); err != nil || got != gtEp(7, "node-a") {
		t.Fatalf("Admit: %v %v", got, err)
	}
	if h, _ := g.Highest(ctx, "ledger"); h != gtEp(7, "node-a") {
		t.Fatalf("Admit did not raise: highest %v", h)
	}
	// A nil write is an Admit.
	if err := g.Do(ctx, "ledger", gtSign(t, codec, gtEp(8, "node-b")), nil); err != nil {
		t.Fatal(err)
	}
	if h, _ := g.Highest(ctx, "ledger"); h != gtEp(8, "node-b") {
		t.Fatalf("Do(nil write) did not raise: highest %v", h)
	}
}

func TestGuardBadResource(t *testing.T) {
	codec := gtCodec(t, gtKey)
	spy := gtSpy()
	g := storageguard.NewGuard(spy, storageguard.GuardConfig{Verifier: codec})
	tok := gtSign(t, codec, gtEp(1, "node-a"))
	for _, r := range []string{"", strings.Repeat("r", storageguard.MaxResourceLen+1)} {
		if _, ran, err := gtWrite(g, r, tok); !errors.Is(err, storageguard.ErrBadResource) || ran {
			t.Errorf("resource of %d bytes: ran=%v err=%v", len(r), ran, err)
		}
		if _, err := g.Highest(context.Background(), r); !errors.Is(err, storageguard.ErrBadResource) {
			t.Errorf("Highest of %d bytes: %v", len(r), err)
		}
	}
	if n := spy.Calls.Load(); n != 0 {
		t.Fatalf("bad resources reached the fence %d times", n)
	}
	if _, ran, err := gtWrite(g, strings.Repeat("r", storageguard.MaxResourceLen), tok); err != nil || !ran {
		t.Fatalf("longest resource: ran=%v err=%v", ran, err)
	}
}

func TestGuardWithoutFenceOrConfig(t *testing.T) {
	codec := gtCodec(t, gtKey)
	tok := gtSign(t, codec, gtEp(1, "node-a"))
	var nilGuard *storageguard.Guard
	guards := map[string]*storageguard.Guard{
		"nil fence":   storageguard.NewGuard(nil, storageguard.GuardConfig{Verifier: codec}),
		"typed nil":   storageguard.NewGuard((*storageguard.Memory)(nil), storageguard.GuardConfig{Verifier: codec}),
		"nil *Guard":  nilGuard,
		"bad cluster": storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Cluster: "no spaces", Verifier: codec}),
	}
	want := map[string]error{
		"nil fence": storageguard.ErrNoFence, "typed nil": storageguard.ErrNoFence,
		"nil *Guard": storageguard.ErrNoFence, "bad cluster": storageguard.ErrBadConfig,
	}
	ctx := context.Background()
	for name, g := range guards {
		if _, ran, err := gtWrite(g, "ledger", tok); !errors.Is(err, want[name]) || ran {
			t.Errorf("%s: Do ran=%v err=%v", name, ran, err)
		}
		if _, err := g.Admit(ctx, "ledger", tok); !errors.Is(err, want[name]) {
			t.Errorf("%s: Admit %v", name, err)
		}
		if _, err := g.Check(ctx, "ledger", tok); !errors.Is(err, want[name]) {
			t.Errorf("%s: Check %v", name, err)
		}
		if _, err := g.Highest(ctx, "ledger"); !errors.Is(err, want[name]) {
			t.Errorf("%s: Highest %v", name, err)
		}
		if _, err := g.Verify("ledger", tok); !errors.Is(err, want[name]) {
			t.Errorf("%s: Verify %v", name, err)
		}
	}
	if err := (storageguard.GuardConfig{Cluster: "payments"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestGuardNilVerifierRefuses: no Verifier is no choice. A key
// passed in the wrong field must not turn verification off: a Guard built
// without a Verifier refuses every token, signed or not, before the fence
// is touched, with an error that names the missing Verifier.
func TestGuardNilVerifierRefuses(t *testing.T) {
	var nilPtr *ptrVerifier
	for name, cfg := range map[string]storageguard.GuardConfig{
		"zero config":   {},
		"cluster only":  {Cluster: "payments"},
		"nil pointer":   {Cluster: "payments", Verifier: nilPtr},
		"nil interface": {Cluster: "payments", Verifier: epoch.Verifier(nil)},
	} {
		spy := gtSpy()
		g := storageguard.NewGuard(spy, cfg)
		if err := g.Err(); err != nil {
			t.Fatalf("%s: Err %v: the Guard refuses tokens, it is not broken", name, err)
		}
		signed := gtSign(t, gtCodec(t, gtKey), gtEp(7, "node-a"))
		for _, tok := range []string{signed, gtEp(1<<40, "anyone").String()} {
			_, ran, err := gtWrite(g, "ledger", tok)
			if ran || !errors.Is(err, storageguard.ErrUnauthenticated) || !errors.Is(err, storageguard.ErrNoVerifier) {
				t.Fatalf("%s: token %q: ran=%v err=%v, want ErrNoVerifier (ErrUnauthenticated)", name, tok, ran, err)
			}
			if !strings.Contains(err.Error(), "Verifier") {
				t.Fatalf("%s: the error does not name the missing Verifier: %v", name, err)
			}
			if _, err := g.Admit(context.Background(), "ledger", tok); !errors.Is(err, storageguard.ErrNoVerifier) {
				t.Fatalf("%s: Admit: %v", name, err)
			}
			if _, err := g.Check(context.Background(), "ledger", tok); !errors.Is(err, storageguard.ErrNoVerifier) {
				t.Fatalf("%s: Check: %v", name, err)
			}
		}
		if n := spy.Calls.Load(); n != 0 {
			t.Fatalf("%s: the fence was called %d times", name, n)
		}
	}
}

// ptrVerifier is a Verifier with a pointer receiver, to pass a nil one.
type ptrVerifier struct{ v epoch.Verifier }

func (p *ptrVerifier) Verify(tok string) (epoch.Epoch, error) { return p.v.Verify(tok) }

// TestGuardExplicitPlain: accepting tokens unauthenticated is spelled out
// as Verifier: epoch.Plain(); an unsigned token is then taken at its word.
func TestGuardExplicitPlain(t *testing.T) {
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: epoch.Plain()})
	if got, ran, err := gtWrite(g, "ledger", gtEp(1<<40, "anyone").String()); err != nil || !ran || got.Term != 1<<40 {
		t.Fatalf("got %v ran=%v err=%v", got, ran, err)
	}
}

// TestGuardRefusesTermAboveMaxTerm: a token whose signature is valid (made
// with the right key by a release without the bound, or a leaked key) but
// whose term is above epoch.MaxTerm is refused, with or without a
// verifier, before the fence is touched.
func TestGuardRefusesTermAboveMaxTerm(t *testing.T) {
	text := gtEp(epoch.MaxTerm+1, "mallory").String()
	mac := hmac.New(sha256.New, gtKey)
	mac.Write([]byte("tf1:hs256:" + text))
	signed := "tf1:hs256:" + text + ":" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	for name, cfg := range map[string]storageguard.GuardConfig{
		"hmac":  {Cluster: "payments", Verifier: gtCodec(t, gtKey)},
		"plain": {Cluster: "payments", Verifier: epoch.Plain()},
	} {
		spy := gtSpy()
		g := storageguard.NewGuard(spy, cfg)
		tok := signed
		if name == "plain" {
			tok = text
		}
		if _, ran, err := gtWrite(g, "ledger", tok); err == nil || ran || !errors.Is(err, epoch.ErrMalformed) {
			t.Errorf("%s: term above MaxTerm: ran=%v err=%v, want ErrMalformed", name, ran, err)
		}
		if n := spy.Calls.Load(); n != 0 {
			t.Errorf("%s: the fence was called %d times", name, n)
		}
	}
}

// TestGuardHMACKeyRotation rotates a shared secret end to end through
// Guards over one fence, as the leaders and the fence would: fences first
// accept the old and the new key, then leaders sign with the new one, then
// fences retire the old one. No leader's token is refused at any step,
// and after retirement a token signed with the old key is refused before
// it reaches the fence, even with a newer term.
func TestGuardHMACKeyRotation(t *testing.T) {
	ctx := context.Background()
	spy := gtSpy()
	oldKey := epoch.HMACKey{ID: "2026-01", Secret: []byte("the old shared secret, 32 bytes long")}
	newKey := epoch.HMACKey{ID: "2026-02", Secret: []byte("the new shared secret, 32 bytes long")}
	mustCodec := func(sign epoch.HMACKey, verify ...epoch.HMACKey) epoch.Codec {
		c, err := epoch.NewHMACKeys(sign, verify...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mustVerifier := func(keys ...epoch.HMACKey) epoch.Verifier {
		v, err := epoch.NewHMACVerifier(keys...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	guard := func(v epoch.Verifier) *storageguard.Guard {
		return storageguard.NewGuard(spy, storageguard.GuardConfig{Cluster: "payments", Verifier: v})
	}
	write := func(g *storageguard.Guard, tok string) error {
		return g.Do(ctx, "ledger", tok, func(context.Context, epoch.Epoch) error { return nil })
	}
	oldSigner, newSigner := mustCodec(oldKey), mustCodec(newKey)

	// Before: everyone on the old key.
	g0 := guard(mustVerifier(oldKey))
	if err := write(g0, gtSign(t, oldSigner, gtEp(33, "node-a"))); err != nil {
		t.Fatal(err)
	}
	// Step 1: fences accept both. Tokens in flight (old key) still pass.
	g1 := guard(mustVerifier(oldKey, newKey))
	if err := write(g1, gtSign(t, oldSigner, gtEp(33, "node-a"))); err != nil {
		t.Fatalf("step 1, old key: %v", err)
	}
	// Step 2: leaders sign with the new key; a slow leader's old-key token
	// for the same term still passes.
	if err := write(g1, gtSign(t, newSigner, gtEp(34, "node-b"))); err != nil {
		t.Fatalf("step 2, new key: %v", err)
	}
	if err := write(g1, gtSign(t, oldSigner, gtEp(34, "node-b"))); err != nil {
		t.Fatalf("step 2, old key still accepted: %v", err)
	}
	// Step 3: fences retire the old key.
	g2 := guard(mustVerifier(newKey))
	if err := write(g2, gtSign(t, newSigner, gtEp(34, "node-b"))); err != nil {
		t.Fatalf("step 3, new key: %v", err)
	}
	calls := spy.Calls.Load()
	for _, tok := range []string{gtSign(t, oldSigner, gtEp(35, "node-c")), gtSign(t, oldSigner, gtEp(epoch.MaxTerm, "mallory"))} {
		if err := write(g2, tok); !errors.Is(err, storageguard.ErrUnauthenticated) || !errors.Is(err, epoch.ErrBadSignature) {
			t.Fatalf("step 3, retired key: %v, want ErrUnauthenticated (bad signature)", err)
		}
	}
	if n := spy.Calls.Load() - calls; n != 0 {
		t.Fatalf("tokens of the retired key reached the fence %d times", n)
	}
	if h, _ := spy.Highest(ctx, "ledger"); h != gtEp(34, "node-b") {
		t.Fatalf("Highest = %v after the rotation, want %v", h, gtEp(34, "node-b"))
	}
}
