package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
)

// routes is the node's HTTP API (documented in README.md, "HTTP API").
func (n *node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/status", n.handleStatus)
	mux.HandleFunc("/cluster", n.handleCluster)
	mux.Handle("/", uiHandler())
	// Every state-changing endpoint goes through mutating (adminguard.go).
	mux.HandleFunc("/write", mutating(n.handleWrite))
	mux.HandleFunc("/role-write", mutating(n.handleRoleWrite)) // node_roles.go
	mux.HandleFunc("/resign", mutating(n.handleResign))
	mux.HandleFunc("/join", mutating(n.handleJoin))
	mux.HandleFunc("/transfer", mutating(n.handleTransfer))
	mux.HandleFunc("/remove", mutating(n.handleRemove))
	mux.HandleFunc("/replace", mutating(n.handleReplace))
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	// Liveness and readiness probes (election.Health): not ready while no
	// leader is known, not live once that lasted 10 heartbeats.
	if h, err := n.el.Health(election.HealthConfig{NoLeaderTimeout: 10 * n.cfg.Heartbeat}); err == nil {
		mux.Handle("GET /livez", h)
		mux.Handle("GET /readyz", h)
	}
	if n.cfg.FaultEndpoint {
		mux.HandleFunc("/fault", mutating(n.handleFault))
	}
	return mux
}

// nodeStatus is the body of GET /status.
type nodeStatus struct {
	ID         string   `json:"id"`
	State      string   `json:"state"`
	Term       uint64   `json:"term"`
	Leader     string   `json:"leader"`
	LeaderAddr string   `json:"leader_addr"`
	LeaderHTTP string   `json:"leader_http"`
	Epoch      string   `json:"epoch"` // "" unless this node holds a confirmed epoch now
	Raft       string   `json:"raft"`
	HTTP       string   `json:"http"`
	Voters     []string `json:"voters"` // this node's latest Raft configuration
	PID        int      `json:"pid"`    // this node's process, for kill -STOP in the README
	// Roles is role -> owner as this node applied the role table; Held is
	// role -> role epoch for the roles this node holds now.
	Roles map[string]string `json:"roles,omitempty"`
	Held  map[string]string `json:"held,omitempty"`
}

func (n *node) handleStatus(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	writeJSON(w, http.StatusOK, n.status())
}

// status is this node's GET /status.
func (n *node) status() nodeStatus {
	st := n.el.Status()
	out := nodeStatus{
		ID: st.ID, State: st.State.String(), Term: st.Term,
		Leader: st.LeaderID, LeaderAddr: st.LeaderAddr, LeaderHTTP: st.LeaderMeta,
		Raft: string(n.faulty.LocalAddr()), HTTP: n.httpAddr, PID: os.Getpid(),
	}
	if f := n.el.Raft().GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				out.Voters = append(out.Voters, string(srv.ID))
			}
		}
	}
	// Epoch() repeats the triple read now: a node that has just stepped
	// down reports no epoch even if Status was read a moment earlier.
	if ep, err := n.epoch(); err == nil { // nodestall.go
		out.Epoch = ep.String()
	}
	out.Roles, out.Held = n.roleStatus() // node_roles.go
	return out
}

// notLeaderBody is the 503 answer of a node that does not hold an epoch:
// {"error":"not leader","leader":"id","leader_http":"addr"}, the leader
// fields empty when no leader is known.
type notLeaderBody struct {
	Error      string `json:"error"`
	Leader     string `json:"leader"`
	LeaderHTTP string `json:"leader_http"`
	Hint       string `json:"hint,omitempty"`
}

// notLeader answers 503 with the leader to retry at.
func (n *node) notLeader(w http.ResponseWriter) {
	id, h := n.leaderInfo()
	body := notLeaderBody{Error: "not leader", Leader: id, LeaderHTTP: h}
	switch {
	case id == "":
		body.Hint = "no leader is known: an election is under way, this node is cut off, or it has not joined a cluster yet; retry"
	case h == "":
		body.Hint = "the leader has not recorded its HTTP address yet; retry"
	}
	writeJSON(w, http.StatusServiceUnavailable, body)
}

