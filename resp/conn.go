package resp

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/redcon"
)

// One parse, one write: each connection has a goroutine that reads into a
// buffer, parses every complete frame in place (frameParser, which is also
// the guard), answers each into one output buffer, and writes that buffer
// once per read. Nothing is copied or allocated per command. Both buffers
// come from bufPools when a read brings bytes and go back once they are
// answered and written: an idle connection holds neither. redcon
// is kept for what it does well, its reply encoding: every reply is
// appended with redcon's Append functions, so the bytes are the ones
// redcon's server wrote before.
//
// Replies are bounded per client (Config.ClientOutputLimit): once the
// replies not yet written reach the limit, they are written at once, in the
// middle of a pipeline, of an EXEC or of one command's array, and the
// command goes on only when the client has taken them. A client that takes
// none of a write for ClientOutputTimeout (at most twice that) is closed.
// Memory held for a client's replies is so at most the limit plus one reply
// element.

const (
	readBufferSize = minPooled          // a connection's read buffer to begin with
	keptBufferSize = 64 << 10           // a larger read or write buffer is let go once drained
	readAheadSize  = 2 * keptBufferSize // a read buffer grown for a lookahead, let go once drained
)

// DefaultClientOutputLimit is the most reply bytes a client's connection
// holds before they are written (--client-output-limit): 256 KiB, the
// point past which a pipeline's replies were already written early, so
// replies are written in the chunks the serve loop was measured with, and
// 10000 clients that all stop reading hold at most about 2.5 GiB.
const DefaultClientOutputLimit = 256 << 10

// DefaultClientOutputTimeout is how long a write of replies may wait for
// the client to read them before the client is closed
// (--client-output-timeout; a write may wait up to twice it): 10 s, so
// that a client that reads, even one stalled for seconds by a GC pause or a
// loaded machine, is never closed, and one that stopped reading holds its
// goroutine and at most the limit for 20 s.
const DefaultClientOutputTimeout = 10 * time.Second

// connection is the wire side of a client: the socket and the replies not
// yet written. It is the redcon.Conn the handlers write to; only its own
// goroutine uses it, except Close from Server.Close.
type connection struct {
	nc   net.Conn
	addr string
	// readAhead: the commands read so far ran out before a lookahead
	// (prefetchNewTags) did; the read buffer grows to readAheadSize for
	// the next reads, so that the next lookahead sees more commands.
	readAhead bool
	ctx       any
	out       []byte        // replies not yet written; nil between requests
	outSize   int           // the size of reply buffer the last requests took
	limit     int           // out is written once it holds this many bytes
	timeout   time.Duration // a write the client does not take in this long closes it
	deadline  time.Time     // the socket's write deadline
	err       error         // the first write error; nothing is written after it
	closed    bool          // Close was called: answer nothing more
	written   int64         // bytes written and not yet added to the server's total_net_output_bytes

	// A plain TCP connection is served by the raw loop (conn_linux.go):
	// rc is its socket, fd its descriptor while held says the loop holds
	// it, and killed says Server.Close ended it.
	rc     syscall.RawConn
	fd     int
	held   bool
	killed atomic.Bool
	gone   chan struct{} // closed by kill: a wait (pause) ends
}

var _ redcon.Conn = (*connection)(nil)

// errSlowClient is the write error of a client that did not read its
// replies within the client output timeout.
var errSlowClient = errors.New("client did not read its replies within the client output timeout")

// write writes the replies so far and keeps the buffer. After a write
// error the replies are dropped as they come: the connection is ending.
func (cn *connection) write() error {
	if len(cn.out) == 0 || cn.err != nil {
		cn.out = cn.out[:0]
		return cn.err
	}
	out := cn.out
	if cn.held {
		// The raw loop holds the descriptor: a write the socket takes
		// whole needs neither the deadline nor its clock read; the rest
		// of one it does not take waits below, under the deadline.
		n, err := rawWrite(cn.fd, out)
		cn.written += int64(n)
		out = out[n:]
		if err != nil {
			cn.err = err
		}
		if len(out) == 0 || cn.err != nil {
			cn.out = cn.out[:0]
			return cn.err
		}
	}
	// The deadline moves only when less than the timeout is left, to twice
	// the timeout ahead: every write has between the timeout and twice it,
	// and most writes cost a clock read instead of a SetWriteDeadline.
	if now := time.Now(); cn.deadline.Sub(now) < cn.timeout {
		cn.deadline = now.Add(2 * cn.timeout)
		cn.nc.SetWriteDeadline(cn.deadline)
	}
	n, err := cn.nc.Write(out)
	cn.written += int64(n)
	if err != nil {
		cn.err = err
		if errors.Is(err, os.ErrDeadlineExceeded) {
			cn.err = errSlowClient
		}
	}
	cn.out = cn.out[:0]
	return cn.err
}

