package compat

import (
	"bufio"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
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
	p := systest.StartProc(t, t.TempDir())
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

// TestTransactionStatsMatchRedis runs aborted and completed transactions on
// redis-server and on idserver and compares what INFO commandstats and
// errorstats say of MULTI, EXEC and the queued commands.
func TestTransactionStatsMatchRedis(t *testing.T) {
	redisAddr := testproc.StartRedis(t)
	p := systest.StartProc(t, t.TempDir())
	ctx := context.Background()
	stats := func(addr string) map[string]string {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
		defer c.Close()
		c.ConfigResetStat(ctx)
		for _, script := range [][][]any{
			{{"MULTI"}, {"GET"}, {"EXEC"}},                    // a command refused by its arity
			{{"MULTI"}, {"NOSUCHCOMMAND"}, {"EXEC"}},          // an unknown command
			{{"MULTI"}, {"INCR", "t"}, {"EXEC"}},              // a transaction that runs
			{{"MULTI"}, {"INCR", "t"}, {"DISCARD"}, {"EXEC"}}, // EXEC without MULTI
		} {
			conn := c.Conn()
			for _, cmd := range script {
				conn.Do(ctx, cmd...)
			}
			conn.Close()
		}
		info, err := c.Info(ctx, "commandstats", "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, line := range strings.Split(info, "\r\n") {
			name, v, ok := strings.Cut(line, ":")
			if !ok || !(strings.HasPrefix(name, "errorstat_") || slices.Contains([]string{"cmdstat_multi", "cmdstat_exec", "cmdstat_discard", "cmdstat_get", "cmdstat_incr"}, name)) {
				continue
			}
			_, counts, _ := strings.Cut(v, "usec_per_call=") // times differ; counts must not
			if i := strings.Index(counts, ","); i >= 0 {
				counts = counts[i+1:]
			}
			calls, _, _ := strings.Cut(v, ",")
			out[name] = calls + "," + counts
		}
		return out
	}
	want, got := stats(redisAddr), stats(p.Addr)
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: idserver %q, redis-server %q", name, got[name], w)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: idserver %q, redis-server has none", name, g)
		}
	}
}
