package resp

import (
	"strconv"
	"strings"

	"github.com/tidwall/redcon"
)

// cmdScan: SCAN cursor [MATCH pattern] [COUNT n] [TYPE type], over tags in
// sorted order. As in Redis, COUNT is how many tags a page looks at and
// MATCH filters them afterwards, so a page can be empty before the end;
// cursor "0" ends the scan.
func cmdScan(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	// As Redis's strtoull: "+n" is n, "-n" is 2^64-n (a cursor past every tag).
	text, negative := strings.CutPrefix(string(args[1]), "-")
	if !negative {
		text, _ = strings.CutPrefix(text, "+")
	}
	cursor, err := strconv.ParseUint(text, 10, 64)
	if negative {
		cursor = -cursor
	}
	if err != nil {
		s.errorReply(conn, "ERR invalid cursor")
		return
	}
	count := 10
	var pattern []byte
	typ := ""
	for i := 2; i < len(args); i += 2 {
		opt := strings.ToLower(string(args[i]))
		if i+1 >= len(args) {
			s.errorReply(conn, "ERR syntax error")
			return
		}
		switch opt {
		case "count":
			n, ok := parseInt64(args[i+1])
			if !ok {
				s.errorReply(conn, errNotInteger)
				return
			}
			if n < 1 {
				s.errorReply(conn, "ERR syntax error")
				return
			}
			count = int(min(n, 100_000))
		case "match":
			pattern = args[i+1]
		case "type":
			typ = strings.ToLower(string(args[i+1]))
		default:
			s.errorReply(conn, "ERR syntax error")
			return
		}
	}
	if !s.needCluster(conn) {
		return
	}
	next, tags := s.cfg.Cluster.ScanTags(cursor, count)
	kept := tags[:0]
	for _, tag := range tags {
		if (typ == "" || typ == "string") && (pattern == nil || globMatch(pattern, []byte(tag), false)) {
			kept = append(kept, tag)
		}
	}
	conn.WriteArray(2)
	conn.WriteBulkString(strconv.FormatUint(next, 10))
	conn.WriteArray(len(kept))
	for _, tag := range kept {
		conn.WriteBulkString(tag)
	}
}

// cmdType: a tag is a string, as INCR's counters are in Redis.
func cmdType(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.needCluster(conn) {
		return
	}
	if s.lookupTag(args[1]) {
		conn.WriteString("string")
		return
	}
	conn.WriteString("none")
}

// globMatch is Redis's stringmatchlen: * ? [abc] [^a-z] and \ escapes,
// with its guard against exponential backtracking over many '*'.
func globMatch(pattern, str []byte, nocase bool) bool {
	skipLonger := false
	return globMatchFrom(pattern, str, nocase, &skipLonger)
}

func globMatchFrom(pattern, str []byte, nocase bool, skipLonger *bool) bool {
	fold := func(b byte) byte {
		if nocase && 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	for len(pattern) > 0 && len(str) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for len(str) > 0 {
				if globMatchFrom(pattern[1:], str, nocase, skipLonger) {
					return true
				}
				if *skipLonger {
					return false
				}
				str = str[1:]
			}
			// The rest matches from nowhere in str, so no earlier '*'
			// can help by matching more.
			*skipLonger = true
			return false
		case '?':
			str = str[1:]
		case '[':
			pattern = pattern[1:]
			not := len(pattern) > 0 && pattern[0] == '^'
			if not {
				pattern = pattern[1:]
			}
			match := false
			for {
				if len(pattern) == 0 {
					break
				}
				if pattern[0] == '\\' && len(pattern) >= 2 {
					pattern = pattern[1:]
					if pattern[0] == str[0] {
						match = true
					}
				} else if pattern[0] == ']' {
					break
				} else if len(pattern) >= 3 && pattern[1] == '-' {
					start, end := fold(pattern[0]), fold(pattern[2])
					if start > end {
						start, end = end, start
					}
					pattern = pattern[2:]
					if ch := fold(str[0]); start <= ch && ch <= end {
						match = true
					}
				} else if fold(pattern[0]) == fold(str[0]) {
					match = true
				}
				pattern = pattern[1:]
			}
			if len(pattern) == 0 { // no closing ']': Redis treats the end as one
				pattern = []byte{']'}
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			str = str[1:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if fold(pattern[0]) != fold(str[0]) {
				return false
			}
			str = str[1:]
		}
		pattern = pattern[1:]
		if len(str) == 0 {
			for len(pattern) > 0 && pattern[0] == '*' {
				pattern = pattern[1:]
			}
			break
		}
	}
	return len(pattern) == 0 && len(str) == 0
}
