package hostile

import (
	"bytes"
	"encoding/binary"
	"sync"
)

// attackPrefix: an input whose first byte is at least attackPrefix starts
// with Attacks(v)[b[0]-attackPrefix] (modulo their number), then goes on
// as Generate does with the rest.
const attackPrefix = 0xE0

// AttackSeed returns the input that starts with attack i of Attacks: the
// fuzz target's seed corpus holds one per attack.
func AttackSeed(i int) []byte { return []byte{byte(attackPrefix + i%32)} }

// NumAttacks is the number of named attacks.
const NumAttacks = 24

// Attacks are the named attacks, against target 0 (a
// follower where it matters: v.Leader says who leads, -1 if unknown). Each
// claims an identity a correct node must refuse from this sender, or
// carries content it must refuse, except the first two, whose claimed
// voter identity over plain TCP is indistinguishable from the voter (the
// term window refuses them), and a TimeoutNow from a member that does not
// lead, which must be refused only if v.Leader knows who leads.
func Attacks(v View) []Op {
	ld, known := 0, false
	if v.Leader != nil {
		if l := v.Leader(); l >= 0 {
			ld, known = l, true
		}
	}
	to := (ld + 1) % len(v.Members)
	other := (ld + 2) % len(v.Members)
	var cur, last uint64
	if v.Term != nil {
		cur = v.Term(to)
	}
	if v.LastIndex != nil {
		last = v.LastIndex(to)
	}
	L, O, T := v.Members[ld], v.Members[other], v.Members[to]
	stranger := hdr("mallory", v.Self)
	nonvoter := stranger
	for _, m := range v.Members {
		if !m.Voter {
			nonvoter = hdr(m.ID, m.Addr)
		}
	}
	vote := func(name string, h hdrT, term, lastTerm uint64, must bool) Op {
		return Op{Target: to, Kind: RequestVote, Name: name, MustRefuse: must, Req: rv(h, term, 1<<40, lastTerm, true)}
	}
	app := func(name string, h hdrT, term uint64, es []*logT, must bool) Op {
		return Op{Target: to, Kind: AppendEntries, Name: name, MustRefuse: must, Req: ae(h, term, last, cur, es)}
	}
	snap := func(name string, h hdrT, term uint64, conf []byte) Op {
		data := bytes.Repeat([]byte{0xff}, 4096)
		return Op{Target: to, Kind: InstallSnapshot, Name: name, MustRefuse: true, Data: data, Req: is(h, term, last+100, min(term, cur+1), conf, int64(len(data)))}
	}
	goodConf, _ := configuration(&src{b: []byte{8}}, v)
	return []Op{
		// huge terms, bad entries and configurations
		vote("RequestVote as "+O.ID+", transfer, term MaxTerm", hdr(O.ID, O.Addr), maxTerm, maxTerm-1, false),
		vote("RequestVote as "+O.ID+", transfer, term MaxTerm-1", hdr(O.ID, O.Addr), maxTerm-1, maxTerm-2, false),
		app("AppendEntries as the leader with a nil entry", hdr(L.ID, L.Addr), cur, []*logT{nil}, true),
		snap("InstallSnapshot as the leader, configuration not msgpack", hdr(L.ID, L.Addr), cur, []byte{0xc1, 0xc1}),
		app("AppendEntries as the leader, LogConfiguration of bad data", hdr(L.ID, L.Addr), cur, []*logT{{Index: last + 1, Term: cur, Type: 5, Data: []byte{0xc1}}}, true),
		{Target: to, Kind: Raw, Name: "the 8 MiB frame of 8 M one-byte maps", MustRefuse: true, Frame: eightMiB()},
		app("AppendEntries as a non-voter, term MaxTerm", nonvoter, maxTerm, nil, true),
		app("AppendEntries as a stranger, nil entry", stranger, cur+1, []*logT{nil}, true),
		snap("InstallSnapshot as the leader, configuration with no voter", hdr(L.ID, L.Addr), cur, mustNoVoter(v)),
		// forged identities and terms past MaxTerm
		vote("RequestVote, empty ID, transfer, term 2^63", hdr("", v.Self), 1<<63, 1<<63, true),
		vote("RequestVote, empty ID and address, term 2^64-2", hdr("", ""), 1<<64-2, 1<<64-2, true),
		vote("RequestVote as a stranger, longer log, transfer", stranger, cur+1, cur, true),
		{Target: to, Kind: RequestPreVote, Name: "RequestPreVote as a stranger", MustRefuse: true, Req: pv(stranger, cur+1, 1<<40, cur)},
		vote("RequestVote as "+O.ID+" at the stranger's address", hdr(O.ID, v.Self), cur+1, cur, O.Addr != v.Self),
		{Target: to, Kind: TimeoutNow, Name: "TimeoutNow as a stranger", MustRefuse: true, Req: tn(stranger)},
		{Target: to, Kind: TimeoutNow, Name: "TimeoutNow, empty ID", MustRefuse: true, Req: tn(hdr("", v.Self))},
		{Target: to, Kind: TimeoutNow, Name: "TimeoutNow as a member that does not lead", MustRefuse: known, Req: tn(hdr(O.ID, O.Addr))},
		app("AppendEntries as a stranger, term 2^62", stranger, 1<<62, nil, true),
		app("AppendEntries as a stranger, next term", stranger, cur+1, nil, true),
		app("AppendEntries, empty ID, term 2^62", hdr("", v.Self), 1<<62, nil, true),
		app("AppendEntries as the leader, term 2^62", hdr(L.ID, L.Addr), 1<<62, nil, true),
		app("AppendEntries as the target itself", hdr(T.ID, T.Addr), cur+1, nil, true),
		snap("InstallSnapshot as a stranger, term 2^62", stranger, 1<<62, goodConf),
		snap("InstallSnapshot as a stranger, next term", stranger, cur+1, goodConf),
	}
}

// eightMiB is the memory-amplification frame: an AppendEntries whose Entries array
// holds 8 M one-byte msgpack maps (built once, shared: never modify it).
var eightMiB = sync.OnceValue(func() []byte {
	var frame bytes.Buffer
	frame.Write([]byte{0, 0x81, 0xa7})
	frame.WriteString("Entries")
	frame.WriteByte(0xdd)
	_ = binary.Write(&frame, binary.BigEndian, uint32(8<<20))
	frame.Write(bytes.Repeat([]byte{0x80}, 8<<20))
	return frame.Bytes()
})

func mustNoVoter(v View) []byte {
	b, _ := configuration(&src{b: []byte{4}}, v)
	return b
}
