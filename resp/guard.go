package resp

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// Limits bound what a client may send before a frame reaches redcon's
// reader, which crashes on overflowing lengths and spins on huge counts.
type Limits struct {
	MaxArgs     int // multibulk count; Redis's own sanity bound is far larger, ours is 1024
	MaxBulk     int // one bulk string, bytes
	MaxInline   int // one inline command line, bytes
	PreAuthArgs int // before AUTH, when a password is set (as Redis: 10)
	PreAuthBulk int // before AUTH, when a password is set (as Redis: 16 KiB)
}

// DefaultLimits are SPEC section 8's limits.
func DefaultLimits() Limits {
	return Limits{MaxArgs: 1024, MaxBulk: 64 << 10, MaxInline: 64 << 10, PreAuthArgs: 10, PreAuthBulk: 16 << 10}
}

// errProtocol is a frame the guard refused; its text follows "ERR ".
type errProtocol struct{ msg string }

func (e *errProtocol) Error() string { return "Protocol error: " + e.msg }

// errGuardClosed is what redcon's reader sees after a refusal: not a
// protocol error, so redcon closes the connection without writing again.
var errGuardClosed = errors.New("connection closed after a protocol error")

// Frame scanner states.
const (
	stStart     = iota // before a command
	stInline           // inside an inline (telnet) command line
	stCount            // digits of a multibulk count, after '*'
	stCountLF          // '\n' after the count's '\r'
	stDollar           // '$' of the next bulk
	stBulkLen          // digits of a bulk length
	stBulkLenLF        // '\n' after the length's '\r'
	stBulkData         // bulk payload
	stBulkCR           // '\r' after the payload
	stBulkLF           // '\n' after the payload
)

// frameScanner follows the RESP request grammar byte by byte, across reads,
// and stops at the first byte that breaks a limit or the grammar.
type frameScanner struct {
	lim    Limits
	authed func() bool
	state  int
	num    int // number being read (count or bulk length)
	digits int // digits read of it
	args   int // bulk strings left in this multibulk
	left   int // payload bytes left in this bulk
	line   int // bytes in this inline line
}

// scan reports how many leading bytes of p are safe to hand on; err is set
// when the byte after them is refused.
func (s *frameScanner) scan(p []byte) (int, *errProtocol) {
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch s.state {
		case stStart:
			if b == '*' {
				s.state, s.num, s.digits = stCount, 0, 0
				continue
			}
			s.state, s.line = stInline, 0
			fallthrough
		case stInline:
			if b == '\n' {
				s.state = stStart
				continue
			}
			s.line++
			if s.line > s.lim.MaxInline {
				return i, &errProtocol{"too big inline request"}
			}
		case stCount, stBulkLen:
			if b == '\r' && s.digits > 0 {
				s.state++ // the matching LF state
				continue
			}
			if b < '0' || b > '9' || (s.digits == 1 && s.num == 0) {
				if s.state == stCount {
					return i, &errProtocol{"invalid multibulk length"}
				}
				return i, &errProtocol{"invalid bulk length"}
			}
			s.num = s.num*10 + int(b-'0')
			s.digits++
			if err := s.checkLength(); err != nil {
				return i, err
			}
		case stCountLF:
			if b != '\n' || s.num == 0 {
				return i, &errProtocol{"invalid multibulk length"}
			}
			s.args, s.state = s.num, stDollar
		case stDollar:
			if b != '$' {
				return i, &errProtocol{"expected '$', got '" + printable(b) + "'"}
			}
			s.state, s.num, s.digits = stBulkLen, 0, 0
		case stBulkLenLF:
			if b != '\n' {
				return i, &errProtocol{"invalid bulk length"}
			}
			s.left, s.state = s.num, stBulkData
			if s.left == 0 {
				s.state = stBulkCR
			}
		case stBulkData:
			n := min(s.left, len(p)-i)
			s.left -= n
			i += n - 1
			if s.left == 0 {
				s.state = stBulkCR
			}
		case stBulkCR:
			if b != '\r' {
				return i, &errProtocol{"invalid bulk format"}
			}
			s.state = stBulkLF
		case stBulkLF:
			if b != '\n' {
				return i, &errProtocol{"invalid bulk format"}
			}
			s.args--
			s.state = stDollar
			if s.args == 0 {
				s.state = stStart
			}
		}
	}
	return len(p), nil
}

// checkLength refuses a count or length as soon as its digits pass the
// limit, so no number ever overflows.
func (s *frameScanner) checkLength() *errProtocol {
	preAuth := s.authed != nil && !s.authed()
	if s.state == stCount {
		if preAuth && s.num > s.lim.PreAuthArgs {
			return &errProtocol{"unauthenticated multibulk length"}
		}
		if s.num > s.lim.MaxArgs {
			return &errProtocol{"invalid multibulk length"}
		}
		return nil
	}
	if preAuth && s.num > s.lim.PreAuthBulk {
		return &errProtocol{"unauthenticated bulk length"}
	}
	if s.num > s.lim.MaxBulk {
		return &errProtocol{"invalid bulk length"}
	}
	return nil
}

func printable(b byte) string {
	if b >= ' ' && b <= '~' {
		return string(rune(b))
	}
	return "\\x" + string("0123456789abcdef"[b>>4]) + string("0123456789abcdef"[b&15])
}

// guardConn sits between the socket and redcon's reader. It hands on only
// bytes the scanner accepted; at a refused byte it lets redcon answer the
// complete commands before it, then writes "-ERR Protocol error: ..." and
// ends the connection.
type guardConn struct {
	net.Conn
	scanner  frameScanner
	authed   atomic.Bool
	refused  *errProtocol
	onRefuse func(error)
}

func newGuardConn(c net.Conn, lim Limits, needAuth bool, onRefuse func(error)) *guardConn {
	g := &guardConn{Conn: c, onRefuse: onRefuse}
	g.authed.Store(!needAuth)
	g.scanner = frameScanner{lim: lim, authed: g.authed.Load}
	return g
}

// Read implements net.Conn for redcon's reader.
func (g *guardConn) Read(p []byte) (int, error) {
	if g.refused != nil {
		return g.refuse()
	}
	n, err := g.Conn.Read(p)
	ok, perr := g.scanner.scan(p[:n])
	if perr != nil {
		g.refused = perr
		if ok == 0 {
			return g.refuse()
		}
		return ok, nil
	}
	return n, err
}

// refuse runs once redcon has answered and flushed everything before the
// refused byte (it flushes before it reads again).
func (g *guardConn) refuse() (int, error) {
	if g.onRefuse != nil {
		g.onRefuse(g.refused)
		g.onRefuse = nil
	}
	g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	g.Conn.Write([]byte("-ERR " + g.refused.Error() + "\r\n"))
	return 0, errGuardClosed
}

// guardListener wraps every accepted connection in a guardConn.
type guardListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}
