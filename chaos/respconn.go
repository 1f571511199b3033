package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// reply is one RESP2 reply.
type reply struct {
	kind byte // '+', '-', ':', '$', '*'
	str  string
	num  int64
	arr  []reply
	null bool
}

func (r reply) isError() bool { return r.kind == '-' }

// ints reads an integer array reply.
func (r reply) ints() ([]int64, error) {
	if r.kind != '*' || r.null {
		return nil, fmt.Errorf("not an array: %s", r)
	}
	out := make([]int64, len(r.arr))
	for i, e := range r.arr {
		if e.kind != ':' {
			return nil, fmt.Errorf("element %d is not an integer: %s", i, e)
		}
		out[i] = e.num
	}
	return out, nil
}

func (r reply) String() string {
	switch r.kind {
	case ':':
		return strconv.FormatInt(r.num, 10)
	case '*':
		if r.null {
			return "(nil array)"
		}
		return fmt.Sprintf("array of %d", len(r.arr))
	case '$':
		if r.null {
			return "(nil)"
		}
		return strconv.Quote(r.str)
	default:
		return string(r.kind) + r.str
	}
}

// respConn is one client connection; a reply that does not come in time
// closes it (the outcome of that command is unknown).
type respConn struct {
	id int64
	c  net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

func dialRESP(addr string, id int64, timeout time.Duration) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &respConn{id: id, c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriter(c)}, nil
}

func (rc *respConn) close() { rc.c.Close() }

// do sends one command and reads its reply by deadline. An error means the
// outcome is unknown and the connection must be closed.
func (rc *respConn) do(deadline time.Time, args ...string) (reply, error) {
	rc.c.SetDeadline(deadline)
	fmt.Fprintf(rc.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rc.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rc.w.Flush(); err != nil {
		return reply{}, err
	}
	return readReply(rc.r, 0)
}

// pipeline sends the commands at once and reads their replies by deadline.
// An error means the outcome of every command is unknown and the connection
// must be closed.
func (rc *respConn) pipeline(deadline time.Time, cmds [][]string) ([]reply, error) {
	rc.c.SetDeadline(deadline)
	for _, args := range cmds {
		fmt.Fprintf(rc.w, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(rc.w, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if err := rc.w.Flush(); err != nil {
		return nil, err
	}
	out := make([]reply, len(cmds))
	for i := range out {
		var err error
		if out[i], err = readReply(rc.r, 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readReply(r *bufio.Reader, depth int) (reply, error) {
	if depth > 4 {
		return reply{}, errors.New("reply nested too deep")
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return reply{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return reply{}, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], string(line[1:len(line)-2])
	switch kind {
	case '+', '-':
		return reply{kind: kind, str: body}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		return reply{kind: kind, num: n}, err
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > 1<<20 {
			return reply{}, fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			return reply{kind: kind, null: true}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return reply{}, err
		}
		return reply{kind: kind, str: string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > 20000 {
			return reply{}, fmt.Errorf("bad array length %q", body)
		}
		if n < 0 {
			return reply{kind: kind, null: true}, nil
		}
		out := reply{kind: kind, arr: make([]reply, n)}
		for i := range out.arr {
			if out.arr[i], err = readReply(r, depth+1); err != nil {
				return reply{}, err
			}
		}
		return out, nil
	}
	return reply{}, fmt.Errorf("unknown reply type %q", kind)
}