// flush writes the replies so far and lets a large buffer go.
func (cn *connection) flush() error {
	err := cn.write()
	if cap(cn.out) > keptBufferSize {
		cn.out = nil
	}
	return err
}

// grew writes the replies out once they reach the limit: a reply of any
// size, or EXEC's array of them, streams in chunks of the limit.
func (cn *connection) grew() {
	if len(cn.out) >= cn.limit {
		cn.write()
	}
}

// Close writes what was answered and closes the connection (QUIT). The
// serve loop answers nothing after it.
func (cn *connection) Close() error {
	if cn.closed {
		return nil
	}
	cn.flush()
	cn.closed = true
	if cn.held {
		// Inside the raw loop, which holds the socket: serveConn closes
		// it once the loop lets go (a Close here would wait for that).
		return nil
	}
	return cn.nc.Close()
}

// kill ends the connection from another goroutine (Server.Close). A
// connection in the raw loop is shut down rather than closed: closing waits
// for the loop to let the socket go, which a command that waits (an INCR
// for a refill) can take seconds to do; the shutdown wakes the loop, whose
// next read sees the end, and serveConn closes the socket.
func (cn *connection) kill() {
	if cn.killed.Swap(true) {
		return
	}
	close(cn.gone)
	if cn.rc == nil {
		cn.nc.Close()
		return
	}
	cn.rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
}

// RemoteAddr is the client's address, as CLIENT LIST shows it.
func (cn *connection) RemoteAddr() string { return cn.addr }

// LocalAddr is the address the client connected to.
func (cn *connection) LocalAddr() net.Addr { return cn.nc.LocalAddr() }

// NetConn is the socket (or TLS connection).
func (cn *connection) NetConn() net.Conn { return cn.nc }

// Context and SetContext hold the connection's *client.
func (cn *connection) Context() any     { return cn.ctx }
func (cn *connection) SetContext(v any) { cn.ctx = v }

// The reply writers append to the output buffer.

func (cn *connection) WriteError(msg string)  { cn.out = redcon.AppendError(cn.out, msg); cn.grew() }
func (cn *connection) WriteString(str string) { cn.out = redcon.AppendString(cn.out, str); cn.grew() }
func (cn *connection) WriteBulk(bulk []byte)  { cn.out = redcon.AppendBulk(cn.out, bulk); cn.grew() }
func (cn *connection) WriteBulkString(bulk string) {
	cn.out = redcon.AppendBulkString(cn.out, bulk)
	cn.grew()
}
func (cn *connection) WriteInt(num int)       { cn.out = redcon.AppendInt(cn.out, int64(num)); cn.grew() }
func (cn *connection) WriteInt64(num int64)   { cn.out = redcon.AppendInt(cn.out, num); cn.grew() }
func (cn *connection) WriteUint64(num uint64) { cn.out = redcon.AppendUint(cn.out, num); cn.grew() }
func (cn *connection) WriteArray(count int)   { cn.out = redcon.AppendArray(cn.out, count); cn.grew() }
func (cn *connection) WriteNull()             { cn.out = redcon.AppendNull(cn.out); cn.grew() }
func (cn *connection) WriteRaw(data []byte)   { cn.out = append(cn.out, data...); cn.grew() }
func (cn *connection) WriteAny(v any)         { cn.out = redcon.AppendAny(cn.out, v); cn.grew() }

// WriteBulkFrom writes n bytes of rb as a bulk string.
func (cn *connection) WriteBulkFrom(n int64, rb io.Reader) {
	b := make([]byte, n)
	if _, err := io.ReadFull(rb, b); err != nil {
		cn.err = err
		return
	}
	cn.WriteBulk(b)
}

// The rest of redcon.Conn, which the serve loop does not need: the loop
// parses frame by frame and runs nothing after Close, so there is no
// pipeline read ahead to hand out or drop.

func (cn *connection) SetReadBuffer(int)              {}
func (cn *connection) Detach() redcon.DetachedConn    { return nil }
func (cn *connection) ReadPipeline() []redcon.Command { return nil }
func (cn *connection) PeekPipeline() []redcon.Command { return nil }

// serveConn runs a connection until it closes: read, answer every complete
// frame, write once (and on the way whenever the replies reach the limit).
// A plain TCP connection reads in the raw loop (rawLoop: one read per
// readiness event); any other net.Conn (TLS) with Read.
func (s *Server) serveConn(c *client, cn *connection) {
	l := &loop{s: s, c: c, cn: cn, p: frameParser{lim: s.cfg.Limits}}
	defer func() {
		cn.nc.Close()
		l.release()
		cn.release()
		s.stats.netOutput.Add(cn.written)
		s.mu.Lock()
		delete(s.clients, c)
		s.connsClosed()
		s.mu.Unlock()
	}()
	if cn.rc != nil {
		l.rawLoop()
	} else {
		for l.answer(l.read()) {
		}
	}
	if l.refused != nil {
		s.refuseFrame(cn, l.refused)
		return
	}
	s.slowClient(cn)
}

