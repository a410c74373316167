package redisfence

import (
	"fmt"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// DefaultLibrary is the function library's name when Config.Library is
// empty. Its functions are DefaultLibrary+"_write", "_check", "_highest"
// and "_info".
const DefaultLibrary = "termfence"

// DefaultCacheSize is how many verified tokens the library remembers when
// Config.CacheSize is zero.
const DefaultCacheSize = 1024

// maxLibraryLen bounds a library name, in bytes.
const maxLibraryLen = 64

// Config says which tokens the installed library accepts. The zero value is
// not valid: Cluster and at least one key are required.
type Config struct {
	// Cluster is the election group whose tokens the library accepts (an
	// epoch name); an authentic token of another cluster is refused
	// (storageguard.ErrForeignCluster). For data that belongs to one role
	// of a group, give the role's cluster, "<group>.<role>".
	Cluster string
	// HMACKey is Cluster's HMAC-SHA256 key without a key ID, the one its
	// leaders sign "tf1:hs256:..." tokens with (epoch.NewHMAC): at least
	// epoch.MinHMACKeyLen bytes, or nil.
	HMACKey []byte
	// HMACKeys are Cluster's keys with key IDs, by ID: tokens
	// "tf1:hs256.<ID>:..." are verified under the key of that ID. To
	// rotate a key, Install with the old and the new one, switch the
	// leaders to the new one, then Install with the new one only.
	//
	// With neither HMACKey nor HMACKeys, Install fails with ErrNoKey: Redis
	// cannot verify Ed25519 tokens, and a fence that took unsigned ones
	// would let anyone who may call it lock the real leaders out.
	HMACKeys map[string][]byte
	// Library is the function library's name, 1 to 64 bytes of
	// [A-Za-z0-9_]; one library per cluster on a server. Empty:
	// DefaultLibrary.
	Library string
	// CacheSize bounds the verified tokens the library keeps in the Lua
	// state, so that a leader's every write after its first skips the
	// HMAC. A token is cached only once it verified, and the cache only
	// says a token is authentic, never that it is current. Zero:
	// DefaultCacheSize; negative: no cache. When full it is emptied.
	CacheSize int
}

// Validate reports whether c can be installed. The error wraps
// storageguard.ErrBadConfig (or is ErrNoKey for a config without a key).
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("redisfence: %w: "+format, append([]any{storageguard.ErrBadConfig}, a...)...)
	}
	if err := epoch.ValidateName(c.Cluster); err != nil {
		return bad("cluster: %v", err)
	}
	if err := validLibrary(c.library()); err != nil {
		return bad("%v", err)
	}
	if c.HMACKey != nil && len(c.HMACKey) < epoch.MinHMACKeyLen {
		return bad("HMAC key is %d bytes, need at least %d", len(c.HMACKey), epoch.MinHMACKeyLen)
	}
	for id, k := range c.HMACKeys {
		if !epoch.ValidKeyID(id) {
			return bad("HMAC key ID %q: want 1..%d bytes of [A-Za-z0-9_-]", id, epoch.MaxKeyIDLen)
		}
		if len(k) < epoch.MinHMACKeyLen {
			return bad("HMAC key %q is %d bytes, need at least %d", id, len(k), epoch.MinHMACKeyLen)
		}
	}
	if c.HMACKey == nil && len(c.HMACKeys) == 0 {
		return fmt.Errorf("%w for cluster %q: give Config.HMACKey or HMACKeys (an Ed25519-only cluster cannot be fenced in Redis, whose Lua has no Ed25519: sign the Redis writers' tokens with HMAC)", ErrNoKey, c.Cluster)
	}
	return nil
}

func (c Config) library() string {
	if c.Library == "" {
		return DefaultLibrary
	}
	return c.Library
}

func (c Config) cacheSize() int {
	switch {
	case c.CacheSize == 0:
		return DefaultCacheSize
	case c.CacheSize < 0:
		return 0
	}
	return c.CacheSize
}

// validLibrary refuses a library name Redis would refuse, or that would
// not make valid function names.
func validLibrary(name string) error {
	if name == "" || len(name) > maxLibraryLen {
		return fmt.Errorf("library name %q: want 1..%d bytes of [A-Za-z0-9_]", name, maxLibraryLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return fmt.Errorf("library name %q: want 1..%d bytes of [A-Za-z0-9_]", name, maxLibraryLen)
		}
	}
	return nil
}
