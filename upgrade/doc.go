// Package upgrade holds the cross-version tests: a cluster of real idserver
// processes on 127.0.0.1 rolled from a fixed earlier build of this
// repository to the current code and back, under load, with Raft snapshots
// written by one version and installed or restored by the other. It has no
// code of its own; see upgrade_test.go.
package upgrade
