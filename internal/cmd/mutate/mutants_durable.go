package main

// Packages and -run patterns of the durable set.
var (
	pkDirsync     = []string{"./storageguard/internal/dirsync/"}
	runDataDir    = "TestPowerCutPreexistingDataDir|TestPowerCutKeepsSnapshot|TestPowerCutKeepsTermAndVote$|TestPowerSearch"
	runBoltNewDir = "TestPowerLossNewDirectory|TestPowerLossSearch"
	runSQLNewDir  = "TestSQLitePowerLossNewDirectory|TestSQLitePowerLossSearch"
)

// durableMutants remove, one at a time, each sync that makes a path
// durable from the first byte: the election's data directory, its
// snapshots, and the path of every file-backed fence (-set durable).
var durableMutants = []mutant{
	{ID: "DU-datadir-ancestors", File: "election/datadir.go", Packages: pkElection, Run: runDataDir,
		What:        "the data directory's ancestors are not synced (a pre-existing, unsynced data directory vanishes)",
		Original:    "\tfor p := abs; filepath.Dir(p) != p; p = filepath.Dir(p) {\n\t\terr := fsyncDir(filepath.Dir(p))",
		Replacement: "\tfor p := abs; false; p = filepath.Dir(p) {\n\t\terr := fsyncDir(filepath.Dir(p))"},
	{ID: "DU-datadir-self", File: "election/datadir.go", Packages: pkElection, Run: runDataDir,
		What:        "the data directory itself is not synced (raft.db's name)",
		Original:    "\tif err := fsyncDir(abs); err != nil {\n\t\treturn err\n\t}\n",
		Replacement: "\n"},
	{ID: "DU-snapdir", File: "election/raftnode.go", Packages: pkElection, Run: runDataDir,
		What:        "the data directory is synced before raft creates snapshots/ (the old order)",
		Original:    "\tsnaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, raftlog.New(c.Logger, \"snapshot\"))\n\tif err != nil {\n\t\t_ = store.Close()\n\t\treturn nil, nil, nil, fmt.Errorf(\"election: snapshot store: %w\", err)\n\t}\n\t// Everything raft and raft-boltdb created is in place: make its names\n\t// durable before raft reads or writes a term (datadir.go).\n\tif err := syncDataDir(dir); err != nil {\n\t\t_ = store.Close()\n\t\treturn nil, nil, nil, fmt.Errorf(\"election: sync data dir %s: %w\", dir, err)\n\t}\n",
		Replacement: "\tif err := syncDataDir(dir); err != nil {\n\t\t_ = store.Close()\n\t\treturn nil, nil, nil, fmt.Errorf(\"election: sync data dir %s: %w\", dir, err)\n\t}\n\tsnaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, raftlog.New(c.Logger, \"snapshot\"))\n\tif err != nil {\n\t\t_ = store.Close()\n\t\treturn nil, nil, nil, fmt.Errorf(\"election: snapshot store: %w\", err)\n\t}\n"},
	{ID: "DU-snapshot-own", File: "election/datadir.go", Packages: pkElection, Run: runDataDir,
		What:        "a snapshot's own directory is not synced (its files' names)",
		Original:    "\tif err := fsyncDir(filepath.Join(s.dir, sink.ID()+\".tmp\")); err != nil {",
		Replacement: "\tif err := error(nil); err != nil {"},
	{ID: "DU-dirsync-ancestors", File: "storageguard/internal/dirsync/dirsync.go",
		Packages: append(append(append([]string(nil), pkDirsync...), pkCached[1]), pkSQL...), Run: "TestPathSurvivesCut|" + runBoltNewDir + "|" + runSQLNewDir,
		What:        "a fence file's directory is synced, its ancestors are not",
		Original:    "\tfor p := abs; filepath.Dir(p) != p; p = filepath.Dir(p) {\n",
		Replacement: "\tfor p := abs; false; p = filepath.Dir(p) {\n"},
	{ID: "DU-bolt-path", File: "storageguard/boltfence/boltfence.go", Packages: pkCached[1:], Run: runBoltNewDir,
		What:        "boltfence's Open syncs no directory",
		Original:    "\tif err := dirsync.Path(filepath.Dir(path)); err != nil {",
		Replacement: "\tif err := error(nil); err != nil && dirsync.Path(filepath.Dir(path)) != nil {"},
	{ID: "DU-sql-path", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQL, Run: runSQLNewDir,
		What:        "sqlfence's Open does not sync the SQLite database's path",
		Original:    "\t\tif err := syncDatabasePath(ctx, db); err != nil {\n\t\t\treturn nil, err\n\t\t}\n",
		Replacement: "\t\t_ = syncDatabasePath\n"},

	// The SQLite rule for the pool's other connections.
	{ID: "DU-sql-raise-only", File: "storageguard/sqlfence/sqlfence.go", Packages: pkSQL, Run: "TestSQLiteOffConnection|TestSQLiteUndurable|TestSQLiteNotDurable|TestSQLitePowerLossPeers",
		What:        "only a raise checks its connection's settings (a same-epoch Tx commits at synchronous=OFF)",
		Original:    "\t\tif err := dur.check(inserted); err != nil {",
		Replacement: "\t\tif err := dur.check(inserted); inserted && err != nil {"},

	// objectfence's commit on the manifest version read (its pkObject and
	// versitygw, as the features set's objectfence mutants).
	{ID: "DU-commit-on-check", File: "objectfence/manifest.go", Packages: pkObject, Run: "TestCommitOn",
		What:        "CommitOn on an unverified version does not check that it is still current before its PUT",
		Original:    "\t\tif cur.etag != read.ETag {\n",
		Replacement: "\t\tif false {\n"},
	{ID: "DU-commit-on-ifmatch", File: "objectfence/manifest.go", Packages: pkObject, Run: "TestCommitOn",
		What:        "CommitOn's PUT is not conditioned on the version read (a commit between the read and the PUT is overwritten)",
		Original:    "\t\tin.IfMatch = aws.String(read.ETag)\n",
		Replacement: "\t\t_ = read\n"},
	{ID: "DU-commit-on-decide", File: "objectfence/manifest.go", Packages: pkObject, Run: "TestCommitOn",
		What:        "CommitOn on a verified version does not decide the epoch (a deposed writer commits over a newer term)",
		Original:    "\t\tif _, err := storageguard.Decide(manifestKey, cur.epoch, ep); err != nil {\n",
		Replacement: "\t\tif _, err := storageguard.Decide(manifestKey, cur.epoch, ep); false && err != nil {\n"},
	{ID: "DU-get-torn", File: "objectfence/get.go", Packages: pkObject, Run: "TestGetTornETag|TestCommitOn",
		What:        "Get returns an ETag that is not the MD5 of the bytes it read",
		Original:    "\tif md5Form && !match {\n",
		Replacement: "\tif md5Form && false {\n"},
}