// loop is a connection's read side: the read buffer and the parser.
type loop struct {
	s          *Server
	c          *client
	cn         *connection
	p          frameParser
	buf        []byte       // from bufPools; nil while nothing is read and not yet parsed
	start, end int          // buf[start:end] is read and not yet parsed
	rd         rawReader    // the raw loop's reads (conn_linux.go)
	refused    *errProtocol // the frame that ended the connection
}

// read reads with net.Conn.Read (TLS, and builds without the raw loop).
func (l *loop) read() (int, error) {
	l.s.stats.reads.Add(1)
	return l.cn.nc.Read(l.room())
}

// room is where the next read goes: after what is still unparsed, moved to
// the front of the buffer when the buffer is full; a buffer from bufPools
// when the loop holds none.
func (l *loop) room() []byte {
	if l.buf == nil {
		l.buf = getBuf(readBufferSize)
	}
	if l.end == len(l.buf) {
		if l.start > 0 {
			l.end = copy(l.buf, l.buf[l.start:l.end])
			l.start = 0
		} else {
			// One frame fills the buffer: the guard has bounded its
			// lengths, so it grows at most to the largest frame allowed.
			grown := getBuf(2 * len(l.buf))
			copy(grown, l.buf)
			putBuf(l.buf)
			l.buf = grown
		}
	}
	return l.buf[l.end:]
}

// answer takes a read of n bytes into room: it answers every complete frame
// and writes the replies. It reports whether the connection goes on.
func (l *loop) answer(n int, readErr error) bool {
	s, c, cn := l.s, l.c, l.cn
	l.end += n
	s.stats.netInput.Add(int64(n)) // one add per read, not per command
	if cn.out == nil {
		cn.out = getBuf(max(cn.outSize, minPooled))[:0]
	}
	for l.start < l.end && !cn.closed && cn.err == nil && !cn.killed.Load() {
		args, used, refused := l.p.parse(l.buf[l.start:l.end], !c.authed)
		if refused != nil {
			l.refused = refused
			return false
		}
		if used == 0 {
			break // an incomplete frame: read more
		}
		frame := l.buf[l.start : l.start+used]
		l.start += used
		if args != nil {
			l.start += s.handle(c, cn, &l.p, args, frame, l.buf[l.start:l.end])
		}
	}
	if cn.readAhead {
		cn.readAhead = false
		if len(l.buf) < readAheadSize {
			grown := getBuf(readAheadSize)
			l.end = copy(grown, l.buf[l.start:l.end])
			putBuf(l.buf)
			l.start, l.buf = 0, grown
		}
	}
	if cn.closed || cn.flush() != nil || readErr != nil {
		return false
	}
	s.stats.netOutput.Add(cn.written)
	cn.written = 0
	cn.release()
	l.idle()
	return true
}

// idle gives the read buffer back when it holds nothing: the loop waits.
func (l *loop) idle() {
	if l.start == l.end {
		l.release()
	}
}

// release gives the read buffer back, once everything in it is answered
// or the connection ends, and drops what points into it.
func (l *loop) release() {
	if l.buf == nil {
		return
	}
	putBuf(l.buf)
	l.buf, l.start, l.end = nil, 0, 0
	l.p.drop()
}

// release gives the reply buffer back once it is written (or the
// connection ends), remembering its size for the next requests.
func (cn *connection) release() {
	if cap(cn.out) == 0 {
		return
	}
	cn.outSize = min(cap(cn.out), maxPooled)
	putBuf(cn.out)
	cn.out = nil
}

// slowClient counts and logs a connection closed because the client did
// not read its replies (Redis counts these as
// client_output_buffer_limit_disconnections).
func (s *Server) slowClient(cn *connection) {
	if cn.err != errSlowClient {
		return
	}
	if n := s.stats.slowClients.Add(1); n == 1 || n%1000 == 0 {
		s.cfg.Logger.Warn("closing a client that does not read its replies", "remote", cn.addr,
			"client_output_limit", cn.limit, "client_output_timeout", cn.timeout, "closed_so_far", n)
	}
}

