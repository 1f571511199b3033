package cluster

import (
	"testing"

	"idserver/persist"
)

// keepMarker records a restored copy's marker file as the directory's own,
// as a rollback that keeps inodes (a file-system snapshot) would leave it:
// only the incarnation can tell such a copy.
func keepMarker(t *testing.T, dir string) {
	t.Helper()
	s, err := persist.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RecordMarkerSync(); err != nil {
		t.Fatal(err)
	}
}
