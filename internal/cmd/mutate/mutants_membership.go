package main

// runMembership: the tests of safe membership changes (election/reconfig.go).
const runMembership = "TestCheckQuorum|TestJoinUnreachableNoWedge|TestReplaceServer|TestRemoveRefusedWithoutReachableQuorum|TestChangeStates|TestRemovedNodeKnows"

// membershipMutants are bugs planted in safe membership changes: learner-first
// joins, the strict quorum check, ReplaceServer, change states, and Lead
// across a removal: -set membership.
var membershipMutants = []mutant{
	{ID: "MB-nocatchup", File: "election/reconfig.go", Packages: pkElection, Run: runMembership,
		What:        "a non-voter is promoted without checking that it answers and has caught up",
		Original:    "\tif err := e.waitCaughtUp(ctx, id, addr); err != nil {\n\t\tif errors.Is(err, ErrClosed) {\n\t\t\treturn added, err",
		Replacement: "\tif err := error(nil); err != nil {\n\t\tif errors.Is(err, ErrClosed) {\n\t\t\treturn added, err"},
	{ID: "MB-quorum", File: "election/reconfig.go", Packages: pkElection, Run: runMembership,
		What:        "the strict check counts half the voters as a quorum",
		Original:    "\tif voters == 0 || ok < voters/2+1 {",
		Replacement: "\tif voters == 0 || ok < voters/2 {"},
	{ID: "MB-remove-unchecked", File: "election/members.go", Packages: pkElection, Run: runMembership,
		What:        "a voter is removed without the strict check of the voters left",
		Original:    "\top := \"remove \" + id\n\tif isVoter {",
		Replacement: "\top := \"remove \" + id\n\tif false {"},
	{ID: "MB-replace-leftover", File: "election/reconfig.go", Packages: pkElection, Run: runMembership,
		What:        "a refused replacement leaves its non-voter behind",
		Original:    "\t\tif newThere && cur.Suffrage == raft.Voter {\n\t\t\treturn cause",
		Replacement: "\t\tif true {\n\t\t\treturn cause"},
	{ID: "MB-inflight", File: "election/reconfig.go", Packages: pkElection, Run: runMembership,
		What:        "a change appended before leadership was lost is reported refused, not in flight",
		Original:    "\t\treturn 0, &ChangeError{Op: op, State: ChangeInFlight, Index: f.Index(), Err: e.notLeader()}",
		Replacement: "\t\treturn 0, &ChangeError{Op: op, State: ChangeRefused, Err: e.notLeader()}"},
	{ID: "MB-lead-removed", File: "election/lead.go", Packages: pkElection, Run: runMembership,
		What:        "Lead gives up for good once the node is removed",
		Original:    "\t\tif l.Removed != removed {",
		Replacement: "\t\tif l.Removed {\n\t\t\treturn ErrRemoved\n\t\t}\n\t\tif l.Removed != removed {"},
}
