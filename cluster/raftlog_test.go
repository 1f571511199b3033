package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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
	for err, want := range map[error]string{raft.ErrNothingNewToSnapshot: "INFO", errors.New("disk full"): "ERROR"} {
		var buf bytes.Buffer
		newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil)), hclog.Warn).Error("failed to take snapshot", "error", err)
		if !strings.Contains(buf.String(), "level="+want+" ") {
			t.Errorf("failed to take snapshot: %v logged as %s, want %s", err, buf.String(), want)
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
	l := newRaftLoggerFolding(slog.New(slog.NewTextHandler(&buf, nil)), hclog.Info, 30*time.Second,
		func() time.Time { return now })
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

// TestRaftLoggerForwardsToSlog: a record goes to slog with its level, its
// logger's name, the arguments With implied and its own; records below
// the level are dropped; the standard logger's lines are records too.
func TestRaftLoggerForwardsToSlog(t *testing.T) {
	var buf bytes.Buffer
	l := newRaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), hclog.Info)
	l.Named("snapshot").With("path", "/d/1").Info("creating new snapshot", "index", 7)
	l.Debug("below the level")
	l.StandardLogger(nil).Print("from a log.Logger")
	l.SetLevel(hclog.Debug)
	l.Debug("at the level now", "odd")
	for _, want := range []string{
		`level=INFO msg="raft.snapshot: creating new snapshot" path=/d/1 index=7`,
		`level=INFO msg="raft: from a log.Logger"`,
		`level=DEBUG msg="raft: at the level now" EXTRA_VALUE_AT_END=odd`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "below the level") {
		t.Errorf("a record below the level was logged:\n%s", buf.String())
	}
}
