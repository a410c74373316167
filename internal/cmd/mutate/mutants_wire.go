package main

// Packages and -run patterns of the wire set.
var (
	pkTransport = []string{"./transport/"}
	runIndexes  = "TestIndexBounds|TestAttackSnapshotIndex"
	runScanner  = "TestScannerAttacks|TestSmuggledRequestRefused|TestFrameScanner|FuzzFrameParsers|TestFrameParsersAgree"
)

// wireMutants are bugs planted in the checks of the Raft port's bytes and
// numbers (log index bounds, a damaged data dir at start, one parser of a
// frame, a joining node's trust): -set wire.
var wireMutants = []mutant{
	{ID: "WI-index", File: "election/admission.go", Packages: pkElection, Run: runIndexes,
		What:        "the index bounds are not applied: a snapshot at 2^64-1 is admitted",
		Original:    "\tif err := indexes(rpc, e); err != nil {\n",
		Replacement: "\tif err := indexes(rpc, e); err != nil && false {\n"},
	{ID: "WI-snapjump", File: "election/indexes.go", Packages: pkElection, Run: runIndexes,
		What:        "a snapshot may carry any index up to MaxIndex, not only up to IndexJumpLimit",
		Original:    "\t\tif c.LastLogIndex > IndexJumpLimit {\n",
		Replacement: "\t\tif c.LastLogIndex > MaxIndex {\n"},
	{ID: "WI-start-panic", File: "election/startraft.go", Packages: pkElection, Run: "TestRestartOnDamagedDataDir",
		What:        "a raft panic while starting on a damaged data dir is not recovered",
		Original:    "\t\tif p := recover(); p != nil {\n",
		Replacement: "\t\tif p := any(nil); p != nil {\n"},
	{ID: "WI-dupkey", File: "transport/framescan.go", Packages: pkTransport, Run: runScanner,
		What:        "a field named twice in one map passes the scanner (the decoder takes the last)",
		Original:    "\t\tcase top.seen&(1<<i) != 0:\n",
		Replacement: "\t\tcase top.seen&(1<<i) != 0 && false:\n"},
	{ID: "WI-binkey", File: "transport/framescan.go", Packages: pkTransport, Run: runScanner,
		What:        "a bin-typed field name passes the scanner",
		Original:    "\tcase kindKey:\n\t\tswitch {\n\t\tcase fixstr:\n\t\t\treturn s.payload(int64(c & 0x1f))\n\t\tcase c >= 0xd9 && c <= 0xdb:\n",
		Replacement: "\tcase kindKey:\n\t\tswitch {\n\t\tcase fixstr:\n\t\t\treturn s.payload(int64(c & 0x1f))\n\t\tcase c >= 0xd9 && c <= 0xdb, c >= 0xc4 && c <= 0xc6:\n"},
	{ID: "WI-nilnum", File: "transport/framescan.go", Packages: pkTransport, Run: runScanner,
		What:        "nil passes where an unsigned number belongs (the decoder reads 0)",
		Original:    "\t\tcase c <= 0x7f:\n\t\t\treturn s.valueDone()\n",
		Replacement: "\t\tcase c <= 0x7f || c == 0xc0:\n\t\t\treturn s.valueDone()\n"},
	{ID: "WI-fieldset", File: "transport/framescan.go", Packages: pkTransport, Run: runScanner,
		What:        "a map of another field count than its type's passes (an unknown field is skipped by the decoder)",
		Original:    "\t\tif n != int64(len(lv.schema)) {\n",
		Replacement: "\t\tif n > int64(len(lv.schema))+8 {\n"},
	{ID: "WI-hostname", File: "transport/hostcheck.go", Packages: pkTransport, Run: "TestHostName|TestAddrMatches",
		What:        "a claimed host name matches any source IP",
		Original:    "\tips, err := lookupHost(ctx, host)\n",
		Replacement: "\tips, err := lookupHost(ctx, host)\n\tips = append(ips, net.IPAddr{IP: ta.IP})\n"},
}
