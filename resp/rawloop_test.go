package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"idserver/engine"
	"idserver/internal/memstore"
	"idserver/internal/testproc"
)

// TestRawLoopLosesNoReadiness: the raw loop reads until EAGAIN, then waits
// for the poller's next readiness edge. A wake-up lost there would leave a client waiting for replies to commands
// the server never read. Clients write long pipelines in pieces of random
// size with random pauses (bytes arrive while the loop is answering, in the
// middle of frames, and in frames larger than the 4 KiB read buffer), and
// every reply must come back, in order, within the deadline.
func TestRawLoopLosesNoReadiness(t *testing.T) {
	testproc.Long(t)
	srv, addr := startServerT(t, Config{})
	const conns, commands = 16, 400
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pipelineInPieces(addr, int64(i), commands); err != nil {
				t.Errorf("connection %d: %v", i, err)
			}
		}()
	}
	// While they run, every TCP connection is on the raw loop.
	time.Sleep(50 * time.Millisecond)
	srv.mu.Lock()
	for c := range srv.clients {
		if c.conn.rc == nil {
			t.Errorf("TCP connection %s not served by the raw loop", c.addr)
		}
	}
	srv.mu.Unlock()
	wg.Wait()
}

// TestRawLoopSeesTheEndOfAStreamAfterItsLastBytes: a client that sends
// its last bytes and its FIN at once (often one readiness edge) must see
// the server close: the reply to a whole last frame, then EOF; nothing and
// EOF after a frame cut short. A loop that waited for another edge after
// a read that did not fill its buffer held such connections open (the
// process test of adversarial frames waited 5 s on each).
func TestRawLoopSeesTheEndOfAStreamAfterItsLastBytes(t *testing.T) {
	_, addr := startServerT(t, Config{})
	for i := range 60 {
		last, want := "*1\r\n$4\r\nPING\r\n", "+PONG\r\n"
		if i%2 == 1 {
			last, want = "*1\r\n$4\r\nPI", ""
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, last)
		conn.(*net.TCPConn).CloseWrite()
		out, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || string(out) != want {
			t.Fatalf("connection %d, %q then FIN: read %q, %v; want %q and the server's close", i, last, out, err, want)
		}
	}
}

// TestRawLoopAnswersAHalfClosedPipelineToItsEnd: a client that sends a
// pipeline larger than the read buffer and its FIN at once gets every
// reply, in order, then the server's close: nothing the client sent
// before its FIN is dropped.
func TestRawLoopAnswersAHalfClosedPipelineToItsEnd(t *testing.T) {
	_, addr := startServerT(t, Config{})
	for i := range 20 {
		n := 1 + i*300 // up to 5,701 commands, 80 KiB
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			io.WriteString(conn, strings.Repeat("*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n", n))
			conn.(*net.TCPConn).CloseWrite()
		}()
		out, err := io.ReadAll(conn)
		conn.Close()
		if want := strings.Repeat("$3\r\nabc\r\n", n); err != nil || string(out) != want {
			t.Fatalf("%d ECHOs then FIN: %d bytes of replies, %v; want %d and the server's close", n, len(out), err, len(want))
		}
	}
}

// pipelineInPieces sends n commands (PING, NEXTID, ECHO of 1 byte to 20
// KiB) written in pieces of 1 to 600 bytes, with pauses, and reads the n
// replies as they come.
func pipelineInPieces(addr string, seed int64, n int) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	var wire strings.Builder
	want := make([]string, n) // "" for NEXTID: an integer
	for i := range want {
		switch rng.IntN(3) {
		case 0:
			wire.WriteString("*1\r\n$4\r\nPING\r\n")
			want[i] = "+PONG"
		case 1:
			wire.WriteString("*1\r\n$6\r\nNEXTID\r\n")
		default:
			size := 1 + rng.IntN(20<<10)
			if rng.IntN(4) > 0 {
				size = 1 + rng.IntN(40)
			}
			payload := strings.Repeat(string(rune('a'+i%26)), size)
			fmt.Fprintf(&wire, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", size, payload)
			want[i] = fmt.Sprintf("$%d\r\n%s", size, payload)
		}
	}
	sent := make(chan error, 1)
	go func() {
		b := []byte(wire.String())
		for len(b) > 0 {
			k := min(len(b), 1+rng.IntN(600))
			if _, err := conn.Write(b[:k]); err != nil {
				sent <- err
				return
			}
			b = b[k:]
			if rng.IntN(8) == 0 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			}
		}
		sent <- nil
	}()
	rd := bufio.NewReader(conn)
	for i, w := range want {
		line, err := rd.ReadString('\n')
		if err != nil {
			return fmt.Errorf("reply %d of %d: %v", i, n, err)
		}
		line = strings.TrimSuffix(line, "\r\n")
		switch {
		case w == "":
			if _, err := strconv.ParseInt(strings.TrimPrefix(line, ":"), 10, 64); err != nil || line[0] != ':' {
				return fmt.Errorf("reply %d: %q, want an integer", i, line)
			}
		case strings.HasPrefix(w, "$"):
			body, err := rd.ReadString('\n')
			if err != nil {
				return fmt.Errorf("reply %d: %v", i, err)
			}
			if got := line + "\r\n" + strings.TrimSuffix(body, "\r\n"); got != w {
				return fmt.Errorf("reply %d: %.40q..., want %.40q...", i, got, w)
			}
		case line != w:
			return fmt.Errorf("reply %d: %q, want %q", i, line, w)
		}
	}
	return <-sent
}

// waitingSegments is a SegmentServer whose Next waits until released, as
// an INCR waits for a refill from the cluster.
type waitingSegments struct {
	entered chan struct{}
	release chan struct{}
}

func (w *waitingSegments) Next(ctx context.Context, tag string, n int64) (int64, int64, error) {
	w.entered <- struct{}{}
	select {
	case <-w.release:
		return 1, 1, nil
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

// TestCloseEndsAConnectionWaitingInACommand: a connection whose command
// waits (an INCR for a refill) holds its socket in the raw loop. Server.Close
// cancels that command's wait and returns at once, and the client sees its
// connection end.
func TestCloseEndsAConnectionWaitingInACommand(t *testing.T) {
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 3, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	seg := &waitingSegments{entered: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(seg.release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Version: "test", Segments: seg}, gen)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	conn, rd := dial(t, ln.Addr().String())
	send(t, conn, "INCR tag\r\n")
	select {
	case <-seg.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("INCR never reached the segment server")
	}
	srv.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Server.Close waited for a connection's waiting command")
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := rd.ReadByte(); err == nil || !(err == io.EOF || strings.Contains(err.Error(), "reset")) {
		rest, _ := rd.ReadString(10)
		t.Fatalf("connection still open after Server.Close: read %q, %v", string(b)+rest, err)
	}
}
