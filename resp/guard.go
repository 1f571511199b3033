package resp

import (
	"bytes"
)

// Limits bound what a client may send (docs/guarantees.md, promise 5). They are checked as
// the bytes arrive, so that a length prefix past them is refused before any
// memory is set aside for it.
type Limits struct {
	MaxArgs     int // multibulk count; Redis's own sanity bound is far larger, ours is 1024
	MaxBulk     int // one bulk string, bytes
	MaxInline   int // one inline command line, bytes
	PreAuthArgs int // before AUTH, when a password is set (as Redis: 10)
	PreAuthBulk int // before AUTH, when a password is set (as Redis: 16 KiB)
}

// DefaultLimits are the limits docs/guarantees.md states (promise 5).
func DefaultLimits() Limits {
	return Limits{MaxArgs: 1024, MaxBulk: 64 << 10, MaxInline: 64 << 10, PreAuthArgs: 10, PreAuthBulk: 16 << 10}
}

// errProtocol is a frame the guard refused; its text follows "ERR ".
type errProtocol struct{ msg string }

func (e *errProtocol) Error() string { return "Protocol error: " + e.msg }

// The refusals, one value each: a refusal allocates nothing.
var (
	errMultibulkLength      = &errProtocol{"invalid multibulk length"}
	errBulkLength           = &errProtocol{"invalid bulk length"}
	errBulkFormat           = &errProtocol{"invalid bulk format"}
	errPreAuthMultibulk     = &errProtocol{"unauthenticated multibulk length"}
	errPreAuthBulk          = &errProtocol{"unauthenticated bulk length"}
	errInlineTooBig         = &errProtocol{"too big inline request"}
	errUnbalancedQuotes     = &errProtocol{"unbalanced quotes in request"}
	errExpectedDollarPrefix = "expected '$', got '"
)

// frameParser is the frame guard: it reads one request at a time in place,
// from the front of what a connection has read so far, and refuses the
// first byte that breaks a limit or the grammar, even before the frame is
// complete. It reads the way Redis reads: a multibulk count of zero or less
// is skipped, and an inline command is split as Redis's sdssplitargs splits
// it (tabs, quotes, \xHH escapes). A multibulk's arguments point into the
// bytes parsed; an inline command's into the parser's own buffer. Both stay
// valid until the next parse. Nothing is allocated once the parser's
// buffers have grown to the largest frame seen.
type frameParser struct {
	lim    Limits
	args   [][]byte // the last frame's arguments
	inline []byte   // an inline command's unescaped arguments
}

// The parser keeps its buffers between frames up to these sizes.
const (
	keptArgs   = 64
	keptInline = 4096
)

// drop forgets what points into the read buffer, which goes back to
// bufPools: the argument list is cleared (its backing array is kept), and
// an inline command's buffer is let go.
func (p *frameParser) drop() {
	clear(p.args[:cap(p.args)])
	p.args = p.args[:0]
	p.inline = nil
}

// parse reads the frame at the front of b. It returns how many bytes the
// frame took (0: incomplete, read more) and its arguments (none for a frame
// Redis skips: *0, *-1, a blank line). err is set when b breaks the grammar
// or a limit; the frame and everything after it is then refused. preAuth
// applies the limits for a connection that has not authenticated yet.
func (p *frameParser) parse(b []byte, preAuth bool) (args [][]byte, n int, err *errProtocol) {
	if len(b) == 0 {
		return nil, 0, nil
	}
	if b[0] != '*' {
		return p.parseInline(b)
	}
	maxArgs, errArgs := p.lim.MaxArgs, errMultibulkLength
	maxBulk, errBulk := p.lim.MaxBulk, errBulkLength
	if preAuth && p.lim.PreAuthArgs <= maxArgs {
		maxArgs, errArgs = p.lim.PreAuthArgs, errPreAuthMultibulk
	}
	if preAuth && p.lim.PreAuthBulk <= maxBulk {
		maxBulk, errBulk = p.lim.PreAuthBulk, errPreAuthBulk
	}
	count, neg, i, err := readLength(b, 1, true, maxArgs, errArgs, errMultibulkLength)
	if i == 0 || err != nil {
		return nil, 0, err
	}
	if neg || count == 0 {
		return nil, i, nil // Redis ignores an empty or negative multibulk
	}
	if cap(p.args) > keptArgs && count <= keptArgs {
		p.args = nil // a large frame's argument list is not kept for the connection's life
	}
	args = p.args[:0]
	for range count {
		if i == len(b) {
			return nil, 0, nil
		}
		if b[i] != '$' {
			return nil, 0, &errProtocol{errExpectedDollarPrefix + printable(b[i]) + "'"}
		}
		size, _, next, err := readLength(b, i+1, false, maxBulk, errBulk, errBulkLength)
		if next == 0 || err != nil {
			return nil, 0, err
		}
		i = next
		end := i + size
		switch {
		case len(b) < end+1:
			return nil, 0, nil
		case b[end] != '\r':
			return nil, 0, errBulkFormat
		case len(b) < end+2:
			return nil, 0, nil
		case b[end+1] != '\n':
			return nil, 0, errBulkFormat
		}
		args = append(args, b[i:end:end])
		i = end + 2
	}
	p.args = args
	return args, i, nil
}

