package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
)

// nodeRoles is a node's role configuration: the roles its election group
// assigns (election Config.Roles) and, with -role-write-every, a writer per
// role that writes the role's store resource (role/<name>) while this node
// holds the role, with the role's token.
type nodeRoles struct {
	names      []string
	writeEvery time.Duration
}

func (r *nodeRoles) flags(fs *flag.FlagSet) {
	fs.Func("roles", "comma-separated role names the group assigns to its members (one owner each, each with its own fencing epoch)", func(s string) error {
		for _, name := range strings.Split(s, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if err := epoch.ValidateName(name); err != nil {
					return fmt.Errorf("role %q: %v", name, err)
				}
				r.names = append(r.names, name)
			}
		}
		return nil
	})
	fs.DurationVar(&r.writeEvery, "role-write-every", 0, "while holding a role, write its store resource (role/NAME) this often with the role's token (0: no role writers; needs -store)")
}

// startRoleWriters starts one writer per configured role (the application's
// goroutines: the library runs none per role).
func (n *node) startRoleWriters(ctx context.Context) {
	if n.cfg.roles.writeEvery <= 0 || n.store == nil {
		return
	}
	for _, r := range n.cfg.roles.names {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			err := n.el.LeadRole(ctx, r, func(lctx context.Context, ep epoch.Epoch) error {
				return n.roleWrites(ctx, lctx, r, ep)
			})
			if err != nil && ctx.Err() == nil {
				n.log.Warn("role writer stopped", "role", r, "error", err)
			}
		}()
	}
}

// roleWrites writes role r's resource under one grant, like leadWrites: the
// token is signed once, and on losing the role the writer makes one last
// write with it, as a paused process would; the store's fence refuses it
// once the role's new owner wrote.
func (n *node) roleWrites(ctx, lctx context.Context, r string, ep epoch.Epoch) error {
	return n.writeUnder(ctx, lctx, ep, writer{resource: roleResource(r), every: n.cfg.roles.writeEvery,
		log: n.log.With("role", r), what: "role write", held: "grant"})
}

// roleStatus is the role part of GET /status.
func (n *node) roleStatus() (owners, held map[string]string) {
	owners = n.el.RoleOwners()
	if len(owners) == 0 {
		owners = nil
	}
	for _, r := range n.el.HeldRoles() {
		if ep, err := n.el.RoleEpoch(r); err == nil {
			if held == nil {
				held = make(map[string]string)
			}
			held[r] = ep.String()
		}
	}
	return owners, held
}

// handleRoleWrite serves POST /role-write?role=NAME: a write of role NAME's
// resource (role/NAME) stamped with this node's role token — the grant it
// held when the request arrived, taken before the body is read, as
// handleWrite does for the group's epoch — and relays the store's answer.
// A node that does not hold the role answers 503 "not leader of role" with
// the owner it last applied. The fault suite (internal/chaos) drives role
// writes through it, so that it sees each write's call, answer and epoch.
func (n *node) handleRoleWrite(w http.ResponseWriter, r *http.Request) {
	role := r.URL.Query().Get("role")
	ep, err := n.el.RoleEpoch(role)
	if err != nil {
		var re *election.RoleError
		switch {
		case errors.As(err, &re) && re.Unknown:
			writeError(w, http.StatusNotFound, fmt.Sprintf("node: unknown role %q", role))
		default:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("not leader of role %q: %v", role, err), "leader": n.el.RoleOwners()[role]})
		}
		return
	}
	n.forwardWrite(w, r, ep, func(string) string { return roleResource(role) })
}
