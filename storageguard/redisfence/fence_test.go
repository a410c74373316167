package redisfence_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/redisfence"
)

// TestRefusals: each refusal of the library, through Do, writes nothing
// (neither the data nor the fence key) and maps to storageguard's and
// epoch's errors; an admitted write raises and writes in one call.
func TestRefusals(t *testing.T) {
	s := newServer(t)
	f := s.open(t)
	ctx := context.Background()
	const res, data = "{acct:1}:fence", "{acct:1}:balance"
	set := func(v string) redisfence.Cmd { return redisfence.Cmd{"SET", data, v} }
	if _, err := f.Do(ctx, res, sign(t, ep(34, "node-b")), []string{data}, set("b34")); err != nil {
		t.Fatal(err)
	}
	other, err := epoch.NewHMAC([]byte("another-cluster-key-of-32-bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	otherKeyTok, _ := other.Sign(ep(99, "node-x"))
	_, edPriv, _ := ed25519.GenerateKey(nil)
	edTok, _ := epoch.NewEd25519Signer(edPriv).Sign(ep(99, "node-x"))
	foreign := sign(t, epoch.Epoch{Cluster: "orders", Term: 99, Leader: "node-x"})
	cases := []struct {
		name  string
		token string
		want  []error
	}{
		{"stale", sign(t, ep(33, "node-a")), []error{storageguard.ErrStale}},
		{"same term, other leader", sign(t, ep(34, "node-c")), []error{storageguard.ErrConflict}},
		{"other cluster", foreign, []error{storageguard.ErrForeignCluster}},
		{"forged: another key", otherKeyTok, []error{storageguard.ErrUnauthenticated, epoch.ErrBadSignature}},
		{"ed25519", edTok, []error{storageguard.ErrUnauthenticated, epoch.ErrBadSignature}},
		{"unsigned", "payments/99/node-x", []error{storageguard.ErrUnauthenticated, epoch.ErrUnsigned}},
		{"short signature", "tf1:hs256:payments/99/node-x:AAAA", []error{storageguard.ErrUnauthenticated, epoch.ErrBadSignature}},
		{"malformed: leading zero", "payments/099/node-x", []error{epoch.ErrMalformed}},
		{"malformed: version", "tf2:hs256:payments/99/node-x:AAAA", []error{epoch.ErrMalformed}},
		{"empty", "", []error{epoch.ErrMalformed}},
	}
	// Twice: a refused token must not be remembered (the library caches
	// verified tokens).
	for range 2 {
		for _, c := range cases {
			_, err := f.Do(ctx, res, c.token, []string{data}, set(c.name))
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("%s: %v, want %v", c.name, err, w)
				}
			}
		}
	}
	// The forged token's epoch, correctly signed, would have been
	// admitted: the refusal was the signature's.
	var se *storageguard.StaleError
	if _, err := f.Do(ctx, res, sign(t, ep(33, "node-a")), []string{data}, set("x")); !errors.As(err, &se) || se.Presented != ep(33, "node-a") || se.Highest != ep(34, "node-b") || se.Resource != res {
		t.Errorf("stale refusal %v does not name both epochs", err)
	}
	var fe *storageguard.ForeignError
	if _, err := f.Do(ctx, res, foreign, nil); !errors.As(err, &fe) || fe.Cluster != "payments" {
		t.Errorf("foreign refusal %v does not name the cluster", err)
	}
	if v, _ := s.admin.Get(ctx, data).Result(); v != "b34" {
		t.Fatalf("data = %q after refusals, want b34", v)
	}
	if h, err := f.Highest(ctx, res); err != nil || h != ep(34, "node-b") {
		t.Fatalf("highest = %v, %v after refusals, want 34/node-b", h, err)
	}
	// A newer epoch raises and writes; the older one is then refused.
	r, err := f.Do(ctx, res, sign(t, ep(35, "node-c")), []string{data}, set("c35"), redisfence.Cmd{"GET", data})
	if err != nil || len(r) != 2 || r[0] != "OK" || r[1] != "c35" {
		t.Fatalf("newer epoch: %v, %v", r, err)
	}
	if _, err := f.Do(ctx, res, sign(t, ep(34, "node-b")), []string{data}, set("late")); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("deposed leader's late write: %v, want ErrStale", err)
	}
	if err := f.Check(ctx, res, sign(t, ep(34, "node-b"))); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Check of the old epoch: %v", err)
	}
	if err := f.Check(ctx, res, sign(t, ep(36, "node-a"))); err != nil {
		t.Fatalf("Check of a newer epoch: %v", err)
	}
	if h, _ := f.Highest(ctx, res); h != ep(35, "node-c") {
		t.Fatalf("Check raised the fence to %v", h)
	}
}

