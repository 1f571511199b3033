package testproc

import "testing"

// TestFreePortIsReservedAcrossBinaries: the port FreePort gives, and the
// Raft port above it, are locked against another test binary (which takes
// its own lock through another open file, as this second reserve does).
func TestFreePortIsReservedAcrossBinaries(t *testing.T) {
	port := FreePort(t)
	if reserve(port) {
		t.Fatalf("port %d given, and reserved again", port)
	}
	if reserve(port + raftOffset) {
		t.Fatalf("Raft port %d reserved with %d, and reserved again", port+raftOffset, port)
	}
}
