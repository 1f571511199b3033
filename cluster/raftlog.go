package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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
// it sends their calls at level and above to log, with the message and
// its key-value pairs as they were passed.
func newRaftLogger(log *slog.Logger, level hclog.Level) hclog.Logger {
	return newRaftLoggerFolding(log, level, raftLogFold, time.Now)
}

// newRaftLoggerFolding is newRaftLogger with the fold interval and the
// clock given.
func newRaftLoggerFolding(log *slog.Logger, level hclog.Level, fold time.Duration, now func() time.Time) hclog.Logger {
	sink := &raftSink{log: log, fold: fold, now: now, folded: map[foldKey]*foldCount{}}
	sink.level.Store(int32(level))
	return &raftLogger{name: "raft", sink: sink}
}

// raftLogger implements hclog.Logger over slog. Named and With give
// loggers that share its level and its folding.
type raftLogger struct {
	name string
	args []any // implied by With, before each call's own
	sink *raftSink
}

// raftSink sends the records of a raftLogger and the loggers made from it
// to slog, at their level (routine warnings at INFO, debug and trace at
// DEBUG), with each WARN and ERROR message logged at most once per fold
// interval.
type raftSink struct {
	log   *slog.Logger
	level atomic.Int32 // the hclog.Level logged from
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

// Log sends a record to slog when level is at or above the logger's.
func (l *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < l.GetLevel() {
		return
	}
	all := append(slices.Clip(l.args), args...)
	attrs := make([]any, 0, len(all)+2)
	for i := 0; i < len(all); i += 2 {
		if i+1 == len(all) {
			attrs = append(attrs, "EXTRA_VALUE_AT_END", all[i])
			break
		}
		attrs = append(attrs, fmt.Sprint(all[i]), all[i+1])
	}
	s := l.sink
	if level >= hclog.Warn {
		n, ok := s.count(foldKey{level, msg})
		if !ok {
			return
		}
		if n > 0 {
			attrs = append(attrs, "folded", n, "folded_over", s.fold.String())
		}
	}
	s.log.Log(context.Background(), slogLevel(level, msg, all), l.name+": "+msg, attrs...)
}

func (l *raftLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *raftLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *raftLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *raftLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *raftLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) IsTrace() bool { return l.logs(hclog.Trace) }
func (l *raftLogger) IsDebug() bool { return l.logs(hclog.Debug) }
func (l *raftLogger) IsInfo() bool  { return l.logs(hclog.Info) }
func (l *raftLogger) IsWarn() bool  { return l.logs(hclog.Warn) }
func (l *raftLogger) IsError() bool { return l.logs(hclog.Error) }

func (l *raftLogger) logs(level hclog.Level) bool {
	at := l.GetLevel()
	return at != hclog.Off && level >= at
}

func (l *raftLogger) ImpliedArgs() []any { return slices.Clone(l.args) }

func (l *raftLogger) With(args ...any) hclog.Logger {
	return &raftLogger{name: l.name, args: append(slices.Clip(l.args), args...), sink: l.sink}
}

func (l *raftLogger) Name() string { return l.name }

// Named appends name to the logger's, after a dot.
func (l *raftLogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	return &raftLogger{name: name, args: l.args, sink: l.sink}
}

// SetLevel sets the level of this logger and of every logger made from
// the same newRaftLogger.
func (l *raftLogger) SetLevel(level hclog.Level) { l.sink.level.Store(int32(level)) }

func (l *raftLogger) GetLevel() hclog.Level { return hclog.Level(l.sink.level.Load()) }

// StandardLogger is a log.Logger whose lines go to slog at the level
// opts.ForceLevel (INFO when it is not set), with the logger's name.
func (l *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return standardWriter{l: l, level: level}
}

// standardWriter logs each write as one message.
type standardWriter struct {
	l     *raftLogger
	level hclog.Level
}

func (w standardWriter) Write(p []byte) (int, error) {
	w.l.Log(w.level, strings.TrimRight(string(p), "\n"))
	return len(p), nil
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
	case level == hclog.Error && msg == "failed to take snapshot" && slices.ContainsFunc(args, func(a any) bool {
		err, _ := a.(error)
		return errors.Is(err, raft.ErrNothingNewToSnapshot)
	}):
		// A snapshot asked for when the log holds nothing new since the
		// last one (no command since, or only elections and
		// configurations): nothing is wrong.
		return slog.LevelInfo
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
