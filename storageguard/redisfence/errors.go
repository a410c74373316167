package redisfence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

var (
	// ErrNoKey is returned by Install (and Config.Validate) for a config
	// with no HMAC key: Redis's Lua has no Ed25519, so an Ed25519-only
	// cluster cannot be fenced inside Redis.
	ErrNoKey = errors.New("redisfence: no HMAC key for the cluster")
	// ErrNotDurable is returned by Open when the server does not sync its
	// append-only file before it replies (appendonly yes and appendfsync
	// always): a raise it acknowledged could be lost to a crash, and a
	// deposed leader's write accepted after it.
	ErrNotDurable = errors.New("redisfence: server writes are not durable")
	// ErrNotInstalled is returned by Open when the server has no library
	// of the expected name and format (run Install).
	ErrNotInstalled = errors.New("redisfence: fence library not installed")
	// ErrCorrupt is returned when the fence key holds something that is
	// not an epoch (written around the fence): every write is refused
	// until an operator repairs it.
	ErrCorrupt = errors.New("redisfence: fence key holds no epoch")
	// ErrBadCall is returned for a call the library cannot run: a command
	// with no arguments or too many, a command or data key that names the
	// fence key. Nothing was written.
	ErrBadCall = errors.New("redisfence: bad call")
)

// CommandError is returned by Do when the fence admitted the token but
// command Index (0-based) of the call failed. As in a MULTI/EXEC
// transaction, the commands before it, and the fence's raise, stay written;
// the commands after it did not run. It wraps the server's error.
type CommandError struct {
	Index int
	Err   error
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("redisfence: command %d failed: %v (the fence was raised and the commands before it ran)", e.Index, e.Err)
}

func (e *CommandError) Unwrap() error { return e.Err }

// Refusal returns the storageguard or epoch error that a reply of the
// library's functions in err stands for, or nil if err holds none (not an
// error reply of the library): *storageguard.StaleError,
// *storageguard.ConflictError and *storageguard.ForeignError naming
// resource and the epochs the library reported; errors matching
// storageguard.ErrUnauthenticated and epoch.ErrUnsigned or
// epoch.ErrBadSignature for unsigned and forged tokens; epoch.ErrMalformed
// for malformed ones; ErrCorrupt, ErrBadCall, and *CommandError. Use it
// on the *redis.Cmd of a pipelined write (Fence.Queue).
func Refusal(resource string, err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return nil
	}
	msg := re.Error()
	code, rest, _ := strings.Cut(msg, " ")
	if !strings.HasPrefix(code, "TF") {
		return nil
	}
	a, b, _ := strings.Cut(rest, " ")
	presented, _ := epoch.Parse(a)
	switch code {
	case "TFMALFORMED":
		return fmt.Errorf("redisfence: %w: %s", epoch.ErrMalformed, rest)
	case "TFUNSIGNED":
		return fmt.Errorf("redisfence: %w: %w: %s", storageguard.ErrUnauthenticated, epoch.ErrUnsigned, rest)
	case "TFBADSIG":
		return fmt.Errorf("redisfence: %w: %w: %s", storageguard.ErrUnauthenticated, epoch.ErrBadSignature, rest)
	case "TFFOREIGN":
		return &storageguard.ForeignError{Resource: resource, Presented: presented, Cluster: b}
	case "TFSTALE":
		highest, _ := epoch.Parse(b)
		return &storageguard.StaleError{Resource: resource, Presented: presented, Highest: highest}
	case "TFCONFLICT":
		highest, _ := epoch.Parse(b)
		return &storageguard.ConflictError{Resource: resource, Presented: presented, Highest: highest}
	case "TFCORRUPT":
		return fmt.Errorf("%w: %q: %s", ErrCorrupt, resource, rest)
	case "TFBADCALL":
		return fmt.Errorf("%w: %s", ErrBadCall, rest)
	case "TFCMD":
		i, err := strconv.Atoi(a)
		if err != nil {
			break
		}
		return &CommandError{Index: i, Err: errors.New(b)}
	}
	return fmt.Errorf("redisfence: refused: %w", err)
}
