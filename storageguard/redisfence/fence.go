package redisfence

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// MaxCmdArgs bounds the arguments of one command run through Do, command
// name included (the Lua stack unpacks them); the library refuses longer
// commands too, before it writes.
const MaxCmdArgs = 1000

// Cmd is one Redis command and its arguments, as go-redis takes them:
// Cmd{"SET", "{acct:42}:balance", 100}.
type Cmd []any

// Options tunes Open. The zero value opens DefaultLibrary and checks
// durability through the fence's own client.
type Options struct {
	// Library is the name Install gave the library. Empty: DefaultLibrary.
	Library string
	// Admin is the client Open checks the server's persistence settings
	// with (CONFIG GET). The leaders' user of LeaderUser may not run
	// CONFIG: give a client of an administrative user here. Nil: the
	// fence's own client.
	Admin redis.UniversalClient
}

// Fence writes to Redis through the installed library: every write
// presents a token, and Redis checks it and writes in one atomic step. It
// is safe for concurrent use; it does not own the client.
type Fence struct {
	rdb     redis.UniversalClient
	write   string
	check   string
	highest string
	cluster string
	closed  atomic.Bool
}

// Open checks that the server behind rdb syncs every write before it
// replies (appendonly yes, appendfsync always; ErrNotDurable otherwise)
// and has the library installed (ErrNotInstalled otherwise), and returns a
// Fence that writes through it. The check is made once: Audit reports a
// setting changed later.
func Open(ctx context.Context, rdb redis.UniversalClient, opts Options) (*Fence, error) {
	if rdb == nil {
		return nil, errors.New("redisfence: Open: nil client")
	}
	lib := opts.Library
	if lib == "" {
		lib = DefaultLibrary
	}
	if err := validLibrary(lib); err != nil {
		return nil, fmt.Errorf("redisfence: %w: %v", storageguard.ErrBadConfig, err)
	}
	admin := opts.Admin
	if admin == nil {
		admin = rdb
	}
	if err := checkDurable(ctx, admin); err != nil {
		return nil, err
	}
	info, err := rdb.FCallRO(ctx, lib+"_info", nil).Slice()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			return nil, fmt.Errorf("%w: library %q: %v", ErrNotInstalled, lib, err)
		}
		return nil, fmt.Errorf("redisfence: Open: %w", err)
	}
	if len(info) < 2 || info[0] != Format {
		return nil, fmt.Errorf("%w: library %q answers %v, not format %s (run Install)", ErrNotInstalled, lib, info, Format)
	}
	cluster, _ := info[1].(string)
	return &Fence{rdb: rdb, write: lib + "_write", check: lib + "_check", highest: lib + "_highest", cluster: cluster}, nil
}

// checkDurable fails with ErrNotDurable unless the server has appendonly
// yes and appendfsync always.
func checkDurable(ctx context.Context, c redis.UniversalClient) error {
	m, err := c.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return fmt.Errorf("redisfence: cannot read the server's persistence settings (CONFIG GET; give Options.Admin a client that may): %w", err)
	}
	if m["appendonly"] != "yes" || m["appendfsync"] != "always" {
		return fmt.Errorf("%w: appendonly %q, appendfsync %q; want yes and always (CONFIG SET appendonly yes; CONFIG SET appendfsync always; and in redis.conf)", ErrNotDurable, m["appendonly"], m["appendfsync"])
	}
	return nil
}

// Cluster is the cluster whose tokens the installed library accepts.
func (f *Fence) Cluster() string { return f.cluster }

// Do presents token for resource and, if the library admits it, runs cmds
// in the same atomic call: resource is the fence key, which the library
// raises to the token's epoch when that is newer; keys are every key cmds
// touch (Redis Cluster: resource and keys in one hash slot, so give them
// one {tag}: "{acct:42}:fence", "{acct:42}:balance"). It returns the
// commands' replies, in order, or the refusal, having written nothing:
// *storageguard.StaleError (ErrStale), *storageguard.ConflictError,
// *storageguard.ForeignError, errors matching ErrUnauthenticated or
// epoch.ErrMalformed, ErrCorrupt, ErrBadCall. A command that fails gives
// *CommandError. No commands: Admit.
//
// Redis replied, so the raise and the writes are on disk (Open checked
// appendfsync always). A network error leaves the outcome unknown; note
// that go-redis retries failed commands (Options.MaxRetries) and so may
// run cmds twice.
func (f *Fence) Do(ctx context.Context, resource, token string, keys []string, cmds ...Cmd) ([]any, error) {
	cmd, err := f.queue(ctx, f.rdb, resource, token, keys, cmds)
	if err != nil {
		return nil, err
	}
	return Result(resource, cmd)
}