// handleWrite forwards a write to the store stamped with this node's token —
// the token of the epoch it held when the request arrived — and relays the
// store's answer (never the token).
func (n *node) handleWrite(w http.ResponseWriter, r *http.Request) {
	// The epoch is taken before the body is read, as the contract says: a
	// node paused while it reads (or sends) stays on the epoch it held when
	// the request arrived, exactly like the paused leader in Kleppmann's example.
	ep, err := n.epoch() // nodestall.go
	if err != nil {
		n.notLeader(w)
		return
	}
	n.forwardWrite(w, r, ep, func(asked string) string {
		if asked == "" {
			return n.cfg.Resource
		}
		return asked
	})
}

// handleResign hands leadership to another voter and answers with the next
// leader. On a follower it does nothing and answers with the leader it
// knows.
func (n *node) handleResign(w http.ResponseWriter, r *http.Request) {
	_, errEp := n.el.Epoch()
	wasLeader := errEp == nil || n.el.Status().State == raft.Leader
	id, h := n.leaderInfo()
	if wasLeader {
		// The handover, then the wait for the next leader to be known.
		ctx, cancel := context.WithTimeout(r.Context(), 8*n.cfg.Heartbeat)
		defer cancel()
		var err error
		id, h, err = n.handOver(ctx, "resign", "")
		if errors.As(err, new(*election.NotLeaderError)) {
			// It stepped down on its own between the two reads: as on a
			// follower, nothing to do.
			id, h, err = "", "", nil
			id, h = n.leaderInfo()
		}
		if err != nil {
			writeError(w, statusOf(err), "node: resign: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "was_leader": wasLeader, "leader": id, "leader_http": h})
}

// joinRequest is the body of POST /join. HTTP is optional: the joining
// node's API address, recorded so that others can point clients at it when
// it leads.
type joinRequest struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	HTTP string `json:"http,omitempty"`
	// Replaces, if set, names the voter the new node replaces:
	// election.ReplaceServer instead of AddMember.
	Replaces string `json:"replaces,omitempty"`
}

// handleJoin adds a voter. Every input is checked before the cluster is
// touched, by election.AddMember itself: the ID's form, the Raft address's
// host:port form (400), and that neither the ID nor the Raft address
// already belongs to another member (409) — a second voter under a known
// address, or a known ID moved to a new address, would cost the quorum. The
// same ID at the same address is a member rejoining (a restarted node, or
// one recording its HTTP address): answered 200 without a configuration
// change. Only the leader can add; a follower answers 503 with the leader's
// ID and HTTP address, and the joining node retries there (it does not
// forward the request itself).
func (n *node) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req joinRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "node: join: "+err.Error())
		return
	}
	n.join(w, r, req)
}

// handleReplace is POST /replace {"replaces": OLD, "id": NEW, "addr":
// RAFTADDR, "http": HTTPADDR}: /join with "replaces" required, for an
// operator replacing a dead voter with a node already running (one started
// with -join ... -replaces OLD asks for it itself).
func (n *node) handleReplace(w http.ResponseWriter, r *http.Request) {
	var req joinRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "node: replace: "+err.Error())
		return
	}
	if req.Replaces == "" {
		writeError(w, http.StatusBadRequest, `node: replace: "replaces" (the ID of the voter to replace) is required`)
		return
	}
	n.join(w, r, req)
}

