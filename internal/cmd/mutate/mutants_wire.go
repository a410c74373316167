package main

// Packages and -run patterns of the wire set.
var (
	pkTransport = []string{"./transport/"}
	runIndexes  = "TestIndexBounds|TestAttackSnapshotIndex"
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
}
