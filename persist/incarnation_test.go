package persist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idserver/internal/testproc"
)

// TestMarkerTellsACopyFromAMove: a recorded marker is found again after a
// reopen and a rename of the directory; a cp -a copy, and a copy without
// the file, are told apart, with the file named.
func TestMarkerTellsACopyFromAMove(t *testing.T) {
	testproc.Long(t)
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if why, err := s.CheckCopy(); err != nil || why != "" {
		t.Fatalf("a first start: %q, %v", why, err)
	}
	if err := s.RecordMarkerSync(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	moved := filepath.Join(root, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	check := func(dir string) string {
		t.Helper()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		why, err := s.CheckCopy()
		if err != nil {
			t.Fatal(err)
		}
		return why
	}
	if why := check(moved); why != "" {
		t.Fatalf("a renamed directory is taken for a copy: %s", why)
	}
	copied := filepath.Join(root, "copied")
	if out, err := exec.Command("cp", "-a", moved, copied).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	if why := check(copied); !strings.Contains(why, MarkerFile) || !strings.Contains(why, "copy") {
		t.Fatalf("a cp -a copy: %q", why)
	}
	if err := os.Remove(filepath.Join(copied, MarkerFile)); err != nil {
		t.Fatal(err)
	}
	if why := check(copied); !strings.Contains(why, "missing") {
		t.Fatalf("a copy without the marker: %q", why)
	}
	// Made safe, the copy is the directory from then on.
	s, err = Open(copied)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RenewMarkerSync(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if why := check(copied); why != "" {
		t.Fatalf("after RenewMarkerSync: %s", why)
	}
}

func TestIncarnationCountsStarts(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for want := uint64(1); want <= 3; want++ {
		if n, err := s.NextIncarnationSync(); err != nil || n != want {
			t.Fatalf("start %d: %d, %v", want, n, err)
		}
	}
}