// join adds req's node as a voter, or makes it replace req.Replaces.
func (n *node) join(w http.ResponseWriter, r *http.Request, req joinRequest) {
	if req.HTTP != "" {
		if err := checkHostPort("http", req.HTTP); err != nil {
			writeError(w, http.StatusBadRequest, "node: join: "+err.Error())
			return
		}
	}
	member := false
	if ms, err := n.el.Members(); err == nil {
		for _, m := range ms {
			member = member || (m.ID == req.ID && m.Addr == req.Addr && m.Voter)
		}
	}
	if req.Replaces != "" {
		if err := epoch.ValidateName(req.Replaces); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("node: join: replaces %q: %v", req.Replaces, err))
			return
		}
	}
	// Long enough for a new node to catch up as a non-voter; a node that
	// has not is answered 409 (refused, it stays a non-voter) and asks
	// again.
	ctx, cancel := context.WithTimeout(r.Context(), 5*n.cfg.Heartbeat)
	defer cancel()
	m := election.Member{ID: req.ID, Addr: req.Addr, Voter: true, Meta: req.HTTP}
	var err error
	if req.Replaces != "" {
		err = n.el.ReplaceServer(ctx, req.Replaces, m)
	} else {
		err = n.el.AddMember(ctx, m)
	}
	if err != nil {
		n.changeError(w, "join", err)
		return
	}
	if !member {
		n.log.Info("added voter", "id", req.ID, "addr", req.Addr, "replaced", req.Replaces)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "state": "committed", "id": req.ID, "addr": req.Addr,
		"already_member": member, "replaced": req.Replaces})
}

// changeBody is the answer to a membership change that did not commit.
type changeBody struct {
	Error string `json:"error"`
	// State is "refused" (nothing changed by the step named in Error: fix
	// what it says and ask again) or "in_flight" (the change may still
	// commit: it is decided once the leader's commit index reaches Index;
	// read /status then).
	State string `json:"state"`
	Index uint64 `json:"index,omitempty"`
}

// changeError answers a membership change that did not commit: 202 in
// flight (with the index that decides it), a not-leader answer (503) for
// a change refused because this node does not lead, and otherwise the
// refusal's status: 409 for a change that would cost the quorum or whose
// new server has not caught up (election.ErrQuorumAtRisk,
// election.ErrNotCaughtUp), see statusOf for the rest.
func (n *node) changeError(w http.ResponseWriter, op string, err error) {
	var ce *election.ChangeError
	switch {
	case errors.As(err, &ce) && ce.State == election.ChangeInFlight:
		writeJSON(w, http.StatusAccepted, changeBody{Error: "node: " + op + ": " + err.Error(), State: "in_flight", Index: ce.Index})
	case errors.Is(err, election.ErrNotLeader):
		n.notLeader(w)
	default:
		writeJSON(w, statusOf(err), changeBody{Error: "node: " + op + ": " + err.Error(), State: "refused"})
	}
}

// idRequest is the body of POST /transfer and POST /remove.
type idRequest struct {
	ID string `json:"id"`
}

// handleTransfer hands leadership to a named voter and answers with the
// next leader (that voter, unless leadership moved on again meanwhile).
// Naming the leader itself changes nothing.
func (n *node) handleTransfer(w http.ResponseWriter, r *http.Request) {
	var id, h string
	handover := func(ctx context.Context, target string) error {
		if target == n.cfg.ID {
			if err := n.el.TransferTo(ctx, target); err != nil {
				return err // not leader: answered with the leader to ask
			}
			id, h = n.leaderInfo()
			return nil
		}
		var err error
		id, h, err = n.handOver(ctx, "transfer", target)
		return err
	}
	if _, ok := n.adminByID(w, r, "transfer", 8*n.cfg.Heartbeat, handover); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "leader": id, "leader_http": h})
}

// handleRemove removes a member from the cluster: 404 for an ID that is
// not a member, 409 for the last voter (a cluster without voters can never
// elect again); election.RemoveServer refuses both.
// A removal that would leave fewer reachable voters than a quorum is
// refused (409), one whose commit this node could not see answers 202 in
// flight (changeError).
func (n *node) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req idRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "node: remove: "+err.Error())
		return
	}
	if err := epoch.ValidateName(req.ID); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node: remove: id %q: %v", req.ID, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*n.cfg.Heartbeat)
	defer cancel()
	if err := n.el.RemoveServer(ctx, req.ID); err != nil {
		n.changeError(w, "remove", err)
		return
	}
	id, h := n.leaderInfo()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "state": "committed", "leader": id, "leader_http": h})
}

