package resp

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
)

func parseInfo(t *testing.T, text string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	var cur map[string]string
	for _, line := range strings.Split(strings.TrimRight(text, "\r\n"), "\r\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "# "):
			cur = map[string]string{}
			out[strings.ToLower(line[2:])] = cur
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok || cur == nil {
				t.Fatalf("INFO line %q", line)
			}
			cur[k] = v
		}
	}
	return out
}

// TestInfoStaysSmallWithManyTags: 50,000 tags cost INFO nothing; they are
// paged through SCAN instead.
func TestInfoStaysSmallWithManyTags(t *testing.T) {
	testproc.Long(t)
	fc := newFakeCluster()
	for i := range 50_000 {
		fc.tags[fmt.Sprintf("tag:%05d", i)] = int64(i)
	}
	addr := startServer(t, Config{Cluster: fc})
	rdb := newClient(t, addr, 2, "")
	ctx := context.Background()
	for _, args := range [][]any{{"INFO"}, {"INFO", "everything"}} {
		start := time.Now()
		text, err := rdb.Do(ctx, args...).Text()
		d := time.Since(start)
		if err != nil || len(text) > 8<<10 || d > 100*time.Millisecond {
			t.Fatalf("%v: %d bytes in %v, %v", args, len(text), d, err)
		}
		sec := parseInfo(t, text)
		if sec["server"]["arch_bits"] != "64" && sec["server"]["arch_bits"] != "32" {
			t.Errorf("%v: arch_bits %q", args, sec["server"]["arch_bits"])
		}
		if sec["replication"]["role"] != "master" || sec["cluster"]["cluster_enabled"] != "0" ||
			sec["cluster"]["raft_role"] != "Leader" || sec["keyspace"]["db0"] != "keys=50000,expires=0,avg_ttl=0" ||
			sec["persistence"]["loading"] != "0" {
			t.Errorf("%v:\n%s", args, text)
		}
	}
	text, _ := rdb.Do(ctx, "INFO", "server").Text()
	if sec := parseInfo(t, text); len(sec) != 1 || sec["server"] == nil {
		t.Errorf("INFO server: %q", text)
	}

	// SCAN pages over every tag once; MATCH filters; TYPE.
	seen := map[string]bool{}
	var cursor uint64
	for pages := 0; ; pages++ {
		keys, next, err := rdb.Scan(ctx, cursor, "tag:0001*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if seen[k] || !strings.HasPrefix(k, "tag:0001") {
				t.Fatalf("SCAN returned %q twice or unmatched", k)
			}
			seen[k] = true
		}
		if cursor = next; cursor == 0 {
			break
		}
		if pages > 100 {
			t.Fatal("SCAN does not end")
		}
	}
	if len(seen) != 10 {
		t.Fatalf("SCAN MATCH tag:0001*: %d tags", len(seen))
	}
	if typ := rdb.Type(ctx, "tag:00001").Val(); typ != "string" {
		t.Fatalf("TYPE tag: %q", typ)
	}
	if typ := rdb.Type(ctx, "nosuch").Val(); typ != "none" {
		t.Fatalf("TYPE unknown: %q", typ)
	}
	for _, args := range [][]any{{"SCAN", "x"}, {"SCAN", "0", "COUNT", "0"}, {"SCAN", "0", "MATCH"}, {"SCAN", "0", "FOO", "1"}} {
		if err := rdb.Do(ctx, args...).Err(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestSetOptions(t *testing.T) {
	addr := startServer(t, Config{Cluster: newFakeCluster()})
	rdb := newClient(t, addr, 2, "")
	ctx := context.Background()
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"SET", "k", "5", "XX"}, "<nil>"},
		{[]any{"SET", "k", "5", "NX"}, "OK"},
		{[]any{"SET", "k", "9", "NX"}, "<nil>"},
		{[]any{"SET", "k", "9", "NX", "GET"}, "5"},
		{[]any{"SET", "k", "7", "XX", "GET"}, "5"},
		{[]any{"SET", "n", "7", "GET"}, "<nil>"},
		{[]any{"SETNX", "k", "100"}, "0"},
		{[]any{"SETNX", "m", "100"}, "1"},
		{[]any{"SET", "k", "8", "NX", "XX"}, "ERR syntax error"},
		{[]any{"SET", "k", "8", "EX"}, "ERR syntax error"},
		{[]any{"SET", "k", "8", "EX", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"SET", "k", "8", "PX", "0"}, "ERR invalid expire time in 'set' command"},
		{[]any{"SET", "k", "8", "EX", "10"}, "ERR tags never expire: SET EX is not supported"},
		{[]any{"SET", "k", "8", "KEEPTTL"}, "ERR tags never expire: SET KEEPTTL is not supported"},
		{[]any{"SET", "k", "x", "NX"}, "ERR value is not an integer or out of range"},
	} {
		v, err := rdb.Do(ctx, tc.args...).Result()
		got := fmt.Sprint(v)
		if err == redis.Nil {
			got = "<nil>"
		} else if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%v: %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestLoadingUntilReady: before Config.Ready says true, only the
// connection commands answer; PING and ECHO answer -LOADING as in Redis 7
// (a readiness probe's PING says ready only when the node can issue);
// INFO says loading:1, as ioredis expects.
const errLoadingReply = "-" + errLoading

func TestLoadingUntilReady(t *testing.T) {
	var ready atomic.Bool
	addr := startServer(t, Config{Ready: ready.Load})
	conn, rd := dial(t, addr)
	send(t, conn, "PING\r\nECHO a\r\nNEXTID\r\nMULTI\r\nNEXTID\r\nEXEC\r\nINFO persistence\r\n")
	got := replies(t, rd, 6)
	want := []string{errLoadingReply, errLoadingReply, errLoadingReply, "+OK",
		"-LOADING idserver is starting: waiting for its worker ID and a Raft leader",
		"-EXECABORT Transaction discarded because of previous errors."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("while loading:\n got %q\nwant %q", got, want)
	}
	readLine(t, rd) // $len
	if line := readLine(t, rd); line != "# Persistence" {
		t.Fatalf("INFO: %q", line)
	}
	if line := readLine(t, rd); line != "loading:1" {
		t.Fatalf("INFO while loading: %q", line)
	}
	ready.Store(true)
	conn2, rd2 := dial(t, addr)
	send(t, conn2, "PING\r\nNEXTID\r\n")
	if line := readLine(t, rd2); line != "+PONG" {
		t.Fatalf("PING once ready: %q", line)
	}
	if line := readLine(t, rd2); line[0] != ':' {
		t.Fatalf("once ready: %q", line)
	}
}
