package redisfence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// WeaknessKind says what a Weakness is.
type WeaknessKind string

// The kinds of Weakness Audit reports.
const (
	// WeakNotDurable: appendonly is not yes or appendfsync not always: an
	// acknowledged raise can be lost to a crash.
	WeakNotDurable WeaknessKind = "not-durable"
	// WeakMissing: the library is not installed.
	WeakMissing WeaknessKind = "library-missing"
	// WeakChanged: the library is not what Install loaded (its code was
	// edited, or it is of another format or lacks a function).
	WeakChanged WeaknessKind = "library-changed"
	// WeakScripting: an enabled user may run scripts or functions of its
	// own (EVAL, EVALSHA, SCRIPT, FUNCTION), or DEBUG, CONFIG or MODULE:
	// it can read the library's code, and with it sign tokens, or replace
	// the library.
	WeakScripting WeaknessKind = "user-scripting"
	// WeakNoPassword: an enabled user needs no password (the default user,
	// out of the box): anyone who reaches the server is that user.
	WeakNoPassword WeaknessKind = "no-password"
)

// Weakness is one setting, user or state that weakens the fence.
type Weakness struct {
	Kind WeaknessKind
	// User is the ACL user concerned, or "".
	User string
	// What says it in one line.
	What string
}

func (w Weakness) String() string { return string(w.Kind) + ": " + w.What }

// dryRuns are the commands Audit asks ACL DRYRUN about, for every user.
var dryRuns = [][]any{
	{"eval", "return 1", "0"},
	{"evalsha", "0000000000000000000000000000000000000000", "0"},
	{"script", "load", "return 1"},
	{"function", "list", "withcode"},
	{"function", "load", "x"},
	{"debug", "object", "x"},
	{"config", "get", "x"},
	{"module", "list"},
}

// Audit lists what weakens the fence of library (empty: DefaultLibrary)
// on the server behind admin: appendfsync not always, the library missing
// or changed since Install, enabled users that can run scripts or
// FUNCTION, DEBUG, CONFIG or MODULE (other than admin's own user, which
// must), and enabled users without a password. It changes nothing. admin
// must be allowed CONFIG GET, FUNCTION LIST, ACL LIST, ACL GETUSER and
// ACL DRYRUN.
func Audit(ctx context.Context, admin redis.UniversalClient, library string) ([]Weakness, error) {
	if admin == nil {
		return nil, errors.New("redisfence: Audit: nil client")
	}
	if library == "" {
		library = DefaultLibrary
	}
	if err := validLibrary(library); err != nil {
		return nil, err
	}
	var ws []Weakness
	err := checkDurable(ctx, admin)
	if errors.Is(err, ErrNotDurable) {
		ws = append(ws, Weakness{Kind: WeakNotDurable, What: err.Error()})
	} else if err != nil {
		return nil, err
	}
	libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: library, WithCode: true}).Result()
	if err != nil {
		return nil, fmt.Errorf("redisfence: audit: FUNCTION LIST: %w", err)
	}
	var lib *redis.Library
	for i := range libs {
		if libs[i].Name == library {
			lib = &libs[i]
		}
	}
	switch {
	case lib == nil:
		ws = append(ws, Weakness{Kind: WeakMissing, What: fmt.Sprintf("library %q is not installed: every fenced write fails (run Install)", library)})
	case !checkDigest(lib.Code):
		ws = append(ws, Weakness{Kind: WeakChanged, What: fmt.Sprintf("library %q was changed after Install: its code does not match its digest (run Install)", library)})
	default:
		var names []string
		for _, f := range lib.Functions {
			names = append(names, f.Name)
		}
		sort.Strings(names)
		want := []string{library + "_check", library + "_highest", library + "_info", library + "_write"}
		if !slices.Equal(names, want) {
			ws = append(ws, Weakness{Kind: WeakChanged, What: fmt.Sprintf("library %q has functions %v, want %v (run Install)", library, names, want)})
		}
	}
	me, err := admin.Do(ctx, "acl", "whoami").Text()
	if err != nil {
		return nil, fmt.Errorf("redisfence: audit: ACL WHOAMI: %w", err)
	}
	users, err := admin.Do(ctx, "acl", "users").StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisfence: audit: ACL USERS: %w", err)
	}
	list, err := admin.Do(ctx, "acl", "list").StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisfence: audit: ACL LIST: %w", err)
	}
	enabled := map[string]bool{}
	for _, line := range list {
		// "user <name> on|off ... nopass ..."
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "user" || f[2] != "on" {
			continue
		}
		enabled[f[1]] = true
		if slices.Contains(f, "nopass") {
			ws = append(ws, Weakness{Kind: WeakNoPassword, User: f[1], What: fmt.Sprintf("user %q is enabled without a password: anyone who reaches the server is that user (ACL SETUSER %s >password, or off)", f[1], f[1])})
		}
	}
	for _, u := range users {
		if !enabled[u] || u == me {
			continue
		}
		var can []string
		for _, c := range dryRuns {
			args := append([]any{"acl", "dryrun", u}, c...)
			// DRYRUN answers OK, or a message why not (not an error).
			if r, err := admin.Do(ctx, args...).Text(); err == nil && r == "OK" {
				can = append(can, strings.ToUpper(c[0].(string))+" "+c[1].(string))
			}
		}
		if len(can) > 0 {
			ws = append(ws, Weakness{Kind: WeakScripting, User: u, What: fmt.Sprintf("user %q may run %s: it can read the library's code (and sign tokens) or run code of its own", u, strings.Join(can, ", "))})
		}
	}
	return ws, nil
}
