package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Leader describes the Redis user the leaders write with (LeaderUser).
type Leader struct {
	// User is the ACL user's name; Password its password (at least 16
	// bytes).
	User, Password string
	// Keys are the key patterns (ACL "~pattern") of the fence keys and the
	// data keys the leaders write through the fence.
	Keys []string
	// Commands are the data commands the fenced writes run ("set",
	// "hset", "incrby", ...): Redis checks each command a function runs
	// against the caller's ACL, so the user needs them. Scripting,
	// administrative and dangerous commands are refused.
	Commands []string
	// Library is the library's name; empty: DefaultLibrary.
	Library string
}

// forbidden are commands a leaders' user must never get: they run code of
// its own, read the library (and so the key), or change the server.
var forbidden = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "script", "function", "fcall", "fcall_ro",
	"debug", "config", "module", "acl", "flushall", "flushdb", "shutdown", "save", "bgsave", "bgrewriteaof",
	"replicaof", "slaveof", "failover", "migrate", "restore", "sync", "psync", "monitor", "client", "keys", "cluster"}

// ACLRule returns the ACL SETUSER rules LeaderUser gives l.User: a fresh
// user that may call the library's functions (FCALL, FCALL_RO), run
// l.Commands on l.Keys, PING, AUTH and HELLO, and nothing else — no
// FUNCTION, SCRIPT, EVAL, DEBUG, CONFIG or MODULE — and no channels.
func ACLRule(l Leader) ([]string, error) {
	if l.User == "" || strings.ContainsAny(l.User, " \t\r\n") {
		return nil, fmt.Errorf("redisfence: LeaderUser: bad user name %q", l.User)
	}
	if len(l.Password) < 16 || strings.ContainsAny(l.Password, " \t\r\n") {
		return nil, errors.New("redisfence: LeaderUser: the password must be at least 16 bytes, without white space")
	}
	if len(l.Keys) == 0 {
		return nil, errors.New("redisfence: LeaderUser: no key patterns")
	}
	rules := []string{"reset", "on", ">" + l.Password, "resetchannels", "-@all",
		"+fcall", "+fcall_ro", "+ping", "+auth", "+hello"}
	for _, k := range l.Keys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return nil, fmt.Errorf("redisfence: LeaderUser: bad key pattern %q", k)
		}
		rules = append(rules, "~"+k)
	}
	for _, c := range l.Commands {
		lc := strings.ToLower(c)
		base, _, _ := strings.Cut(lc, "|")
		if lc == "" || strings.ContainsAny(lc, " \t\r\n@+-~&%>") {
			return nil, fmt.Errorf("redisfence: LeaderUser: bad command %q (name one command, no category)", c)
		}
		for _, f := range forbidden {
			if base == f {
				return nil, fmt.Errorf("redisfence: LeaderUser: command %q would let the leaders' user run code of its own, read the library or change the server", c)
			}
		}
		rules = append(rules, "+"+lc)
	}
	return rules, nil
}

// LeaderUser creates (or resets) the leaders' ACL user on the server
// behind admin with ACLRule(l). It changes the server's users in memory:
// save them (ACL SAVE with an aclfile, or CONFIG REWRITE) to keep them
// across a restart.
func LeaderUser(ctx context.Context, admin redis.UniversalClient, l Leader) error {
	if admin == nil {
		return errors.New("redisfence: LeaderUser: nil client")
	}
	rules, err := ACLRule(l)
	if err != nil {
		return err
	}
	args := []any{"acl", "setuser", l.User}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redisfence: ACL SETUSER %s: %w", l.User, err)
	}
	return nil
}
