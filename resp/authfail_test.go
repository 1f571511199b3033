package resp

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
	"idserver/internal/wait"
)

const wrongAuth = "*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n"

// TestAuthFloodIsSlowedOnItsConnectionOnly: 1,000 wrong passwords
// pipelined on one connection are answered no faster than authDelay lets
// them (before, all 1,000 came back within milliseconds), while another
// client's PINGs, and a wrong AUTH on a third connection, are answered at
// once.
func TestAuthFloodIsSlowedOnItsConnectionOnly(t *testing.T) {
	testproc.Long(t)
	addr := startServer(t, Config{Password: "pw"})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var replies atomic.Int64
	go func() {
		rd := bufio.NewReader(conn)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "-WRONGPASS") {
				replies.Add(1)
			}
		}
	}()
	start := time.Now()
	if _, err := conn.Write([]byte(strings.Repeat(wrongAuth, 1000))); err != nil {
		t.Fatal(err)
	}
	other := redis.NewClient(&redis.Options{Addr: addr, Password: "pw", MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer other.Close()
	window := 3 * time.Second
	for time.Since(start) < window {
		t0 := time.Now()
		if err := other.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("another client's PING during the flood: %v", err)
		}
		if d := time.Since(t0); d > 500*time.Millisecond {
			t.Fatalf("another client's PING took %v during the flood", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A fresh connection's first wrong password is answered at once.
	third, rd := dial(t, addr)
	t0 := time.Now()
	send(t, third, wrongAuth)
	if line := readLine(t, rd); !strings.HasPrefix(line, "-WRONGPASS") || time.Since(t0) > 500*time.Millisecond {
		t.Fatalf("a wrong AUTH on another connection: %q after %v", line, time.Since(t0))
	}
	elapsed, n := time.Since(start), int(replies.Load())
	// The k-th reply comes after the waits of failures 1..k: at most this
	// many fit in the time elapsed.
	bound, waited := 0, time.Duration(0)
	for k := 1; k <= 1000; k++ {
		if waited += authDelay(k); waited > elapsed {
			break
		}
		bound = k
	}
	t.Logf("%d of 1000 wrong passwords answered in %v (at most %d fit)", n, elapsed.Round(time.Millisecond), bound)
	if n > bound || n >= 1000 {
		t.Fatalf("%d wrong passwords answered in %v on one connection: the waits allow at most %d", n, elapsed, bound)
	}
	if n <= authFreeFailures {
		t.Fatalf("only %d wrong passwords answered in %v: the connection is stuck, not slowed", n, elapsed)
	}
}

// TestAuthFailuresCountedAndLogLinesBounded: 180 wrong passwords from 60
// connections (3 each: none waits) are counted in INFO
// acl_access_denied_auth and logged in two lines, the first at once and
// the rest together one interval later, each with its count and the last
// client's address.
func TestAuthFailuresCountedAndLogLinesBounded(t *testing.T) {
	testproc.Long(t)
	var log testproc.Buffer
	srv, addr := startServerT(t, Config{Password: "pw", Logger: slog.New(slog.NewTextHandler(&log, nil))})
	var wg sync.WaitGroup
	for range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			conn.Write([]byte(strings.Repeat(wrongAuth, 3)))
			rd := bufio.NewReader(conn)
			for range 3 {
				if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-WRONGPASS") {
					t.Errorf("reply to a wrong password: %q, %v", line, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rdb := newClient(t, addr, 2, "pw")
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil || !strings.Contains(info, "\r\nacl_access_denied_auth:180\r\n") {
		t.Fatalf("INFO stats after 180 wrong passwords: %v\n%s", err, info)
	}
	if n := srv.AuthFailures(); n != 180 {
		t.Fatalf("AuthFailures: %d, want 180", n)
	}
	line := regexp.MustCompile(`msg="AUTH refused: wrong password" failures=(\d+) last_client=127\.0\.0\.1:\d+`)
	var lines [][]string
	sum := 0
	wait.Until(authLogInterval+10*time.Second, func() (bool, string) {
		lines, sum = line.FindAllStringSubmatch(log.String(), -1), 0
		for _, l := range lines {
			n, _ := strconv.Atoi(l[1])
			sum += n
		}
		return sum == 180, ""
	})
	if sum != 180 || len(lines) != 2 {
		t.Fatalf("%d log lines counting %d failures, want 2 lines counting 180:\n%s", len(lines), sum, log.String())
	}
}
