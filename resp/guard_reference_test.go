package resp

// The frame guard as it was before the server read frames itself: a
// byte-by-byte scanner in front of redcon's reader, which rewrote inline
// commands as multibulk. It is kept here, unchanged but for its names, as
// the oracle FuzzParserMatchesTheOldGuard compares the in-place parser
// against: the same commands, the same refusals, however reads split.

import (
	"bytes"
	"strconv"
)

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

// referenceScanner follows the RESP request grammar byte by byte, across reads,
// and stops at the first byte that breaks a limit or the grammar. What it
// hands on is what redcon's reader handles safely and the way Redis reads
// it: a multibulk count of zero or less is dropped (Redis ignores it; redcon
// would close the connection), and an inline command is split as Redis's
// sdssplitargs splits it (tabs, quotes, \xHH escapes) and handed on as a
// multibulk.
type referenceScanner struct {
	lim    Limits
	authed func() bool
	state  int
	num    int    // number being read (count or bulk length)
	digits int    // digits read of it
	neg    bool   // the count has a '-': ignored once complete
	args   int    // bulk strings left in this multibulk
	left   int    // payload bytes left in this bulk
	header []byte // '*' and the count, held until the count is complete
	line   []byte // the inline line, held until its '\n'
}

// scan appends to dst what of p to hand on; err is set when a byte of p is
// refused, and dst then holds what came before that byte (redcon answers
// the complete commands in it before the guard refuses).
func (s *referenceScanner) scan(dst, p []byte) ([]byte, *errProtocol) {
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch s.state {
		case stStart:
			if b == '*' {
				s.state, s.num, s.digits, s.neg = stCount, 0, 0, false
				s.header = append(s.header[:0], b)
				continue
			}
			s.state, s.line = stInline, s.line[:0]
			fallthrough
		case stInline:
			if b != '\n' {
				if len(s.line) >= s.lim.MaxInline {
					return dst, &errProtocol{"too big inline request"}
				}
				s.line = append(s.line, b)
				continue
			}
			s.state = stStart
			line := bytes.TrimSuffix(s.line, []byte{'\r'})
			args, ok := referenceSplitArgs(line)
			if !ok {
				return dst, &errProtocol{"unbalanced quotes in request"}
			}
			if len(args) > s.lim.MaxArgs {
				return dst, &errProtocol{"invalid multibulk length"}
			}
			dst = referenceMultiBulk(dst, args)
			if cap(s.line) > 4096 {
				s.line = nil // a long line's buffer is not kept for the connection's life
			}
		case stCount, stBulkLen:
			if b == '\r' && s.digits > 0 {
				if s.neg && s.num == 0 {
					return dst, &errProtocol{"invalid multibulk length"}
				}
				s.state++ // the matching LF state
				if s.state == stCountLF {
					s.header = append(s.header, b)
				} else {
					dst = append(dst, b)
				}
				continue
			}
			if b == '-' && s.state == stCount && s.digits == 0 && !s.neg {
				s.neg = true
				s.header = append(s.header, b)
				continue
			}
			if b < '0' || b > '9' || (s.digits == 1 && s.num == 0) || (s.neg && s.digits == 18) {
				if s.state == stCount {
					return dst, &errProtocol{"invalid multibulk length"}
				}
				return dst, &errProtocol{"invalid bulk length"}
			}
			s.num = s.num*10 + int(b-'0')
			s.digits++
			if !s.neg {
				if err := s.checkLength(); err != nil {
					return dst, err
				}
			}
			if s.state == stCount {
				s.header = append(s.header, b)
			} else {
				dst = append(dst, b)
			}
		case stCountLF:
			if b != '\n' {
				return dst, &errProtocol{"invalid multibulk length"}
			}
			if s.neg || s.num == 0 {
				s.state = stStart // Redis ignores an empty or negative multibulk
				continue
			}
			dst = append(append(dst, s.header...), b)
			s.args, s.state = s.num, stDollar
		case stDollar:
			if b != '$' {
				return dst, &errProtocol{"expected '$', got '" + printable(b) + "'"}
			}
			dst = append(dst, b)
			s.state, s.num, s.digits, s.neg = stBulkLen, 0, 0, false
		case stBulkLenLF:
			if b != '\n' {
				return dst, &errProtocol{"invalid bulk length"}
			}
			dst = append(dst, b)
			s.left, s.state = s.num, stBulkData
			if s.left == 0 {
				s.state = stBulkCR
			}
		case stBulkData:
			n := min(s.left, len(p)-i)
			dst = append(dst, p[i:i+n]...)
			s.left -= n
			i += n - 1
			if s.left == 0 {
				s.state = stBulkCR
			}
		case stBulkCR:
			if b != '\r' {
				return dst, &errProtocol{"invalid bulk format"}
			}
			dst = append(dst, b)
			s.state = stBulkLF
		case stBulkLF:
			if b != '\n' {
				return dst, &errProtocol{"invalid bulk format"}
			}
			dst = append(dst, b)
			s.args--
			s.state = stDollar
			if s.args == 0 {
				s.state = stStart
			}
		}
	}
	return dst, nil
}

// appendMultiBulk writes args as a RESP multibulk request.
func referenceMultiBulk(dst []byte, args [][]byte) []byte {
	if len(args) == 0 {
		return dst
	}
	dst = strconv.AppendInt(append(dst, '*'), int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = strconv.AppendInt(append(dst, '$'), int64(len(a)), 10)
		dst = append(append(append(dst, '\r', '\n'), a...), '\r', '\n')
	}
	return dst
}

// splitArgs splits an inline command line as Redis's sdssplitargs does:
// arguments separated by spaces, tabs, CR or LF; "double quotes" with the
// escapes \xHH \n \r \t \b \a and \<any>; 'single quotes' with \'; a
// closing quote must be followed by a space or the end. The line ends at a
// NUL byte, as the C string Redis parses does. ok is false for unbalanced
// quotes.
func referenceSplitArgs(line []byte) (args [][]byte, ok bool) {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' }
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
			return args, true
		}
		cur := []byte{}
		inDouble, inSingle := false, false
		for done := false; !done; {
			c := at(i)
			switch {
			case inDouble:
				switch {
				case c == 0:
					return nil, false
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					cur = append(cur, unhex(at(i+2))<<4|unhex(at(i+3)))
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
					e := line[i]
					switch e {
					case 'n':
						e = '\n'
					case 'r':
						e = '\r'
					case 't':
						e = '\t'
					case 'b':
						e = '\b'
					case 'a':
						e = '\a'
					}
					cur = append(cur, e)
				case c == '"':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				default:
					cur = append(cur, c)
				}
			case inSingle:
				switch {
				case c == 0:
					return nil, false
				case c == '\\' && at(i+1) == '\'':
					i++
					cur = append(cur, '\'')
				case c == '\'':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				default:
					cur = append(cur, c)
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
					cur = append(cur, c)
				}
			}
			if i < len(line) {
				i++
			}
		}
		args = append(args, cur)
	}
}

// checkLength refuses a count or length as soon as its digits pass the
// limit, so no number ever overflows.
func (s *referenceScanner) checkLength() *errProtocol {
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