// TestErrorsOfBadCalls: a corrupt fence key closes the resource
// (ErrCorrupt); a call that names the fence key as data, or a command
// with no arguments, is refused (ErrBadCall); a failing command gives
// *CommandError after the commands before it ran. Nothing is written by
// a refused call.
func TestErrorsOfBadCalls(t *testing.T) {
	s := newServer(t)
	f := s.open(t)
	ctx := context.Background()
	tok := sign(t, ep(5, "a"))
	if _, err := f.Do(ctx, "r", tok, []string{"r"}, redisfence.Cmd{"SET", "x", "1"}); !errors.Is(err, redisfence.ErrBadCall) {
		t.Errorf("data key = fence key: %v", err)
	}
	if _, err := f.Do(ctx, "r", tok, []string{"x"}, redisfence.Cmd{"DEL", "r"}); !errors.Is(err, redisfence.ErrBadCall) {
		t.Errorf("command names the fence key: %v", err)
	}
	if _, err := f.Do(ctx, "r", tok, nil, redisfence.Cmd{}); !errors.Is(err, redisfence.ErrBadCall) {
		t.Errorf("empty command: %v", err)
	}
	if n, _ := s.admin.Exists(ctx, "r", "x").Result(); n != 0 {
		t.Fatalf("refused calls wrote %d keys", n)
	}
	// Bad argument structure sent around the Go side: the library refuses
	// it before it writes.
	err := s.admin.FCall(ctx, "termfence_write", []string{"r"}, tok, 3, "SET", "x").Err()
	if !errors.Is(redisfence.Refusal("r", err), redisfence.ErrBadCall) {
		t.Errorf("truncated command: %v", err)
	}
	long := []any{tok, 1001, "MSET"}
	for i := 0; i < 500; i++ {
		long = append(long, "x", "1")
	}
	err = s.admin.FCall(ctx, "termfence_write", []string{"r"}, long...).Err()
	if !errors.Is(redisfence.Refusal("r", err), redisfence.ErrBadCall) {
		t.Errorf("a command of 1001 arguments: %v", err)
	}
	if _, err := f.Do(ctx, "r", tok, nil, make(redisfence.Cmd, 1001)); !errors.Is(err, redisfence.ErrBadCall) {
		t.Errorf("Do with a command of 1001 arguments: %v", err)
	}
	if n, _ := s.admin.Exists(ctx, "r", "x").Result(); n != 0 {
		t.Fatalf("a malformed call wrote %d keys", n)
	}
	// A failing command: the fence was raised, SET x ran, INCR failed.
	_, err = f.Do(ctx, "r", tok, []string{"x", "y"}, redisfence.Cmd{"SET", "x", "1"}, redisfence.Cmd{"HSET", "x", "f", "v"}, redisfence.Cmd{"SET", "y", "1"})
	var ce *redisfence.CommandError
	if !errors.As(err, &ce) || ce.Index != 1 {
		t.Fatalf("failing command: %v, want *CommandError at 1", err)
	}
	if v, _ := s.admin.Get(ctx, "x").Result(); v != "1" {
		t.Errorf("the command before the failing one did not run: x = %q", v)
	}
	if n, _ := s.admin.Exists(ctx, "y").Result(); n != 0 {
		t.Errorf("a command after the failing one ran")
	}
	// A fence key written around the fence closes the resource.
	s.admin.Set(ctx, "r", "garbage", 0)
	if err := f.Admit(ctx, "r", sign(t, ep(6, "a"))); !errors.Is(err, redisfence.ErrCorrupt) {
		t.Errorf("corrupt fence key: %v", err)
	}
	s.admin.Del(ctx, "r")
	s.admin.HSet(ctx, "r", "f", "v")
	if err := f.Admit(ctx, "r", sign(t, ep(6, "a"))); !errors.Is(err, redisfence.ErrCorrupt) {
		t.Errorf("fence key of another type: %v", err)
	}
	if _, err := f.Highest(ctx, "r"); !errors.Is(err, redisfence.ErrCorrupt) {
		t.Errorf("Highest of a fence key of another type: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(ctx, "r", tok); !errors.Is(err, storageguard.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestKeyRotation: a library installed with the old key without an ID and
// a new one with an ID admits both; reinstalled with the new one only, it
// refuses the old key's tokens. A key ID it does not hold is refused.
func TestKeyRotation(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	newKey := []byte("the-new-key-of-at-least-32-bytes")
	s.install(t, redisfence.Config{HMACKey: testKey, HMACKeys: map[string][]byte{"k2": newKey}})
	f, err := redisfence.Open(ctx, s.admin, redisfence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := epoch.NewHMACKeys(epoch.HMACKey{ID: "k2", Secret: newKey})
	if err != nil {
		t.Fatal(err)
	}
	newTok, _ := signer.Sign(ep(8, "b"))
	if err := f.Admit(ctx, "r", sign(t, ep(7, "a"))); err != nil {
		t.Fatalf("old key during rotation: %v", err)
	}
	if err := f.Admit(ctx, "r", newTok); err != nil {
		t.Fatalf("new key during rotation: %v", err)
	}
	unknown, _ := epoch.NewHMACKeys(epoch.HMACKey{ID: "k3", Secret: newKey})
	k3Tok, _ := unknown.Sign(ep(9, "c"))
	if err := f.Admit(ctx, "r", k3Tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("unknown key ID: %v", err)
	}
	// An unknown ID over a key the library holds without an ID: still no
	// key of that ID, so refused (a key is chosen by its ID, never by
	// falling back to another).
	confused, _ := epoch.NewHMACKeys(epoch.HMACKey{ID: "k3", Secret: testKey})
	confusedTok, _ := confused.Sign(ep(9, "c"))
	if err := f.Admit(ctx, "r", confusedTok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("unknown key ID signed with the key without an ID: %v", err)
	}
	s.install(t, redisfence.Config{HMACKeys: map[string][]byte{"k2": newKey}})
	if err := f.Admit(ctx, "r", sign(t, ep(9, "c"))); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("old key after rotation: %v", err)
	}
	if err := f.Admit(ctx, "r", newTok); err != nil {
		t.Fatalf("new key after rotation: %v", err)
	}
}

// TestInstallAndOpenRefusals: Install refuses a config without an HMAC key
// (an Ed25519-only cluster: ErrNoKey) or with a short key; Open refuses a
// server that does not sync every write (ErrNotDurable) and one without
// the library (ErrNotInstalled).
func TestInstallAndOpenRefusals(t *testing.T) {
	s := newServer(t, "--appendfsync", "everysec")
	ctx := context.Background()
	if err := redisfence.Install(ctx, s.admin, redisfence.Config{Cluster: "payments"}); !errors.Is(err, redisfence.ErrNoKey) {
		t.Errorf("no key: %v", err)
	}
	if err := redisfence.Install(ctx, s.admin, redisfence.Config{Cluster: "payments", HMACKey: []byte("short")}); !errors.Is(err, storageguard.ErrBadConfig) {
		t.Errorf("short key: %v", err)
	}
	if err := redisfence.Install(ctx, s.admin, redisfence.Config{Cluster: "payments", HMACKey: testKey, Library: "bad-name"}); !errors.Is(err, storageguard.ErrBadConfig) {
		t.Errorf("bad library name: %v", err)
	}
	s.install(t, redisfence.Config{})
	if _, err := redisfence.Open(ctx, s.admin, redisfence.Options{}); !errors.Is(err, redisfence.ErrNotDurable) {
		t.Errorf("appendfsync everysec: %v", err)
	}
	s.admin.ConfigSet(ctx, "appendfsync", "always")
	if _, err := redisfence.Open(ctx, s.admin, redisfence.Options{}); err != nil {
		t.Errorf("appendfsync always: %v", err)
	}
	s.admin.ConfigSet(ctx, "appendonly", "no")
	if _, err := redisfence.Open(ctx, s.admin, redisfence.Options{}); !errors.Is(err, redisfence.ErrNotDurable) {
		t.Errorf("appendonly no: %v", err)
	}
	s.admin.ConfigSet(ctx, "appendonly", "yes")
	if _, err := redisfence.Open(ctx, s.admin, redisfence.Options{Library: "other"}); !errors.Is(err, redisfence.ErrNotInstalled) {
		t.Errorf("no such library: %v", err)
	}
}
