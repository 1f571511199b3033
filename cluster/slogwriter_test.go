package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestRoutineRaftWarningsAreInfo: the WARN lines of a healthy start are
// logged at INFO; a follower that lost its leader, and other warnings,
// stay WARN.
func TestRoutineRaftWarningsAreInfo(t *testing.T) {
	for line, want := range map[string]string{
		"[WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr= last-leader-id=":             "INFO",
		"[WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr=127.0.0.1:1 last-leader-id=a": "WARN",
		"[WARN]  raft: failed to get previous log: previous-index=6 last-index=0 error=\"log not found\"":           "INFO",
		"[WARN]  raft: appendEntries rejected, sending older logs: peer=\"{Nonvoter a 127.0.0.1:1}\" next=1":        "INFO",
		"[WARN]  raft: no known peers, aborting election":                                                           "INFO",
		"[WARN]  raft: failed to contact quorum of nodes, stepping down":                                            "WARN",
		"[ERROR] raft: failed to heartbeat to: peer=127.0.0.1:1 backoff time=10ms error=\"connection refused\"":     "ERROR",
	} {
		var buf bytes.Buffer
		slogWriter{slog.New(slog.NewTextHandler(&buf, nil))}.Write([]byte(line + "\n"))
		if !strings.Contains(buf.String(), "level="+want+" ") {
			t.Errorf("%q logged as %s, want %s", line, buf.String(), want)
		}
	}
}
