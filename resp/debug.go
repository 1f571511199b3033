package resp

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// DebugClock is the clock a node issues on, as DEBUG CLOCK steps it;
// *OffsetClock is one. A fault campaign steps a live process's clock
// through it (back, forward, strobing) without touching the machine's.
type DebugClock interface {
	Offset() time.Duration
	SetOffset(d time.Duration)
}

// OffsetClock is a clock that reads its base clock plus an offset that can
// be changed while the node runs. Its Now is the wall clock the engine is
// given when --enable-debug-command is set (read once a millisecond, as
// the monotonic clock says: engine.Config.Monotonic); otherwise the engine
// reads time.Now and pays nothing for the offset.
type OffsetClock struct {
	base   func() time.Time
	offset atomic.Int64 // nanoseconds
}

// NewOffsetClock wraps base (time.Now when nil) with a zero offset.
func NewOffsetClock(base func() time.Time) *OffsetClock {
	if base == nil {
		base = time.Now
	}
	return &OffsetClock{base: base}
}

// Now is the base clock plus the offset.
func (c *OffsetClock) Now() time.Time { return c.base().Add(time.Duration(c.offset.Load())) }

// Offset is the offset now added to the base clock.
func (c *OffsetClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// SetOffset replaces the offset (it does not add to it).
func (c *OffsetClock) SetOffset(d time.Duration) { c.offset.Store(int64(d)) }

// errDebugDisabled is Redis 7's reply to DEBUG when enable-debug-command is "no".
const errDebugDisabled = `ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", ` +
	`you can run it from a local connection, otherwise you need to set this option in the configuration file, ` +
	`and then restart the server.`

// maxDebugOffset bounds DEBUG CLOCK: a step of more than a day either way
// is a typo, not a test.
const maxDebugOffset = 24 * time.Hour

// debugCommands is DEBUG, refused unless the server was given a DebugClock.
func debugCommands() []*command {
	return []*command{
		{name: "debug", arity: -2, flags: []string{"admin", "noscript", "loading", "stale", "protected"},
			summary: "Debugging commands (only with --enable-debug-command): CLOCK [offset-ms]", handler: cmdDebug},
	}
}

// cmdDebug: DEBUG CLOCK answers the clock offset in milliseconds; DEBUG
// CLOCK ms sets it (negative steps the clock back). Refused, with Redis's
// words, unless the server was given a DebugClock.
func cmdDebug(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if s.cfg.Debug == nil {
		s.errorReply(conn, errDebugDisabled)
		return
	}
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "help" && len(args) == 2:
		help := []string{
			"DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"CLOCK [<offset-ms>]",
			"    Read, or set, the offset in milliseconds added to the clock IDs are issued on.",
			"HELP",
			"    Print this help.",
		}
		conn.WriteArray(len(help))
		for _, line := range help {
			conn.WriteString(line)
		}
	case sub == "clock" && len(args) == 2:
		conn.WriteInt64(s.cfg.Debug.Offset().Milliseconds())
	case sub == "clock" && len(args) == 3:
		ms, ok := parseInt64(args[2])
		if !ok {
			s.errorReply(conn, errNotInteger)
			return
		}
		if ms > maxDebugOffset.Milliseconds() || ms < -maxDebugOffset.Milliseconds() {
			s.errorReply(conn, "ERR DEBUG CLOCK offset must be within "+strconv.FormatInt(maxDebugOffset.Milliseconds(), 10)+" ms either way")
			return
		}
		before := s.cfg.Debug.Offset()
		s.cfg.Debug.SetOffset(time.Duration(ms) * time.Millisecond)
		s.cfg.Logger.Warn("DEBUG CLOCK: clock offset changed", "from_ms", before.Milliseconds(), "to_ms", ms, "client", c.addr)
		// The engine reads the clock once a millisecond: the OK waits out
		// the reading in force, so that every ID asked for after it is
		// issued on the new clock.
		time.Sleep(2 * time.Millisecond)
		conn.WriteString("OK")
	default:
		s.errorReply(conn, "ERR unknown subcommand or wrong number of arguments for '"+clip(args[1], 128)+"'. Try DEBUG HELP.")
	}
}
