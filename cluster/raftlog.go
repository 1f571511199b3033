package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// raftLogFold is how long a WARN or ERROR message of hashicorp/raft (or
// autopilot) is folded after it is logged: its repeats within it are
// counted, not logged, and the next line of it says how many were folded.
// A member that is down makes the leader fail to reach it several times a
// second, for as long as it is down.
var raftLogFold = 30 * time.Second

// maxFolded bounds the messages whose repeats are being counted; past it a
// message that is not among them is logged unfolded.
const maxFolded = 256

// newRaftLogger is the hclog.Logger given to hashicorp/raft and autopilot:
// it receives their calls with the message and its arguments apart
// (hclog's intercept logger, whose own output is discarded) and sends them
// to log at level and above.
func newRaftLogger(log *slog.Logger, level hclog.Level) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Output: io.Discard, Level: level})
	l.RegisterSink(&raftSink{log: log, level: level, fold: raftLogFold, now: time.Now, folded: map[foldKey]*foldCount{}})
	return l
}

// raftSink sends hclog records to slog, at their level (routine warnings
// at INFO, debug and trace at DEBUG), with each WARN and ERROR message
// logged at most once per fold interval.
type raftSink struct {
	log   *slog.Logger
	level hclog.Level
	fold  time.Duration
	now   func() time.Time

	mu     sync.Mutex
	folded map[foldKey]*foldCount
}

type foldKey struct {
	level hclog.Level
	msg   string
}

// foldCount is one message's last line and the repeats since.
type foldCount struct {
	logged  time.Time
	repeats int64
}

// Accept implements hclog.SinkAdapter.
func (s *raftSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < s.level || level == hclog.Off {
		return
	}
	attrs := make([]any, 0, len(args)+2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			attrs = append(attrs, "EXTRA_VALUE_AT_END", args[i])
			break
		}
		attrs = append(attrs, fmt.Sprint(args[i]), args[i+1])
	}
	if level >= hclog.Warn {
		n, ok := s.count(foldKey{level, msg})
		if !ok {
			return
		}
		if n > 0 {
			attrs = append(attrs, "folded", n, "folded_over", s.fold.String())
		}
	}
	s.log.Log(context.Background(), slogLevel(level, msg, args), name+": "+msg, attrs...)
}

// count says whether a line of key is logged now, and how many of its
// repeats were folded since its last line.
func (s *raftSink) count(key foldKey) (folded int64, log bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.folded[key]
	if ok && now.Sub(c.logged) < s.fold {
		c.repeats++
		return 0, false
	}
	if ok {
		folded = c.repeats
		c.logged, c.repeats = now, 0
		return folded, true
	}
	if len(s.folded) >= maxFolded {
		for k, c := range s.folded {
			if now.Sub(c.logged) >= s.fold {
				delete(s.folded, k) // its repeats, if any, go unreported
			}
		}
	}
	if len(s.folded) < maxFolded {
		s.folded[key] = &foldCount{logged: now}
	}
	return 0, true
}

// slogLevel is the slog level of an hclog record.
func slogLevel(level hclog.Level, msg string, args []any) slog.Level {
	switch {
	case level >= hclog.Error:
		return slog.LevelError
	case level == hclog.Warn && routineRaftWarning(msg, args):
		return slog.LevelInfo
	case level == hclog.Warn:
		return slog.LevelWarn
	case level == hclog.Info:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// routineRaftWarning reports whether a message hashicorp/raft logs at WARN
// is one every healthy start writes: a node standing for election with no
// leader ever heard of (a fresh or restarted node; a follower that lost its
// leader names it and stays a warning), a joiner that has not received the
// log yet and its leader sending it, a joiner's Raft before it is admitted.
// They say nothing is wrong, so they are logged at INFO.
func routineRaftWarning(msg string, args []any) bool {
	switch msg {
	case "heartbeat timeout reached, starting election":
		for i := 0; i+1 < len(args); i += 2 {
			if k := fmt.Sprint(args[i]); (k == "last-leader-addr" || k == "last-leader-id") && fmt.Sprint(args[i+1]) != "" {
				return false
			}
		}
		return true
	case "failed to get previous log",
		"appendEntries rejected, sending older logs",
		"no known peers, aborting election":
		return true
	}
	return false
}
