package pgtrigger

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// The SQLSTATEs of the guard's refusals, class TF (not a standard class).
// Every refusal aborts the statement, and so the transaction, unless the
// client rolls back to a savepoint.
const (
	// CodeNoToken: the transaction presented no token (termfence.token
	// unset or empty).
	CodeNoToken = "TF001"
	// CodeMalformed: the token is not a token: too long (more than
	// epoch.MaxTokenLen bytes), an unknown version, not
	// cluster/term/leader, a term of 0, above the highest valid term, or
	// not canonical decimal, a name outside [A-Za-z0-9._-] or longer than
	// 64 bytes.
	CodeMalformed = "TF002"
	// CodeUnsigned: an unsigned (plain) token on a table that accepts
	// signed tokens only.
	CodeUnsigned = "TF003"
	// CodeBadSignature: a signed token whose signature does not verify
	// under the cluster's key (forged, altered, signed with another key,
	// or with an algorithm the database cannot verify, ed25519), or a
	// cluster with no stored key.
	CodeBadSignature = "TF004"
	// CodeForeign: an authentic token of another cluster than the table's,
	// or than the one its fence row belongs to.
	CodeForeign = "TF005"
	// CodeStale: the token's epoch is older than the resource's highest:
	// its leader was deposed.
	CodeStale = "TF006"
	// CodeConflict: the token's term is the highest but names another
	// leader.
	CodeConflict = "TF007"
	// CodeFenceRegress: an UPDATE, DELETE or TRUNCATE of the fence table
	// that would lower, move or remove a high-water mark.
	CodeFenceRegress = "TF008"
	// CodeMisconfigured: the guard's trigger was created by hand in a way
	// Install never does (not BEFORE … FOR EACH STATEMENT, or wrong
	// arguments, or by an older release), or a role other than the owner
	// holds TRIGGER on the guarded tree or the fence table, or a trigger
	// there was added after Install: every write is refused (closed) until
	// the owner removes it and runs Install again.
	CodeMisconfigured = "TF009"
	// CodeFenceUnverified: a role other than the fence table's owner
	// created or raised a row of termfence_fence of a cluster whose key is
	// in the database, and the row is not the epoch of the token its
	// transaction presented. (With no token, or one that does not verify,
	// the refusal is CodeNoToken … CodeBadSignature, as the guard's.)
	CodeFenceUnverified = "TF010"
)

// Refusal returns the storageguard or epoch error that a guard's refusal in
// err stands for, or nil if err holds none (no *pgconn.PgError with a TF
// SQLSTATE): *storageguard.StaleError for CodeStale, *ConflictError for
// CodeConflict, *ForeignError for CodeForeign (all naming the resource and
// epochs the guard reported), an error matching
// storageguard.ErrUnauthenticated for CodeNoToken, CodeUnsigned (also
// epoch.ErrUnsigned), CodeBadSignature (also epoch.ErrBadSignature) and
// CodeFenceUnverified, and one matching epoch.ErrMalformed for
// CodeMalformed. The *pgconn.PgError
// stays reachable with errors.As.
func Refusal(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "TF") {
		return nil
	}
	d := detail(pe.Detail)
	switch pe.Code {
	case CodeNoToken:
		return fmt.Errorf("%w: %w", storageguard.ErrUnauthenticated, pe)
	case CodeUnsigned:
		return fmt.Errorf("%w: %w: %w", storageguard.ErrUnauthenticated, epoch.ErrUnsigned, pe)
	case CodeBadSignature:
		return fmt.Errorf("%w: %w: %w", storageguard.ErrUnauthenticated, epoch.ErrBadSignature, pe)
	case CodeMalformed:
		return fmt.Errorf("%w: %w", epoch.ErrMalformed, pe)
	case CodeFenceUnverified:
		return fmt.Errorf("%w: %w", storageguard.ErrUnauthenticated, pe)
	case CodeStale:
		return fmt.Errorf("%w (%w)", &storageguard.StaleError{Resource: d.resource, Presented: d.presented, Highest: d.highest}, pe)
	case CodeConflict:
		return fmt.Errorf("%w (%w)", &storageguard.ConflictError{Resource: d.resource, Presented: d.presented, Highest: d.highest}, pe)
	case CodeForeign:
		cluster := d.highest.Cluster
		if cluster == "" {
			cluster = d.cluster
		}
		return fmt.Errorf("%w (%w)", &storageguard.ForeignError{Resource: d.resource, Presented: d.presented, Cluster: cluster}, pe)
	}
	return fmt.Errorf("pgtrigger: refused (%w)", pe)
}

// details are the epochs a refusal's DETAIL names, one "key: value" per
// line; the resource comes last, since it may hold any character.
type details struct {
	presented, highest epoch.Epoch
	cluster, resource  string
}

func detail(s string) details {
	var d details
	for s != "" {
		line, rest, _ := strings.Cut(s, "\n")
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "presented":
			d.presented, _ = epoch.Parse(v)
		case "highest":
			d.highest, _ = epoch.Parse(v)
		case "cluster":
			d.cluster = v
		case "resource":
			d.resource = strings.TrimPrefix(s, "resource: ")
			return d
		}
		s = rest
	}
	return d
}
