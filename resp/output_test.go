package resp

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"idserver/engine"
	"idserver/internal/memstore"
	"idserver/internal/testproc"
)

// recordConn is a net.Conn whose writes go into a buffer, each write's size
// kept: the unread replies a connection held when it wrote them.
type recordConn struct {
	net.Conn // nil: only Write and SetWriteDeadline are called
	out      bytes.Buffer
	writes   []int
}

func (r *recordConn) Write(b []byte) (int, error) {
	r.writes = append(r.writes, len(b))
	return r.out.Write(b)
}

func (r *recordConn) SetWriteDeadline(time.Time) error { return nil }

// outputServer is a server on a real engine and a fake one-node cluster,
// with a client output limit of limit bytes.
func outputServer(t *testing.T, limit int, timeout time.Duration) (*Server, *fakeCluster) {
	t.Helper()
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 3, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	fc := newFakeCluster()
	return New(Config{ClientOutputLimit: limit, ClientOutputTimeout: timeout, Cluster: fc,
		Segments: engine.NewSegments(fc, 1000, time.Now)}, gen), fc
}

// answer runs the commands in one read's worth of frames, as the serve loop
// does, and writes what is left.
func answer(s *Server, c *client, cn *connection, in string) {
	p := frameParser{lim: DefaultLimits()}
	buf := []byte(in)
	for start := 0; start < len(buf) && cn.err == nil; {
		args, used, _ := p.parse(buf[start:], false)
		frame := buf[start : start+used]
		start += used
		start += s.handle(c, cn, &p, args, frame, buf[start:])
	}
	cn.flush()
}

