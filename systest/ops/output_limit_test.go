package ops

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// rssBound is the most resident memory the server may use while clients
// that do not read ask for 43 GB of replies: unbounded replies would take
// it to gigabytes within seconds.
const rssBound = 256 << 20

// vmRSS is a process's resident set size in bytes, from /proc/<pid>/status.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// multibulk encodes one command.
func multibulkFrame(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// TestClientsThatDoNotReadAreClosedInBoundedMemory runs against the real
// binary: MULTI, 100,000 x UUIDV7 10000, EXEC from a
// client that reads the QUEUEDs and then stops reading (43 GB of replies
// asked for), and the same 100,000 UUIDV7 10000 pipelined by a client
// that reads nothing. While each runs, the server's VmRSS stays under
// rssBound, another client's PING and NEXTID are each answered within 1s,
// and the client that does not read is closed (IDSERVER_CLIENT_OUTPUT_TIMEOUT
// 2s: a write of replies waits 2 to 4 s; set in the environment,
// which a binary from before the limit ignores, so that the same test run
// on one shows the attack: VmRSS past the bound within a second for MULTI,
// the pipelining client never closed).
func TestClientsThatDoNotReadAreClosedInBoundedMemory(t *testing.T) {
	p, err := systest.Launch(t, t.TempDir(), []string{"IDSERVER_CLIENT_OUTPUT_TIMEOUT=2s"})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 5 * time.Second})
	defer rdb.Close()
	attackNonReaders(t, p, rdb, func() (net.Conn, error) { return net.Dial("tcp", p.Addr) }, true)
}

// TestTLSClientThatDoesNotReadIsClosed: the pipelined attack over TLS, whose
// writes time out as plain TCP's do.
func TestTLSClientThatDoesNotReadIsClosed(t *testing.T) {
	certFile, keyFile, pool := testproc.SelfSigned(t, t.TempDir())
	p, err := systest.LaunchTLS(t, t.TempDir(), pool, "--tls-cert", certFile, "--tls-key", keyFile, "--client-output-timeout", "2s")
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: pool}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 5 * time.Second, TLSConfig: tc})
	defer rdb.Close()
	attackNonReaders(t, p, rdb, func() (net.Conn, error) { return tls.Dial("tcp", p.Addr, tc) }, false)
}

// attackNonReaders runs the pipelined attack, and with multi the MULTI one
// first, on connections from dial, while rdb, another client, is served.
func attackNonReaders(t *testing.T, p *systest.Proc, rdb *redis.Client, dial func() (net.Conn, error), multi bool) {
	pid := p.Cmd.Process.Pid
	ctx := context.Background()
	const commands, count = 100_000, "10000"

	var tx, pipeline []byte
	tx = multibulkFrame(tx, "MULTI")
	for range commands {
		tx = multibulkFrame(tx, "UUIDV7", count)
		pipeline = multibulkFrame(pipeline, "UUIDV7", count)
	}
	tx = multibulkFrame(tx, "EXEC")
	type attack struct {
		name     string
		frames   []byte
		readUpTo string // the slow client reads up to and with this line, then stops
	}
	attacks := []attack{{"100000 x UUIDV7 10000 pipelined", pipeline, ""}}
	if multi {
		attacks = append([]attack{{"MULTI, 100000 x UUIDV7 10000, EXEC", tx, "*" + strconv.Itoa(commands)}}, attacks...)
	}

	for i, attack := range attacks {
		before := vmRSS(t, pid)
		slow, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		go slow.Write(attack.frames) // ends with an error once the server closes the connection
		var reachedExec atomic.Bool
		if attack.readUpTo != "" {
			go func() {
				rd := bufio.NewReader(slow)
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					if strings.TrimSpace(line) == attack.readUpTo {
						reachedExec.Store(true)
						return // and reads nothing more
					}
				}
			}()
		}

		peak, served, slowest := before, 0, time.Duration(0)
		began := time.Now()
		for deadline := began.Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if rss := vmRSS(t, pid); rss > peak {
				peak = rss
				if rss > rssBound {
					t.Fatalf("%s: server VmRSS %d MB after %v, past the bound of %d MB", attack.name, rss>>20, time.Since(began).Round(time.Millisecond), rssBound>>20)
				}
			}
			start := time.Now()
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatalf("%s: PING from another client: %v", attack.name, err)
			}
			if _, err := rdb.Do(ctx, "NEXTID").Int64(); err != nil {
				t.Fatalf("%s: NEXTID from another client: %v", attack.name, err)
			}
			took := time.Since(start)
			if took > time.Second {
				t.Fatalf("%s: another client's PING and NEXTID took %v", attack.name, took)
			}
			slowest = max(slowest, took)
			served++
			info, err := rdb.Info(ctx, "clients").Result()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(info, "client_output_buffer_limit_disconnections:"+strconv.Itoa(i+1)+"\r\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the client that does not read is still open after 60s (VmRSS peak %d MB)", attack.name, peak>>20)
			}
		}
		closedAfter := time.Since(began)
		if attack.readUpTo != "" && !reachedExec.Load() {
			t.Fatalf("%s: closed before EXEC answered: the attack did not reach EXEC", attack.name)
		}
		// The connection is closed: reading what is buffered ends in EOF or a reset.
		slow.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1<<20)
		for {
			_, err := slow.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s: the slow client's connection is still open", attack.name)
			}
			if err != nil {
				break
			}
		}
		t.Logf("%s: slow client closed after %v; server VmRSS %d MB before, peak %d MB (bound %d MB); another client served %d times, slowest PING+NEXTID %v",
			attack.name, closedAfter.Round(time.Millisecond), before>>20, peak>>20, rssBound>>20, served, slowest.Round(time.Microsecond))
	}
	if !strings.Contains(p.Log(), "closing a client that does not read its replies") {
		t.Fatal("no log line for the closed client")
	}
}
