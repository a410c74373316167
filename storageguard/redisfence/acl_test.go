package redisfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/redisfence"
)

const leaderPassword = "leaders-password-0123456789"

// leader creates the leaders' user on s (keys {acct:*}, SET, GET, INCRBY)
// and returns a fence on a client of that user, whose durability Open
// checks through the admin client.
func leader(t *testing.T, s *server) (*redisfence.Fence, func(args ...any) error) {
	t.Helper()
	ctx := context.Background()
	err := redisfence.LeaderUser(ctx, s.admin, redisfence.Leader{
		User: "leaders", Password: leaderPassword, Keys: []string{"{acct:*"}, Commands: []string{"set", "get", "incrby"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, s.Addr, "leaders", leaderPassword)
	f, err := redisfence.Open(ctx, c, redisfence.Options{Admin: s.admin})
	if err != nil {
		t.Fatal(err)
	}
	return f, func(args ...any) error { return c.Do(ctx, args...).Err() }
}

// TestLeaderUserCannotReadTheKey: the leaders' user writes through the
// fence, and every way to the library's code — and so to the values that
// sign tokens — is refused to it: FUNCTION LIST WITHCODE, FUNCTION DUMP,
// SCRIPT, EVAL, DEBUG, CONFIG, MODULE, ACL, and keys outside its patterns.
// A token it forges without the key is refused.
func TestLeaderUserCannotReadTheKey(t *testing.T) {
	s := newServer(t)
	s.install(t, redisfence.Config{})
	f, do := leader(t, s)
	ctx := context.Background()
	if _, err := f.Do(ctx, "{acct:1}:fence", sign(t, ep(3, "a")), []string{"{acct:1}:bal"}, redisfence.Cmd{"INCRBY", "{acct:1}:bal", 5}); err != nil {
		t.Fatalf("the leaders' user cannot write through the fence: %v", err)
	}
	refused := [][]any{
		{"function", "list", "withcode"},
		{"function", "dump"},
		{"function", "load", "replace", "#!lua name=termfence\nredis.register_function('termfence_write', function() return 1 end)"},
		{"function", "delete", "termfence"},
		{"function", "flush"},
		{"script", "load", "return 1"},
		{"eval", "return redis.call('function', 'list', 'withcode')", "0"},
		{"debug", "object", "{acct:1}:fence"},
		{"debug", "jmap"},
		{"config", "get", "*"},
		{"config", "set", "appendfsync", "no"},
		{"module", "list"},
		{"acl", "list"},
		{"flushall"},
		{"keys", "*"},
		{"get", "secret-elsewhere"},
		{"set", "termfence-key", "x"},
		{"fcall", "termfence_write", "1", "outside-patterns", sign(t, ep(4, "a"))},
	}
	for _, c := range refused {
		err := do(c...)
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("the leaders' user ran %v: %v", c[:2], err)
		}
	}
	// A forger without the key: tokens signed with a guess, and one copied
	// with its epoch changed, are refused, and the fence stays where it was.
	forged := strings.Replace(sign(t, ep(3, "a")), "/3/", "/1000000/", 1)
	if err := f.Admit(ctx, "{acct:1}:fence", forged); !errors.Is(err, storageguard.ErrUnauthenticated) {
		t.Errorf("forged token: %v", err)
	}
	if h, _ := f.Highest(ctx, "{acct:1}:fence"); h != ep(3, "a") {
		t.Errorf("forged token moved the fence to %v", h)
	}
}

// TestAudit: Audit reports appendfsync not always, users that may run
// scripts, FUNCTION, DEBUG, CONFIG or MODULE, users without a password,
// and the library missing or changed; the leaders' user of LeaderUser is
// not reported.
func TestAudit(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	kinds := func() map[redisfence.WeaknessKind][]string {
		ws, err := redisfence.Audit(ctx, s.admin, "")
		if err != nil {
			t.Fatal(err)
		}
		m := map[redisfence.WeaknessKind][]string{}
		for _, w := range ws {
			m[w.Kind] = append(m[w.Kind], w.User)
		}
		return m
	}
	if k := kinds(); len(k[redisfence.WeakMissing]) != 1 {
		t.Errorf("no library: %v", k)
	}
	s.install(t, redisfence.Config{})
	leader(t, s)
	s.admin.Do(ctx, "acl", "setuser", "scripter", "on", ">scripter-password-123", "~*", "+@all", "-config", "-debug")
	s.admin.Do(ctx, "acl", "setuser", "reader", "on", ">reader-password-123", "~*", "+get")
	s.admin.Do(ctx, "acl", "setuser", "disabled", "off", "nopass", "+@all")
	k := kinds()
	if len(k[redisfence.WeakMissing])+len(k[redisfence.WeakChanged])+len(k[redisfence.WeakNotDurable]) != 0 {
		t.Errorf("installed, durable: %v", k)
	}
	if got := k[redisfence.WeakScripting]; len(got) != 1 || got[0] != "scripter" {
		t.Errorf("users that may run scripts: %v, want [scripter]", got)
	}
	// The tests' admin is the default user, enabled without a password.
	if got := k[redisfence.WeakNoPassword]; len(got) != 1 || got[0] != "default" {
		t.Errorf("users without a password: %v, want [default]", got)
	}
	s.admin.ConfigSet(ctx, "appendfsync", "everysec")
	if k := kinds(); len(k[redisfence.WeakNotDurable]) != 1 {
		t.Errorf("appendfsync everysec: %v", k)
	}
	// An edited library: same functions, one check less.
	code, err := s.admin.FunctionList(ctx, redisLibQuery()).Result()
	if err != nil || len(code) != 1 {
		t.Fatal(code, err)
	}
	edited := strings.Replace(code[0].Code, "if ep.term < hi.term then", "if false then", 1)
	if edited == code[0].Code {
		t.Fatal("the library's stale check was not found")
	}
	if err := s.admin.FunctionLoadReplace(ctx, edited).Err(); err != nil {
		t.Fatal(err)
	}
	if k := kinds(); len(k[redisfence.WeakChanged]) != 1 {
		t.Errorf("edited library: %v", k)
	}
}
