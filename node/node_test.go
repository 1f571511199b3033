package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idserver/persist"
)

// TestRetryDelayNeverDropsToZero: the check-in's wait grows to 250 ms and
// stays there however many attempts fail (a shift once overflowed into no
// wait, and the loop hammered the members).
func TestRetryDelayNeverDropsToZero(t *testing.T) {
	prev := time.Duration(0)
	for attempt := 1; attempt <= 1000; attempt++ {
		d := retryDelay(attempt)
		if d < prev || d <= 0 || d > 250*time.Millisecond {
			t.Fatalf("attempt %d: wait %v after %v", attempt, d, prev)
		}
		prev = d
	}
}

// TestJoinHintNamesTheLikelyMistake: a joiner refused for want of the
// password, or by a server that is not an idserver, is told which.
func TestJoinHintNamesTheLikelyMistake(t *testing.T) {
	for reply, want := range map[string]string{
		"NOAUTH Authentication required.":                    "--requirepass",
		"WRONGPASS invalid username-password pair":           "--requirepass",
		"ERR unknown subcommand 'JOIN'. Try CLUSTER HELP.":   "is it an idserver?",
		"ERR refused: join of node \"x\": its ID layout ...": "",
	} {
		if got := joinHint(reply); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%q: hint %q, want one with %q", reply, got, want)
		}
	}
}

// TestMoveAsideTakesTheLock: the directory of a process that runs on it
// (a second process, or one that started in the moment between a refused
// start and its move) is not moved from under it.
func TestMoveAsideTakesTheLock(t *testing.T) {
	dir := t.TempDir()
	s, err := persist.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := MoveAside(Config{Dir: dir}); !errors.Is(err, persist.ErrLocked) {
		t.Fatalf("MoveAside of a directory another store holds: %v, want %v", err, persist.ErrLocked)
	}
	if _, err := os.Stat(filepath.Join(dir, "pebble")); err != nil {
		t.Fatalf("the running store's files moved: %v", err)
	}
}
