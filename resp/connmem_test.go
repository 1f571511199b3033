package resp

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"idserver/internal/wait"
)

// heapInUse is the heap's live bytes after a GC.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestIdleConnectionsHoldNoBuffers: a connection that was answered and
// then idles holds no read or reply buffer, only its few structs (and its
// goroutine's stack, not counted here); once a burst of them closes, the
// server gives their memory back (releaseMemory) and serves on. The heap
// is measured in process with the clients' side of each connection, which
// it counts too; a read buffer kept per connection (4 KiB) breaks the
// bound.
func TestIdleConnectionsHoldNoBuffers(t *testing.T) {
	srv, addr := startServerT(t, Config{MaxClients: 5000})
	const n = 2000
	before := heapInUse()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "+PONG\r\n" {
			t.Fatalf("PING: %q, %v", line, err)
		}
		conns[i] = c
	}
	wait.For(t, 10*time.Second, "every connection registered", func() (bool, string) {
		k := srv.connectedClients()
		return k == n, strconv.Itoa(k)
	})
	per := float64(heapInUse()-before) / n
	t.Logf("heap per idle connection, both sides: %.0f B", per)
	if per > 3<<10 {
		t.Errorf("heap per idle connection, both sides: %.0f B, want at most 3 KiB", per)
	}
	for _, c := range conns {
		c.Close()
	}
	wait.For(t, 20*time.Second, "every connection gone and the memory given back", func() (bool, string) {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.clients) == 0 && srv.connPeak == 0 && !srv.releasing,
			"open " + strconv.Itoa(len(srv.clients)) + " peak " + strconv.Itoa(srv.connPeak)
	})
	c, rd := dial(t, addr)
	send(t, c, "*1\r\n$4\r\nPING\r\n")
	if got := readLine(t, rd); got != "+PONG" {
		t.Fatalf("PING after the closes: %q", got)
	}
}

// TestOneReadPerRequest: a client that sends one command at a time and
// waits for its reply costs the server one read system call per command
// (total_reads_processed), as Redis: the loop does not read again to find
// nothing before it waits.
func TestOneReadPerRequest(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	c, rd := dial(t, addr)
	const n = 500
	before := srv.stats.reads.Load()
	for range n {
		send(t, c, "*1\r\n$4\r\nPING\r\n")
		if got := readLine(t, rd); got != "+PONG" {
			t.Fatalf("PING: %q", got)
		}
	}
	reads := srv.stats.reads.Load() - before
	t.Logf("%d reads for %d requests", reads, n)
	if reads > n+n/20 {
		t.Errorf("%d reads for %d requests, want one each", reads, n)
	}
}

// TestFrameByteByByte: a frame whose bytes come one read at a time (the
// server has read each before the next is sent) is answered once whole,
// and a FIN after a cut frame ends the connection.
func TestFrameByteByByte(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	c, rd := dial(t, addr)
	frame := "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"
	for round := range 2 {
		for i := range len(frame) {
			before := srv.stats.reads.Load()
			if _, err := c.Write([]byte{frame[i]}); err != nil {
				t.Fatal(err)
			}
			if i < len(frame)-1 {
				wait.For(t, 5*time.Second, "the server reads byte "+strconv.Itoa(i), func() (bool, string) {
					return srv.stats.reads.Load() > before, ""
				})
			}
		}
		if got := readLine(t, rd); got != "$5" {
			t.Fatalf("round %d: %q, want $5", round, got)
		}
		if got := readLine(t, rd); got != "hello" {
			t.Fatalf("round %d: %q, want hello", round, got)
		}
	}
	io.WriteString(c, frame[:10])
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
		t.Fatalf("after a cut frame and FIN: %q, %v; want the server's close", rest, err)
	}
}

// TestLargeFramesPipelined: frames larger than the read buffer, several in
// one write with small ones between them, are each answered whole and in
// order; a connection whose buffer grew for them answers small frames after.
func TestLargeFramesPipelined(t *testing.T) {
	_, addr := startServerT(t, Config{})
	c, rd := dial(t, addr)
	var sent strings.Builder
	var want []string
	for i, size := range []int{60 << 10, 5, 20 << 10, 1, 63 << 10} {
		arg := strings.Repeat(string(rune('a'+i)), size)
		sent.WriteString("*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(size) + "\r\n" + arg + "\r\n*1\r\n$4\r\nPING\r\n")
		want = append(want, arg, "PONG")
	}
	go io.WriteString(c, sent.String())
	for i, w := range want {
		head := readLine(t, rd)
		if w == "PONG" {
			if head != "+PONG" {
				t.Fatalf("reply %d: %q, want +PONG", i, head)
			}
			continue
		}
		if head != "$"+strconv.Itoa(len(w)) {
			t.Fatalf("reply %d: %q, want $%d", i, head, len(w))
		}
		if got := readLine(t, rd); got != w {
			t.Fatalf("reply %d: %d bytes, not the %d sent", i, len(got), len(w))
		}
	}
	send(t, c, "*1\r\n$4\r\nPING\r\n")
	if got := readLine(t, rd); got != "+PONG" {
		t.Fatalf("PING after: %q", got)
	}
}
