package node

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestMoveAsideCutShortIsFinished: a move aside cut short after it moved
// part of the directory is found at the next start (Interrupted, with the
// node ID and join addresses it was joining again with) and finished: the
// directory keeps only its lock file and removed/, which holds everything,
// and a later move replaces removed/.
func TestMoveAsideCutShortIsFinished(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"LOCK", "DIRECTORY-MARKER", "pebble/000001.log", "raft/raft.db"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Dir: dir, NodeID: "n3", Join: "127.0.0.1:1,127.0.0.1:2"}
	if _, cut := Interrupted(Config{Dir: dir}); cut {
		t.Fatal("a directory never moved is reported cut short")
	}
	// The move cut short: the note written, pebble/ moved, raft/ not.
	if _, err := MoveAside(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "removed"), filepath.Join(dir, "removed.tmp")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"raft", "DIRECTORY-MARKER"} {
		if err := os.Rename(filepath.Join(dir, "removed.tmp", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	again, cut := Interrupted(Config{Dir: dir})
	if !cut || again.NodeID != "n3" || again.Join != cfg.Join {
		t.Fatalf("Interrupted: %v, node %q, join %q", cut, again.NodeID, again.Join)
	}
	if kept, _ := Interrupted(Config{Dir: dir, Join: "127.0.0.1:9"}); kept.Join != "127.0.0.1:9" {
		t.Fatalf("a --join given is replaced by the note's: %q", kept.Join)
	}
	aside, err := MoveAside(again)
	if err != nil {
		t.Fatal(err)
	}
	names := func(d string) []string {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	if got := names(dir); !slices.Equal(got, []string{"LOCK", "removed"}) {
		t.Fatalf("the directory holds %v after the move, want [LOCK removed]", got)
	}
	if got := names(aside); !slices.Equal(got, []string{"DIRECTORY-MARKER", rejoinFile, "pebble", "raft"}) {
		t.Fatalf("removed/ holds %v", got)
	}
	if _, cut := Interrupted(Config{Dir: dir}); cut {
		t.Fatal("a finished move is reported cut short")
	}
	// A later removal replaces removed/.
	if err := os.WriteFile(filepath.Join(dir, "DIRECTORY-MARKER"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := MoveAside(cfg); err != nil {
		t.Fatal(err)
	}
	if got := names(aside); !slices.Equal(got, []string{"DIRECTORY-MARKER", rejoinFile}) {
		t.Fatalf("removed/ holds %v after a second move, want only the second one's", got)
	}
}
