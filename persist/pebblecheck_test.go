package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idserver/internal/testproc"
)

// TestRemovedWriteAheadLogIsRefused: through reopens and flushes (values
// large enough to fill memtables) the store opens; once its .log files are
// removed it is refused with ErrDamaged naming the MANIFEST, before and
// after its first flush.
func TestRemovedWriteAheadLogIsRefused(t *testing.T) {
	testproc.Long(t)
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			dir := t.TempDir()
			big := make([]byte, 1<<20)
			for round := range 3 {
				s, err := Open(dir)
				if err != nil {
					t.Fatalf("reopen %d: %v", round, err)
				}
				for i := range 8 {
					v := []byte("small")
					if flushed {
						v = big
					}
					if err := s.SetSync(fmt.Sprintf("k%d/%d", round, i), v); err != nil {
						t.Fatal(err)
					}
				}
				s.Close()
			}
			logs, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.log"))
			if len(logs) == 0 {
				t.Fatal("no .log file")
			}
			for _, l := range logs {
				os.Remove(l)
			}
			_, err := Open(dir)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "MANIFEST-") {
				t.Fatalf("Open after the .log files were removed: %v", err)
			}
		})
	}
}

// TestMissingPebbleUnderRaftIsRefused: a directory with raft/ and no
// Pebble database is refused, and Open creates nothing in it.
func TestMissingPebbleUnderRaftIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "raft"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pebble")); err == nil {
		t.Fatal("the refused Open created pebble/")
	}
}

func TestRecoveryRecord(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.LastRecovery(); ok || err != nil {
		t.Fatalf("fresh store: %v %v", ok, err)
	}
	want := Recovery{From: "a", To: "b", AtMS: 42}
	if err := s.SetRecoverySync(want); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.LastRecovery(); !ok || err != nil || got != want {
		t.Fatalf("LastRecovery: %v %v %v", got, ok, err)
	}
}

// TestPebbleFatalNamesTheFileAndTheRemedy: Pebble's fatal message for a
// block that fails its checksum (met by a compaction at start) becomes one
// line: the damaged directory, the file, the cause and the remedy, without
// the stack trace that follows it.
func TestPebbleFatalNamesTheFileAndTheRemedy(t *testing.T) {
	msg := "on-disk corruption: /d/pebble/000008.sst; bounds: [fsm/state, snowflake/high-water-wall]; details: pebble: file 000008: " +
		"block 34110/850: crc32c checksum mismatch 45cd7a1a != c68e60b3\n(1) path: /d/pebble/000008.sst\nWraps: (2) attached stack trace\n  -- stack trace:"
	err := pebbleFatal(msg)
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("%v: not ErrDamaged", err)
	}
	for _, want := range []string{"/d/pebble/000008.sst", "checksum mismatch", "idserver restore BACKUP --dir NEWDIR", "CLUSTER FORGET"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("%q holds more than one line", err)
	}
	if err := pebbleFatal("invariant broken"); errors.Is(err, ErrDamaged) || err.Error() != "pebble: invariant broken" {
		t.Errorf("a fatal message without corruption: %v", err)
	}
}
