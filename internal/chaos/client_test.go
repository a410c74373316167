package chaos

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestClassify(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	cases := []struct {
		name     string
		status   int
		body     string
		err      error
		want     Outcome
		term     uint64
		leader   string
		highest  uint64
		pending  bool
		contract bool
		hint     string
	}{
		{name: "acked", status: 200, body: `{"ok":true,"term":7,"leader":"n2"}`, want: Acked, term: 7, leader: "n2"},
		{name: "200 without epoch", status: 200, body: `{"ok":true}`, want: Indeterminate, contract: true},
		{name: "200 not json", status: 200, body: `ok`, want: Indeterminate, contract: true},
		{name: "stale", status: 409, body: `{"code":"stale_epoch","error":"storageguard: stale epoch","presented":"chaos/6/n1","highest":"chaos/7/n2"}`,
			want: Refused, term: 6, leader: "n1", highest: 7},
		{name: "409 without body", status: 409, body: ``, want: RefusedAuth, contract: true},
		{name: "409 without presented", status: 409, body: `{"error":"stale"}`, want: RefusedAuth, contract: true},
		{name: "unauthenticated", status: 401, body: `{"code":"missing_token","error":"no token"}`, want: RefusedAuth},
		{name: "403 plain text", status: 403, body: `forbidden`, want: RefusedAuth, contract: true},
		{name: "not leader", status: 503, body: `{"error":"not leader","code":"not_leader","leader":"n3","leader_http":"127.0.0.1:1"}`, want: NotLeader, hint: "n3"},
		{name: "store refused the dial", status: 502, body: `{"error":"node: store write: Post \"http://127.0.0.1:9/write\": dial tcp 127.0.0.1:9: connect: connection refused"}`, want: StoreDead},
		{name: "store dial prohibited (netlab)", status: 502, body: `{"error":"node: store write: Post \"http://198.18.0.6:7000/write\": dial tcp 198.18.0.6:7000: connect: permission denied"}`, want: StoreDead},
		{name: "no route to the store (netlab)", status: 502, body: `{"error":"node: store write: Post \"http://198.18.0.6:7000/write\": dial tcp 198.18.0.6:7000: connect: no route to host"}`, want: StoreDead},
		{name: "store dial timed out (netlab)", status: 502, body: `{"error":"node: store write: Post \"http://198.18.0.6:7000/write\": dial tcp 198.18.0.6:7000: i/o timeout"}`, want: StoreDead},
		{name: "store connection reset", status: 502, body: `{"error":"node: store write: Post \"http://198.18.0.6:7000/write\": read tcp 198.18.0.2:4000->198.18.0.6:7000: read: connection reset by peer"}`, want: Indeterminate},
		{name: "store died mid-write", status: 502, body: `{"error":"node: store write: Post \"http://127.0.0.1:9/write\": EOF"}`, want: Indeterminate},
		{name: "node gave up on a live store", status: 502, body: `{"error":"node: store write: context deadline exceeded"}`, want: Indeterminate, pending: true},
		{name: "store 500", status: 500, body: `{"error":"backend"}`, want: Indeterminate},
		{name: "bad request", status: 400, body: `{"error":"bad"}`, want: Indeterminate, contract: true},
		{name: "node unreachable", err: dialErr, want: Unreachable},
		{name: "no answer", err: context.DeadlineExceeded, want: Indeterminate, pending: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var op Op
			hint := classify(&op, c.status, []byte(c.body), c.err)
			if op.Outcome != c.want || op.Term != c.term || op.Leader != c.leader || op.HighestTerm != c.highest ||
				op.Pending != c.pending || (op.Contract != "") != c.contract || hint != c.hint {
				t.Fatalf("got %v term=%d leader=%q highest=%d pending=%t contract=%q hint=%q", op.Outcome, op.Term, op.Leader,
					op.HighestTerm, op.Pending, op.Contract, hint)
			}
		})
	}
}
