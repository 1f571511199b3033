package resp

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replies reads n RESP2 reply lines, bulk bodies joined to their header.
func replies(t *testing.T, rd interface{ ReadString(byte) (string, error) }, n int) []string {
	t.Helper()
	var out []string
	for range n {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v after %q", err, out)
		}
		out = append(out, strings.TrimSuffix(line, "\r\n"))
	}
	return out
}

func TestTransactions(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	conn, rd := dial(t, addr)

	// DISCARD leaves no trace: nothing queued ran.
	send(t, conn, "MULTI\r\nNEXTID\r\nGENEOF buyer\r\nDISCARD\r\n")
	if got := strings.Join(replies(t, rd, 4), " "); got != "+OK +QUEUED +QUEUED +OK" {
		t.Fatalf("MULTI ... DISCARD: %s", got)
	}
	if n := calls(srv, "nextid"); n != 0 {
		t.Fatalf("NEXTID ran %d times after DISCARD", n)
	}

	// EXEC runs the queue in order; a failing command is one error element.
	send(t, conn, "MULTI\r\nNEXTID\r\nDECODE x\r\nECHO hi\r\nEXEC\r\n")
	got := replies(t, rd, 9)
	if strings.Join(got[:5], " ") != "+OK +QUEUED +QUEUED +QUEUED *3" || got[5][0] != ':' ||
		got[6] != "-ERR invalid id" || got[7] != "$2" || got[8] != "hi" {
		t.Fatalf("MULTI ... EXEC: %q", got)
	}
	if n := calls(srv, "nextid"); n != 1 {
		t.Fatalf("NEXTID counted %d times after EXEC, want 1", n)
	}

	// Errors while queueing abort EXEC, and nothing runs.
	send(t, conn, "MULTI\r\nNEXTID\r\nNOSUCH x\r\nECHO\r\nEXEC\r\nEXEC\r\n")
	want := "+OK +QUEUED -ERR unknown command 'NOSUCH', with args beginning with: 'x'  " +
		"-ERR wrong number of arguments for 'echo' command -EXECABORT Transaction discarded because of previous errors. -ERR EXEC without MULTI"
	if got := strings.Join(replies(t, rd, 6), " "); got != want {
		t.Fatalf("queueing errors:\n got %s\nwant %s", got, want)
	}
	if n := calls(srv, "nextid"); n != 1 {
		t.Fatalf("NEXTID ran in an aborted transaction")
	}

	// Nested MULTI and WATCH inside MULTI are errors that do not abort.
	send(t, conn, "MULTI\r\nMULTI\r\nWATCH a\r\nPING\r\nEXEC\r\n")
	want = "+OK -ERR MULTI calls can not be nested -ERR WATCH inside MULTI is not allowed +QUEUED *1 +PONG"
	if got := strings.Join(replies(t, rd, 6), " "); got != want {
		t.Fatalf("nested:\n got %s\nwant %s", got, want)
	}

	// A refused WATCH fails the next EXEC, unless UNWATCH came between.
	send(t, conn, "WATCH a\r\nMULTI\r\nPING\r\nEXEC\r\nWATCH a\r\nUNWATCH\r\nMULTI\r\nPING\r\nEXEC\r\n")
	got = replies(t, rd, 10)
	if !strings.HasPrefix(got[0], "-ERR WATCH is not supported") || !strings.HasPrefix(got[3], "-EXECABORT") ||
		strings.Join(got[5:], " ") != "+OK +OK +QUEUED *1 +PONG" {
		t.Fatalf("WATCH: %q", got)
	}
	if n := calls(srv, "ping"); n != 2 {
		t.Fatalf("PING ran %d times, want 2", n)
	}
	// A failed command inside EXEC is that command's failed call, not EXEC's.
	execFailed := srv.cmdStats[commandTable["exec"].index].errors.Load()
	decodeFailed := srv.cmdStats[commandTable["decode"].index].errors.Load()
	// EXECABORT is EXEC's failed call, as Redis 7.0 counts it: two
	// EXECABORTs and one EXEC without MULTI.
	if decodeFailed != 1 || execFailed != 3 {
		t.Fatalf("failed calls: decode %d, exec %d", decodeFailed, execFailed)
	}
}

func TestCommandInfoKeysAndClientList(t *testing.T) {
	addr := startServer(t, Config{})
	conn, rd := dial(t, addr)
	send(t, conn, "COMMAND INFO incr\r\n")
	got := replies(t, rd, 15)
	if strings.Join(got[8:11], " ") != ":1 :1 :1" {
		t.Fatalf("COMMAND INFO incr: %q", got)
	}
	send(t, conn, "CLIENT SETINFO lib-name a\\x20b\r\nCLIENT SETINFO lib-name \"a b\"\r\nCLIENT LIST TYPE pubsub\r\nCLIENT LIST TYPE x\r\nCLIENT LIST ID x\r\nCLIENT LIST FOO\r\nCLIENT LIST ID 999\r\n")
	want := "+OK -ERR lib-name cannot contain spaces, newlines or special characters. $0  -ERR Unknown client type 'x' -ERR Invalid client ID -ERR syntax error $0 "
	if got := strings.Join(replies(t, rd, 9), " "); got != want {
		t.Fatalf("CLIENT:\n got %q\nwant %q", got, want)
	}
	send(t, conn, "CLIENT ID\r\n")
	id := strings.TrimPrefix(readLine(t, rd), ":")
	send(t, conn, "MULTI\r\nCLIENT LIST TYPE normal\r\nCLIENT LIST ID "+id+"\r\nEXEC\r\n")
	got = replies(t, rd, 4)
	if got[0] != "+OK" || got[3] != "*2" {
		t.Fatalf("MULTI: %q", got)
	}
	for range 2 {
		readLine(t, rd)
		line := readLine(t, rd)
		if !strings.Contains(line, "id="+id+" ") || !strings.Contains(line, " flags=x ") || !strings.Contains(line, " multi=2 ") ||
			!strings.Contains(line, " cmd=client|list ") || !strings.Contains(line, " lib-name=a\\x20b") {
			t.Fatalf("CLIENT LIST inside EXEC: %q", line)
		}
		readLine(t, rd)
	}
}

// TestClientListWhileOthersChange: CLIENT LIST reads other connections
// while they rename themselves and run commands (meant for -race).
func TestClientListWhileOthersChange(t *testing.T) {
	addr := startServer(t, Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, Protocol: 2})
		defer rdb.Close()
		ctx := context.Background()
		for i := range 300 {
			rdb.Do(ctx, "CLIENT", "SETNAME", "n"+strings.Repeat("x", i%7))
			rdb.Do(ctx, "CLIENT", "SETINFO", "lib-ver", "1."+strings.Repeat("0", i%5))
			rdb.Do(ctx, "HELLO", 2+i%2)
			rdb.Do(ctx, "CONFIG", "GET", "port")
		}
	}()
	conn, rd := dial(t, addr)
	for {
		select {
		case <-done:
			return
		default:
		}
		send(t, conn, "CLIENT LIST\r\n")
		readLine(t, rd)
		if line := readLine(t, rd); !strings.HasPrefix(line, "id=") {
			t.Fatalf("CLIENT LIST: %q", line)
		}
		for {
			if line := readLine(t, rd); line == "" {
				break
			}
		}
	}
}