// readLength reads the digits of a multibulk count (allowNeg) or a bulk
// length from b[i:], then "\r\n", and returns the index after them (0:
// incomplete). A number past limit is refused with overLimit as soon as its
// digits pass it, so no number ever overflows; any other malformed length
// with malformed. A negative count is read (Redis skips it) but not checked
// against the limit.
func readLength(b []byte, i int, allowNeg bool, limit int, overLimit, malformed *errProtocol) (num int, neg bool, next int, err *errProtocol) {
	if allowNeg && i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	digits := 0
	for ; i < len(b); i++ {
		c := b[i]
		if c == '\r' && digits > 0 {
			if neg && num == 0 {
				return 0, false, 0, malformed // "-0"
			}
			if i+1 == len(b) {
				return 0, false, 0, nil
			}
			if b[i+1] != '\n' {
				return 0, false, 0, malformed
			}
			return num, neg, i + 2, nil
		}
		if c < '0' || c > '9' || (digits == 1 && num == 0) || (neg && digits == 18) {
			return 0, false, 0, malformed
		}
		num = num*10 + int(c-'0')
		digits++
		if !neg && num > limit {
			return 0, false, 0, overLimit
		}
	}
	return 0, false, 0, nil
}

// parseInline reads an inline (telnet) command line up to its '\n'.
func (p *frameParser) parseInline(b []byte) (args [][]byte, n int, err *errProtocol) {
	scan := b[:min(len(b), p.lim.MaxInline+1)]
	end := bytes.IndexByte(scan, '\n')
	if end < 0 {
		if len(scan) > p.lim.MaxInline {
			return nil, 0, errInlineTooBig
		}
		return nil, 0, nil
	}
	line := bytes.TrimSuffix(b[:end], []byte{'\r'})
	if cap(p.inline) < len(line) || cap(p.inline) > keptInline && len(line) <= keptInline {
		// Room for the line; a long line's buffer is not kept for the
		// connection's life.
		p.inline = make([]byte, 0, max(len(line), 64))
	}
	var ok bool
	p.inline, args, ok = appendSplitArgs(p.inline[:0], p.args[:0], line)
	p.args = args
	if !ok {
		return nil, 0, errUnbalancedQuotes
	}
	if len(args) > p.lim.MaxArgs {
		return nil, 0, errMultibulkLength
	}
	if len(args) == 0 {
		args = nil
	}
	return args, end + 1, nil
}

// splitArgs splits an inline command line as Redis's sdssplitargs does;
// see appendSplitArgs.
func splitArgs(line []byte) (args [][]byte, ok bool) {
	_, args, ok = appendSplitArgs(make([]byte, 0, len(line)), nil, line)
	return args, ok
}

// appendSplitArgs splits an inline command line as Redis's sdssplitargs
// does: arguments separated by spaces, tabs, CR or LF; "double quotes" with
// the escapes \xHH \n \r \t \b \a and \<any>; 'single quotes' with \'; a
// closing quote must be followed by a space or the end. The line ends at a
// NUL byte, as the C string Redis parses does. ok is false for unbalanced
// quotes. The arguments' bytes are appended to buf and args point into it:
// buf must have room for len(line) more bytes, which is never exceeded (an
// argument is never longer than its text), so buf is never reallocated
// under args.
func appendSplitArgs(buf []byte, args [][]byte, line []byte) ([]byte, [][]byte, bool) {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	at := func(i int) byte { // the C string's byte, NUL past the end
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i >= len(line) {
			return buf, args, true
		}
		start := len(buf)
		inDouble, inSingle := false, false
		for done := false; !done; {
			c := at(i)
			switch {
			case inDouble:
				switch {
				case c == 0:
					return buf, args, false
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					buf = append(buf, unhex(at(i+2))<<4|unhex(at(i+3)))
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
					buf = append(buf, unescape(line[i]))
				case c == '"':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return buf, args, false
					}
					done = true
				default:
					buf = append(buf, c)
				}
			case inSingle:
				switch {
				case c == 0:
					return buf, args, false
				case c == '\\' && at(i+1) == '\'':
					i++
					buf = append(buf, '\'')
				case c == '\'':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return buf, args, false
					}
					done = true
				default:
					buf = append(buf, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inDouble = true
				case '\'':
					inSingle = true
				default:
					buf = append(buf, c)
				}
			}
			if i < len(line) {
				i++
			}
		}
		args = append(args, buf[start:len(buf):len(buf)])
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// unescape is the byte a backslash escape inside double quotes stands for.
func unescape(e byte) byte {
	switch e {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	}
	return e
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func printable(b byte) string {
	if b >= ' ' && b <= '~' {
		return string(rune(b))
	}
	return "\\x" + string("0123456789abcdef"[b>>4]) + string("0123456789abcdef"[b&15])
}