// Queue adds the write Do would make to pipe (a redis.Pipeliner, or any
// Cmdable) and returns its command; read its outcome with Result once the
// pipeline ran. A leader can pipeline many fenced writes in one round
// trip; each is checked on its own, in order.
func (f *Fence) Queue(ctx context.Context, pipe redis.Cmdable, resource, token string, keys []string, cmds ...Cmd) (*redis.Cmd, error) {
	return f.queue(ctx, pipe, resource, token, keys, cmds)
}

func (f *Fence) queue(ctx context.Context, c redis.Cmdable, resource, token string, keys []string, cmds []Cmd) (*redis.Cmd, error) {
	if f.closed.Load() {
		return nil, storageguard.ErrClosed
	}
	if err := storageguard.ValidateResource(resource); err != nil {
		return nil, fmt.Errorf("redisfence: %w", err)
	}
	n := 1
	for i, c := range cmds {
		if len(c) == 0 || len(c) > MaxCmdArgs {
			return nil, fmt.Errorf("%w: command %d has %d arguments, want 1..%d", ErrBadCall, i, len(c), MaxCmdArgs)
		}
		n += 1 + len(c)
	}
	args := make([]any, 0, n)
	args = append(args, token)
	for _, c := range cmds {
		args = append(args, len(c))
		args = append(args, c...)
	}
	k := make([]string, 0, 1+len(keys))
	k = append(k, resource)
	k = append(k, keys...)
	return c.FCall(ctx, f.write, k, args...), nil
}

// Result returns the replies of a write queued with Queue, or its refusal
// as Do would.
func Result(resource string, cmd *redis.Cmd) ([]any, error) {
	v, err := cmd.Result()
	if err != nil {
		if r := Refusal(resource, err); r != nil {
			return nil, r
		}
		return nil, fmt.Errorf("redisfence: %w", err)
	}
	out, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redisfence: unexpected reply %T", v)
	}
	return out, nil
}

// Admit presents token for resource and raises the fence key if the
// token's epoch is newer, writing nothing else.
func (f *Fence) Admit(ctx context.Context, resource, token string) error {
	_, err := f.Do(ctx, resource, token, nil)
	return err
}

// Check refuses token as Do would, without raising the fence key or
// writing. Use it to fence reads; a read that passed Check may be stale
// by the time it is used.
func (f *Fence) Check(ctx context.Context, resource, token string) error {
	if f.closed.Load() {
		return storageguard.ErrClosed
	}
	if err := storageguard.ValidateResource(resource); err != nil {
		return fmt.Errorf("redisfence: %w", err)
	}
	err := f.rdb.FCallRO(ctx, f.check, []string{resource}, token).Err()
	if err != nil {
		if r := Refusal(resource, err); r != nil {
			return r
		}
		return fmt.Errorf("redisfence: %w", err)
	}
	return nil
}

// Highest returns the epoch the fence key holds, or the zero Epoch if it
// holds none.
func (f *Fence) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if f.closed.Load() {
		return epoch.Epoch{}, storageguard.ErrClosed
	}
	if err := storageguard.ValidateResource(resource); err != nil {
		return epoch.Epoch{}, fmt.Errorf("redisfence: %w", err)
	}
	s, err := f.rdb.FCallRO(ctx, f.highest, []string{resource}).Text()
	if errors.Is(err, redis.Nil) {
		return epoch.Epoch{}, nil
	}
	if err != nil {
		if r := Refusal(resource, err); r != nil {
			return epoch.Epoch{}, r
		}
		return epoch.Epoch{}, fmt.Errorf("redisfence: %w", err)
	}
	ep, err := epoch.Parse(s)
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("%w: %q: %v", ErrCorrupt, resource, err)
	}
	return ep, nil
}

// Close makes every later call fail with storageguard.ErrClosed. It does
// not close the client.
func (f *Fence) Close() error {
	f.closed.Store(true)
	return nil
}
