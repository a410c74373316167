// Command forge is a hostile Raft peer for the fault suite: a process that
// is not a member of the cluster and sends each target node, over plain
// TCP with a raw hashicorp/raft NetworkTransport, the forged RPCs of issue
// 16 — RequestVote with no ID, the leadership-transfer flag and term 2^63;
// RequestVote and RequestPreVote from a stranger with a longer log (with a
// sane term and with 2^62); AppendEntries from a stranger with a sane term;
// TimeoutNow from a stranger and from nobody; AppendEntries and
// InstallSnapshot with terms 2^62 and 2^64-2, as a stranger, as nobody and
// as each member (at the member's address, which a plain TCP transport
// cannot tell from the member itself). Every one of them must be refused.
//
//	forge -targets 127.0.0.1:7101,127.0.0.1:7102 [-members n1=127.0.0.1:7101,...] [-timeout 2s]
//
// It prints one line per RPC and a summary, and exits 0 if every RPC was
// answered with an error, 1 if any was accepted (raft handled it), 2 on a
// usage error.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

// member is a server the forger claims to be.
type member struct{ id, addr string }

func run(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("forge", flag.ContinueOnError)
	fs.SetOutput(out)
	targets := fs.String("targets", "", "comma-separated raft addresses to attack (required)")
	members := fs.String("members", "", "comma-separated id=addr of the cluster's members, to claim to be them with impossible terms")
	timeout := fs.Duration("timeout", 2*time.Second, "I/O deadline of each RPC")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *targets == "" {
		fmt.Fprintln(out, "forge: -targets is required")
		return 2
	}
	var ms []member
	for _, kv := range strings.Split(*members, ",") {
		if kv == "" {
			continue
		}
		id, addr, ok := strings.Cut(kv, "=")
		if !ok || id == "" || addr == "" {
			fmt.Fprintf(out, "forge: -members entry %q is not id=addr\n", kv)
			return 2
		}
		ms = append(ms, member{id, addr})
	}
	tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, *timeout, hclog.NewNullLogger())
	if err != nil {
		fmt.Fprintf(out, "forge: %v\n", err)
		return 2
	}
	defer tr.Close()
	self := string(tr.LocalAddr())
	accepted, sent := 0, 0
	for _, target := range strings.Split(*targets, ",") {
		for _, f := range forgeries(self, ms) {
			sent++
			err := f.send(tr, raft.ServerAddress(target))
			if err == nil {
				accepted++
				fmt.Fprintf(out, "%s %s: ACCEPTED\n", target, f.name)
				continue
			}
			fmt.Fprintf(out, "%s %s: refused: %s\n", target, f.name, firstLine(err.Error()))
		}
	}
	fmt.Fprintf(out, "forge: sent=%d accepted=%d\n", sent, accepted)
	if accepted > 0 {
		return 1
	}
	return 0
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

type forged struct {
	name string
	send func(tr *raft.NetworkTransport, to raft.ServerAddress) error
}

func hdr(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// forgeries are the RPCs sent to every target. self is the forger's own
// address.
func forgeries(self string, ms []member) []forged {
	const huge, huger uint64 = 1 << 62, 1<<64 - 2
	vote := func(name string, h raft.RPCHeader, term uint64) forged {
		return forged{name, func(tr *raft.NetworkTransport, to raft.ServerAddress) error {
			return tr.RequestVote("", to, &raft.RequestVoteRequest{
				RPCHeader: h, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true,
			}, &raft.RequestVoteResponse{})
		}}
	}
	appendAs := func(name string, h raft.RPCHeader, term uint64) forged {
		return forged{name, func(tr *raft.NetworkTransport, to raft.ServerAddress) error {
			return tr.AppendEntries("", to, &raft.AppendEntriesRequest{RPCHeader: h, Term: term, LeaderCommitIndex: 1 << 40}, &raft.AppendEntriesResponse{})
		}}
	}
	fs := []forged{
		vote("RequestVote id='' transfer term=2^63", hdr("", self), 1<<63),
		vote("RequestVote id='' addr='' transfer term=2^64-2", hdr("", ""), huger),
		vote("RequestVote id=mallory transfer term=2^62", hdr("mallory", self), huge),
		// A stranger with a sane term, above any a test cluster reaches:
		// refused for not being a voter or member, not for the term.
		vote("RequestVote id=mallory transfer term=1000", hdr("mallory", self), 1000),
		appendAs("AppendEntries id=mallory term=1000", hdr("mallory", self), 1000),
		{"RequestPreVote id=mallory term=2^62", func(tr *raft.NetworkTransport, to raft.ServerAddress) error {
			return tr.RequestPreVote("", to, &raft.RequestPreVoteRequest{RPCHeader: hdr("mallory", self), Term: huge, LastLogIndex: 1 << 40, LastLogTerm: huge}, &raft.RequestPreVoteResponse{})
		}},
		{"TimeoutNow id=mallory", func(tr *raft.NetworkTransport, to raft.ServerAddress) error {
			return tr.TimeoutNow("", to, &raft.TimeoutNowRequest{RPCHeader: hdr("mallory", self)}, &raft.TimeoutNowResponse{})
		}},
		{"TimeoutNow id=''", func(tr *raft.NetworkTransport, to raft.ServerAddress) error {
			return tr.TimeoutNow("", to, &raft.TimeoutNowRequest{RPCHeader: hdr("", self)}, &raft.TimeoutNowResponse{})
		}},
		appendAs("AppendEntries id=mallory term=2^62", hdr("mallory", self), huge),
		appendAs("AppendEntries id='' term=2^64-2", hdr("", self), huger),
		{"InstallSnapshot id=mallory term=2^62", func(tr *raft.NetworkTransport, to raft.ServerAddress) error {
			data := bytes.Repeat([]byte{0xff}, 4096)
			return tr.InstallSnapshot("", to, &raft.InstallSnapshotRequest{
				RPCHeader: hdr("mallory", self), SnapshotVersion: raft.SnapshotVersionMax, Term: huge,
				LastLogIndex: 1 << 40, LastLogTerm: huge, Size: int64(len(data)),
			}, &raft.InstallSnapshotResponse{}, bytes.NewReader(data))
		}},
	}
	for _, m := range ms {
		fs = append(fs,
			appendAs("AppendEntries as "+m.id+" term=2^62", hdr(m.id, m.addr), huge),
			vote("RequestVote as "+m.id+" transfer term=2^63", hdr(m.id, m.addr), 1<<63),
		)
	}
	return fs
}