// TestRepliesStreamAtTheClientOutputLimit: a transaction, a pipeline and a
// run of NEXTIDs whose replies are far larger than the limit are written in
// chunks of the limit plus at most one reply element, and the bytes are
// the whole reply, in order.
func TestRepliesStreamAtTheClientOutputLimit(t *testing.T) {
	const limit = 4096
	const element = 64 // the longest element here: a UUID bulk string is 44 bytes
	s, _ := outputServer(t, limit, time.Second)
	for _, tc := range []struct {
		name string
		in   string
		read func(t *testing.T, rd *bufio.Reader) int // values read
	}{
		{"EXEC of 30 x UUIDV7 1000 and NEXTID 1000", frames(append(append([]string{"MULTI"}, repeat("UUIDV7 1000", 30)...), "NEXTID 1000", "EXEC")...),
			func(t *testing.T, rd *bufio.Reader) int {
				for i := range 32 {
					if line := readLine(t, rd); line != map[bool]string{true: "+OK", false: "+QUEUED"}[i == 0] {
						t.Fatalf("reply %d: %q", i, line)
					}
				}
				if line := readLine(t, rd); line != "*31" {
					t.Fatalf("EXEC: %q", line)
				}
				n := 0
				for range 31 {
					n += readArray(t, rd)
				}
				return n
			}},
		{"pipeline of 20 x UUIDV7 1000", frames(repeat("UUIDV7 1000", 20)...),
			func(t *testing.T, rd *bufio.Reader) int {
				n := 0
				for range 20 {
					n += readArray(t, rd)
				}
				return n
			}},
		{"run of 10000 NEXTID and 3000 INCR", frames(append(repeat("NEXTID", 10000), repeat("INCR orders", 3000)...)...),
			func(t *testing.T, rd *bufio.Reader) int { return len(readInts(t, rd, 13000)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recordConn{}
			cn := &connection{nc: rc, limit: limit, timeout: time.Second}
			c := &client{conn: cn, proto: 2, authed: true}
			cn.SetContext(c)
			answer(s, c, cn, tc.in)
			if cn.err != nil {
				t.Fatal(cn.err)
			}
			total := 0
			for i, n := range rc.writes {
				total += n
				if n > limit+element {
					t.Fatalf("write %d of %d held %d bytes of replies, past the limit of %d plus an element", i, len(rc.writes), n, limit)
				}
			}
			if len(rc.writes) < total/(limit+element) || len(rc.writes) < 10 {
				t.Fatalf("%d bytes in %d writes: not streamed", total, len(rc.writes))
			}
			rd := bufio.NewReader(&rc.out)
			want := map[string]int{"EXEC of 30 x UUIDV7 1000 and NEXTID 1000": 31000, "pipeline of 20 x UUIDV7 1000": 20000, "run of 10000 NEXTID and 3000 INCR": 13000}[tc.name]
			if n := tc.read(t, rd); n != want {
				t.Fatalf("%d values, want %d", n, want)
			}
			if rest, _ := rd.ReadString(0); rest != "" {
				t.Fatalf("%d bytes after the replies: %q...", len(rest), rest[:min(len(rest), 40)])
			}
		})
	}
}

// readArray reads an array of bulk strings or integers, every one
// distinct, and returns its length.
func readArray(t *testing.T, rd *bufio.Reader) int {
	t.Helper()
	head := readLine(t, rd)
	n, err := strconv.Atoi(strings.TrimPrefix(head, "*"))
	if err != nil || head[0] != '*' {
		t.Fatalf("array header %q", head)
	}
	seen := map[string]bool{}
	for i := range n {
		v := readLine(t, rd)
		if v[0] == '$' {
			v = readLine(t, rd)
		}
		if seen[v] {
			t.Fatalf("element %d, %q, twice", i, v)
		}
		seen[v] = true
	}
	return n
}

// TestExecStopsIssuingWhenTheClientDoesNotRead: on a connection whose
// client reads nothing (a net.Pipe with no reader), EXEC of 50 x UUIDV7
// 10000 ends once one write has waited the client output timeout: the
// connection is failed as a slow client, the UUIDV7s after the first are
// not run (their values are never issued), and the SET queued after them
// still changes its tag.
func TestExecStopsIssuingWhenTheClientDoesNotRead(t *testing.T) {
	s, fc := outputServer(t, 4096, 200*time.Millisecond)
	server, other := net.Pipe()
	defer server.Close()
	defer other.Close()
	cn := &connection{nc: server, limit: s.cfg.ClientOutputLimit, timeout: s.cfg.ClientOutputTimeout}
	c := &client{conn: cn, proto: 2, authed: true}
	cn.SetContext(c)
	began := time.Now()
	answer(s, c, cn, frames(append(append([]string{"MULTI"}, repeat("UUIDV7 10000", 50)...), "SET kept 42", "EXEC")...))
	took := time.Since(began)
	if cn.err != errSlowClient {
		t.Fatalf("connection error %v, want the slow client's", cn.err)
	}
	// The first UUIDV7 issues its 10000 before writing them; its first
	// write times out, and no other UUIDV7 runs.
	if issued := s.issued("uuidv7"); issued != 10000 {
		t.Fatalf("%d UUIDs issued, want the first command's 10000 only", issued)
	}
	if v, ok := fc.Get("kept"); !ok || v != 42 {
		t.Fatalf("the queued SET did not run: %d, %v", v, ok)
	}
	if took > 5*time.Second {
		t.Fatalf("EXEC took %v to give up on a client that reads nothing", took)
	}
	if len(cn.out) != 0 {
		t.Fatalf("%d reply bytes still held after the connection failed", len(cn.out))
	}
}

// TestSlowClientClosedOthersServed: over TCP, a client that pipelines UUIDV7
// 10000 and MULTI ... EXEC without reading is closed after the client output
// timeout and counted in INFO, while another client's PING and NEXTID are
// answered all along.
func TestSlowClientClosedOthersServed(t *testing.T) {
	testproc.Long(t)
	s, addr := startServerT(t, Config{ClientOutputLimit: 16 << 10, ClientOutputTimeout: 300 * time.Millisecond})
	for i, attack := range []string{
		frames(repeat("UUIDV7 10000", 2000)...),
		frames(append(append([]string{"MULTI"}, repeat("UUIDV7 10000", 2000)...), "EXEC")...),
	} {
		slow, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		go slow.Write([]byte(attack)) // blocks once the server stops reading; ends when it closes
		other, rd := dial(t, addr)
		for deadline := time.Now().Add(10 * time.Second); s.stats.slowClients.Load() < int64(i+1); {
			if time.Now().After(deadline) {
				t.Fatalf("attack %d: the client that does not read is still open after 10s", i)
			}
			began := time.Now()
			send(t, other, "PING\r\nNEXTID\r\n")
			if line := readLine(t, rd); line != "+PONG" {
				t.Fatalf("PING: %q", line)
			}
			if line := readLine(t, rd); line[0] != ':' {
				t.Fatalf("NEXTID: %q", line)
			}
			if took := time.Since(began); took > time.Second {
				t.Fatalf("PING and NEXTID took %v while another client did not read", took)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The slow connection is closed: what it was sent ends in EOF or a reset.
		slow.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64<<10)
		for {
			if _, err := slow.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("attack %d: the slow connection is still open", i)
				}
				break
			}
		}
	}
	if issued := s.issued("uuidv7"); issued >= 2000*10000 {
		t.Fatalf("%d UUIDs issued: every command ran for clients that read nothing", issued)
	}
	conn, rd := dial(t, addr)
	send(t, conn, "INFO clients\r\n")
	size, _ := strconv.Atoi(strings.TrimPrefix(readLine(t, rd), "$"))
	info := make([]byte, size+2)
	if _, err := io.ReadFull(rd, info); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(info), "\r\nclient_output_buffer_limit_disconnections:2\r\n") {
		t.Fatalf("INFO clients: %q", info)
	}
}
