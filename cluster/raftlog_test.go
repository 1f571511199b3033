package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestRoutineRaftWarningsAreInfo: the WARN messages of a healthy start are
// logged at INFO; a follower that lost its leader, and other warnings,
// stay WARN.
func TestRoutineRaftWarningsAreInfo(t *testing.T) {
	for _, c := range []struct {
		msg  string
		args []any
		want string
	}{
		{"heartbeat timeout reached, starting election", []any{"last-leader-addr", "", "last-leader-id", ""}, "INFO"},
		{"heartbeat timeout reached, starting election", []any{"last-leader-addr", "127.0.0.1:1", "last-leader-id", "a"}, "WARN"},
		{"failed to get previous log", []any{"previous-index", 6, "last-index", 0}, "INFO"},
		{"appendEntries rejected, sending older logs", []any{"peer", "a", "next", 1}, "INFO"},
		{"no known peers, aborting election", nil, "INFO"},
		{"failed to contact quorum of nodes, stepping down", nil, "WARN"},
	} {
		var buf bytes.Buffer
		newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil)), hclog.Warn).Warn(c.msg, c.args...)
		if !strings.Contains(buf.String(), "level="+c.want+" ") {
			t.Errorf("%q %v logged as %s, want %s", c.msg, c.args, buf.String(), c.want)
		}
	}
	var buf bytes.Buffer
	newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil)), hclog.Warn).Error("failed to heartbeat to", "peer", "127.0.0.1:1", "error", "connection refused")
	if want := `level=ERROR msg="raft: failed to heartbeat to" peer=127.0.0.1:1 error="connection refused"`; !strings.Contains(buf.String(), want) {
		t.Errorf("logged %q, want %q", buf.String(), want)
	}
}

// TestRaftErrorsAreFolded: a WARN or ERROR message is logged once per fold
// interval, keyed by its message whatever its arguments; the next line of
// it counts the repeats folded; other messages, and INFO, are not held back.
func TestRaftErrorsAreFolded(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	sink := &raftSink{log: slog.New(slog.NewTextHandler(&buf, nil)), level: hclog.Info, fold: 30 * time.Second,
		now: func() time.Time { return now }, folded: map[foldKey]*foldCount{}}
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Output: &bytes.Buffer{}, Level: hclog.Info})
	l.RegisterSink(sink)
	for i := range 100 {
		l.Error("failed to heartbeat to", "peer", "127.0.0.1:1", "backoff time", i)
		l.Named("autopilot").Warn("failed to reach", "id", "n3")
		l.Info("entering follower state")
		now = now.Add(100 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	count := func(s string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, s) {
				n++
			}
		}
		return n
	}
	if n := count("failed to heartbeat to"); n != 1 {
		t.Errorf("%d lines of a message repeated 100 times in 10s, want 1:\n%s", n, buf.String())
	}
	if n := count("raft.autopilot: failed to reach"); n != 1 {
		t.Errorf("%d lines of autopilot's repeated warning, want 1", n)
	}
	if n := count("entering follower state"); n != 100 {
		t.Errorf("%d INFO lines of 100", n)
	}
	now = now.Add(30 * time.Second)
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:1")
	if last := buf.String()[strings.LastIndex(strings.TrimSpace(buf.String()), "\n")+1:]; !strings.Contains(last, "folded=99 folded_over=30s") {
		t.Errorf("the line after the interval: %q, want folded=99", last)
	}
}