// refuseFrame answers a frame the guard refused, after the replies to the
// commands before it, and ends the connection.
func (s *Server) refuseFrame(cn *connection, refused *errProtocol) {
	s.errorsByCode[len(ErrorCodes)-1].Add(1) // PROTOCOL
	s.cfg.Logger.Debug("protocol error, closing connection", "remote", cn.addr, "err", refused)
	cn.out = redcon.AppendError(cn.out, "ERR "+refused.Error())
	cn.timeout, cn.deadline = min(cn.timeout, time.Second/2), time.Time{} // at most a second
	if cn.flush() != nil {
		return
	}
	// Closing with unread input would reset the connection, and the reset
	// can overtake the error on its way to the client: end our side, then
	// read what the client already sent, for a bounded time and size.
	if cw, ok := cn.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		cn.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(cn.nc, 1<<20))
	}
}

// AUTH failures (AUTH and HELLO ... AUTH with a wrong password) are
// counted (acl_access_denied_auth in INFO stats, AuthFailures), logged at
// most once per authLogInterval, and slowed on the connection that makes
// them: past authFreeFailures since it last authenticated, each further
// failure waits authDelay before its reply, on the connection's own
// goroutine, so that no other connection waits. A guesser on one
// connection so gets about one try a second, not tens of thousands.
const (
	authFreeFailures = 3
	authFirstDelay   = 100 * time.Millisecond
	authMaxDelay     = time.Second
	authLogInterval  = 10 * time.Second
)

// errWrongPass is Redis 7's reply to a wrong password.
const errWrongPass = "WRONGPASS invalid username-password pair or user is disabled."

// authDelay is how long the failures-th failure on one connection waits
// before its reply: nothing for the first authFreeFailures, then
// authFirstDelay doubling up to authMaxDelay.
func authDelay(failures int) time.Duration {
	if failures <= authFreeFailures {
		return 0
	}
	d := authFirstDelay
	for i := authFreeFailures + 1; i < failures && d < authMaxDelay; i++ {
		d *= 2
	}
	return min(d, authMaxDelay)
}

// AuthFailures is the number of AUTH and HELLO AUTH refused since the
// server started (or since CONFIG RESETSTAT).
func (s *Server) AuthFailures() int64 { return s.stats.authFailures.Load() }

// authFailed answers a refused AUTH: it counts and logs it, waits as
// authDelay says (the replies before it written first, so that only this
// one is late), and replies WRONGPASS.
func (s *Server) authFailed(c *client, conn redcon.Conn) {
	s.stats.authFailures.Add(1)
	s.authLog.failed(s.cfg.Logger, c.addr, time.Now())
	c.authFailures++
	if d := authDelay(c.authFailures); d > 0 {
		c.conn.write()
		if c.conn.pause(d); c.conn.killed.Load() {
			c.conn.closed = true // Server.Close: answer nothing more
			return
		}
	}
	s.errorReply(conn, errWrongPass)
}

// pause waits d, or until the connection is killed (Server.Close).
func (cn *connection) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cn.gone:
	}
}

// authFailureLog writes one line per authLogInterval at most: the first
// failure after a quiet interval at once, the others of an interval in one
// line at its end (a timer), with their count and the last client's
// address. Lines are written after its lock is let go.
type authFailureLog struct {
	mu       sync.Mutex
	pending  int64     // failures not yet in a line
	lastAddr string    // the client of the latest one
	lastLine time.Time // when the last line was written
	due      *time.Timer
}

func (l *authFailureLog) failed(log *slog.Logger, addr string, now time.Time) {
	l.mu.Lock()
	l.pending++
	l.lastAddr = addr
	if now.Sub(l.lastLine) >= authLogInterval {
		n := l.take(now)
		l.mu.Unlock()
		logAuthFailures(log, n, addr)
		return
	}
	if l.due == nil {
		l.due = time.AfterFunc(l.lastLine.Add(authLogInterval).Sub(now), func() { l.flush(log) })
	}
	l.mu.Unlock()
}

// take starts a new interval at now and returns the failures of the one
// before. Caller holds l.mu.
func (l *authFailureLog) take(now time.Time) int64 {
	n := l.pending
	l.pending, l.lastLine = 0, now
	if l.due != nil {
		l.due.Stop()
		l.due = nil
	}
	return n
}

// flush writes the failures not yet logged, if any: at the end of an
// interval, and when the server stops.
func (l *authFailureLog) flush(log *slog.Logger) {
	l.mu.Lock()
	if l.pending == 0 {
		l.mu.Unlock()
		return
	}
	addr := l.lastAddr
	n := l.take(time.Now())
	l.mu.Unlock()
	logAuthFailures(log, n, addr)
}

func logAuthFailures(log *slog.Logger, n int64, addr string) {
	log.Warn("AUTH refused: wrong password", "failures", n, "last_client", addr, "logged_once_per", authLogInterval.String())
}