// adminByID reads an idRequest and runs fn on its ID. On any failure it
// answers the request itself and returns ok false; on success the caller
// answers.
func (n *node) adminByID(w http.ResponseWriter, r *http.Request, op string, budget time.Duration, fn func(context.Context, string) error) (id string, ok bool) {
	var req idRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "node: "+op+": "+err.Error())
		return "", false
	}
	if err := epoch.ValidateName(req.ID); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node: %s: id %q: %v", op, req.ID, err))
		return "", false
	}
	ctx, cancel := context.WithTimeout(r.Context(), budget)
	defer cancel()
	if err := fn(ctx, req.ID); err != nil {
		if errors.Is(err, election.ErrNotLeader) {
			n.notLeader(w)
			return "", false
		}
		writeError(w, statusOf(err), "node: "+op+": "+err.Error())
		return "", false
	}
	return req.ID, true
}

// statusOf maps an election error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, election.ErrUnknownServer):
		return http.StatusNotFound
	case errors.Is(err, election.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, election.ErrLastVoter), errors.Is(err, election.ErrDuplicateMember),
		errors.Is(err, election.ErrQuorumAtRisk), errors.Is(err, election.ErrNotCaughtUp):
		return http.StatusConflict
	case errors.Is(err, election.ErrNotLeader), errors.Is(err, election.ErrClosed),
		errors.Is(err, election.ErrTransfer), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// faultRequest is the body of POST /fault (TEST ONLY).
type faultRequest struct {
	Op    string   `json:"op"`              // isolate, heal, cut, refuse, delay, drop
	Peers []string `json:"peers,omitempty"` // cut, refuse: Raft addresses
	Delay string   `json:"delay,omitempty"` // delay: a Go duration
	P     float64  `json:"p,omitempty"`     // drop: probability
	Seed  int64    `json:"seed,omitempty"`  // drop: random seed
}

// handleFault drives the node's transport.Faulty. It exists only with
// -fault-endpoint.
func (n *node) handleFault(w http.ResponseWriter, r *http.Request) {
	var req faultRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "node: fault: "+err.Error())
		return
	}
	switch req.Op {
	case "isolate":
		n.faulty.Isolate()
	case "heal":
		n.faulty.Heal()
		n.stallOnHeal() // nodestall.go
	case "cut", "refuse":
		if len(req.Peers) == 0 {
			writeError(w, http.StatusBadRequest, "node: fault: "+req.Op+" needs peers (Raft addresses)")
			return
		}
		peers := make([]raft.ServerAddress, len(req.Peers))
		for i, p := range req.Peers {
			peers[i] = raft.ServerAddress(p)
		}
		if req.Op == "cut" {
			n.faulty.Cut(peers...)
		} else {
			n.faulty.Refuse(peers...) // a firewall that rejects: RPCs and probes fail with ECONNREFUSED
		}
	case "delay":
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("node: fault: delay %q is not a non-negative Go duration", req.Delay))
			return
		}
		n.faulty.Delay(d)
	case "drop":
		if req.P < 0 || req.P > 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("node: fault: drop probability %v is outside [0, 1]", req.P))
			return
		}
		n.faulty.Drop(req.P, req.Seed)
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node: fault: unknown op %q (want isolate, heal, cut, refuse, delay or drop)", req.Op))
		return
	}
	n.log.Warn("fault injected", "op", req.Op, "peers", req.Peers)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "op": req.Op})
}

// postJSON POSTs v as JSON to url and decodes the JSON answer into out.
func (n *node) postJSON(ctx context.Context, url string, v, out any) (int, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return resp.StatusCode, err
	}
	if len(b) > 0 && out != nil {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}
