package pgtrigger

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// DefaultSchema is the private schema Install uses when Config.Schema is
// empty.
const DefaultSchema = "termfence_private"

// maxIdentLen is PostgreSQL's longest identifier (NAMEDATALEN-1), in bytes.
const maxIdentLen = 63

// Config says which table Install guards, against which fence row, and
// which tokens it accepts. The zero value is not valid: Table, Resource and
// Cluster are required.
type Config struct {
	// Table is the table to guard, as PostgreSQL would name it on the
	// pool's connections: "ledger", "accounts.ledger", or with quoted
	// identifiers ("\"Ledger\""). It must be an ordinary or a partitioned
	// table; its partitions and inheritance children are guarded too.
	Table string
	// Resource is the fence resource that the table's writes are checked
	// against and raise: its row in pgfence's table termfence_fence. Give
	// it the name that Go writers of the same data pass to pgfence's Tx, so
	// that both see one high-water mark. 1 to storageguard.MaxResourceLen
	// bytes of UTF-8, without NUL (a PostgreSQL text value).
	Resource string
	// Cluster is the election group whose tokens the table accepts (an
	// epoch name); a token of another cluster is refused (CodeForeign).
	// For a table that belongs to one role of a group (election roles),
	// give the role's cluster, "<group>.<role>": the table then takes only
	// that role's tokens, and the keys are installed under that name.
	Cluster string
	// HMACKey is Cluster's HMAC-SHA256 key without a key ID, the one its
	// leaders sign "tf1:hs256:..." tokens with (epoch.NewHMAC): at least
	// epoch.MinHMACKeyLen bytes.
	HMACKey []byte
	// HMACKeys are Cluster's HMAC-SHA256 keys with key IDs, by ID: tokens
	// "tf1:hs256.<ID>:..." are verified under the key of that ID (the ID is
	// signed; docs/TOKEN.md). Each ID is 1 to 32 bytes of [A-Za-z0-9_-],
	// each key at least epoch.MinHMACKeyLen bytes. Several keys let a
	// shared secret be rotated: Install with the old and the new key, then
	// switch the leaders to the new one, then Install with the new one only.
	//
	// Install stores HMACKey and HMACKeys in the private schema as the
	// cluster's whole key set, replacing the one stored (all tables of a
	// cluster share it). With neither, Install keeps the stored set, and
	// fails with ErrNoKey if there is none, unless AllowPlain.
	HMACKeys map[string][]byte
	// AllowPlain makes the table also accept unsigned tokens (the epoch's
	// text form, epoch.Plain). Signed tokens are still verified. Anyone who
	// can write the table can then present any epoch, including a forged
	// huge term that locks every real leader out: allow it only where every
	// writer is trusted. False (the zero value): signed tokens only.
	AllowPlain bool
	// Schema is the private schema that holds the keys and the guard's
	// functions. Install creates it, owned by the installing role, and
	// grants nobody else anything on it. Every table guarded through one
	// private schema checks the same fence table (termfence_fence in the
	// installing connection's current schema). Empty: DefaultSchema.
	Schema string
}

// Validate reports whether c can be installed. The error wraps
// storageguard.ErrBadConfig.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("pgtrigger: %w: "+format, append([]any{storageguard.ErrBadConfig}, a...)...)
	}
	if c.Table == "" {
		return bad("no table")
	}
	if len(c.Table) > 2*maxIdentLen+5 || strings.IndexByte(c.Table, 0) >= 0 || !utf8.ValidString(c.Table) {
		return bad("table %q is not a PostgreSQL table name", c.Table)
	}
	if err := storageguard.ValidateResource(c.Resource); err != nil {
		return bad("resource: %v", err)
	}
	if strings.IndexByte(c.Resource, 0) >= 0 || !utf8.ValidString(c.Resource) {
		return bad("resource %q is not UTF-8 text without NUL", c.Resource)
	}
	if err := epoch.ValidateName(c.Cluster); err != nil {
		return bad("cluster: %v", err)
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
	if s := c.schema(); len(s) > maxIdentLen || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		return bad("schema %q is not a PostgreSQL identifier", s)
	}
	return nil
}

// key is one HMAC key as the guard stores it: id is "" for a key without
// an ID.
type key struct {
	id     string
	secret []byte
}

// keys is the key set Install stores for the cluster, empty to keep the
// stored one.
func (c Config) keys() []key {
	var ks []key
	if c.HMACKey != nil {
		ks = append(ks, key{secret: c.HMACKey})
	}
	for id, k := range c.HMACKeys {
		ks = append(ks, key{id: id, secret: k})
	}
	return ks
}

func (c Config) schema() string {
	if c.Schema == "" {
		return DefaultSchema
	}
	return c.Schema
}
