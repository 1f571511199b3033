package main

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"idserver/internal/testproc"
)

// rawReplies sends each command inline on one connection and returns the
// first line of each reply (bulk strings with their body).
func rawReplies(t *testing.T, addr string, cmds []string) []string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	var out []string
	for _, c := range cmds {
		if _, err := conn.Write([]byte(c + "\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if strings.HasPrefix(line, "$") && !strings.HasPrefix(line, "$-1") {
			body, _ := rd.ReadString('\n')
			line += body
		}
		out = append(out, line)
	}
	return out
}

// TestIncrRepliesMatchRedisByteForByte runs the same INCR-family commands
// against Debian's redis-server and idserver, where their semantics agree,
// and compares the replies byte for byte.
func TestIncrRepliesMatchRedisByteForByte(t *testing.T) {
	redisAddr := testproc.StartRedis(t)
	p := startProc(t, t.TempDir())
	cmds := []string{
		"INCR orders", "INCR orders", "INCRBY orders 5", "INCRBY orders 700",
		"INCR", "INCRBY orders", "INCRBY orders x", "INCRBY orders 99999999999999999999", "INCR a b",
		"GET nosuch", "EXISTS orders nosuch", "EXISTS nosuch",
		"SET edge 9223372036854775806", "INCRBY edge 5", "INCR edge", "INCR edge", "INCRBY edge 1",
		"SET", "SET x 12 13 14",
		"DBSIZE", "PING", "ECHO hello", "SELECT 0",
		"NOSUCHCOMMAND a b",
	}
	want := rawReplies(t, redisAddr, cmds)
	got := rawReplies(t, p.Addr, cmds)
	for i := range cmds {
		if got[i] != want[i] {
			t.Errorf("%-35q redis %q, idserver %q", cmds[i], want[i], got[i])
		}
	}
}
