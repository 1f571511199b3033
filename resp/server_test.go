package resp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/internal/memstore"
	"idserver/internal/wait"
)

// startServer serves a real engine on 127.0.0.1:0 and returns its address.
func startServer(t *testing.T, cfg Config) string {
	t.Helper()
	_, addr := startServerT(t, cfg)
	return addr
}

// startServerT is startServer that also returns the server.
func startServerT(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveT(t, cfg, ln), ln.Addr().String()
}

// serveT serves cfg on ln until the test ends: for a configuration that
// names the server's own address, known once ln listens.
func serveT(t *testing.T, cfg Config, ln net.Listener) *Server {
	t.Helper()
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 3, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Version = "test"
	srv := New(cfg, gen)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

// TestInfoSnowflakeNamesReservedWorkersApart: INFO snowflake's layout line
// stays a comma-separated list of key=value fields; the reserved worker
// IDs, a list with commas of its own, have their own line.
func TestInfoSnowflakeNamesReservedWorkersApart(t *testing.T) {
	l := engine.DefaultLayout()
	l.Reserved = "0-2,5"
	gen, err := engine.New(engine.Config{Layout: l, Worker: 3, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(New(Config{}, gen).infoSnowflake(), "\r\n")
	var layout, reserved string
	for _, line := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(line, "layout:"); ok {
			layout = v
		}
		if v, ok := strings.CutPrefix(line, "reserved_workers:"); ok {
			reserved = v
		}
	}
	for _, field := range strings.Split(layout, ",") {
		if !strings.Contains(field, "=") {
			t.Fatalf("layout:%s has a field %q that is not key=value", layout, field)
		}
	}
	if reserved != "0-2,5" {
		t.Fatalf("reserved_workers:%q, want 0-2,5\n%s", reserved, text)
	}
}

func newClient(t *testing.T, addr string, proto int, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, Password: password})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestIDCommandsOverGoRedis(t *testing.T) {
	addr := startServer(t, Config{})
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := newClient(t, addr, proto, "")
		id, err := rdb.Do(ctx, "NEXTID").Int64()
		if err != nil || id <= 0 {
			t.Fatalf("RESP%d NEXTID: %d, %v", proto, id, err)
		}
		ids, err := rdb.Do(ctx, "NEXTID", 100).Int64Slice()
		if err != nil || len(ids) != 100 {
			t.Fatalf("NEXTID 100: %d ids, %v", len(ids), err)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] || ids[0] <= id {
				t.Fatalf("not increasing: %v", ids)
			}
		}
		gene, err := rdb.Do(ctx, "GENEOF", "123457").Int64()
		if err != nil || gene != 123457%256 {
			t.Fatalf("GENEOF: %d, %v", gene, err)
		}
		gids, err := rdb.Do(ctx, "GENEID", "123457", 20).Int64Slice()
		if err != nil || len(gids) != 20 {
			t.Fatalf("GENEID: %v, %v", gids, err)
		}
		for _, g := range gids {
			if g%16 != 123457%16 {
				t.Fatalf("GENEID %d does not route with buyer 123457", g)
			}
		}
		one, err := rdb.Do(ctx, "GENEID", "alice@example.com").Int64()
		if err != nil || one%256 != int64(engine.DefaultLayout().Gene([]byte("alice@example.com"))) {
			t.Fatalf("GENEID string buyer: %d, %v", one, err)
		}
		var decoded map[string]any
		raw, err := rdb.Do(ctx, "DECODE", gids[3]).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch v := raw.(type) {
		case map[any]any: // RESP3: a real map
			if proto != 3 {
				t.Fatalf("RESP2 DECODE gave a map")
			}
			decoded = map[string]any{}
			for k, val := range v {
				decoded[k.(string)] = val
			}
		case []any: // RESP2: a flat array
			if proto != 2 {
				t.Fatalf("RESP3 DECODE gave a flat array")
			}
			decoded = map[string]any{}
			for i := 0; i+1 < len(v); i += 2 {
				decoded[v[i].(string)] = v[i+1]
			}
		default:
			t.Fatalf("DECODE reply %T", raw)
		}
		want, _ := engine.DefaultLayout().Decode(gids[3])
		if decoded["worker"] != int64(3) || decoded["gene"] != int64(123457%256) || decoded["sequence"] != want.Sequence ||
			decoded["time_ms"] != want.UnixMS {
			t.Fatalf("DECODE: %v", decoded)
		}
		if ts, _ := decoded["time"].(string); !strings.HasSuffix(ts, "Z") || len(ts) != len("2006-01-02T15:04:05.000Z") {
			t.Fatalf("DECODE time %q", decoded["time"])
		}
		if ms := decoded["time_ms"].(int64); time.Since(time.UnixMilli(ms)) > time.Minute {
			t.Fatalf("DECODE time_ms %d is not now", ms)
		}
	}
}

func TestErrorsUseRedisWords(t *testing.T) {
	addr := startServer(t, Config{})
	rdb := newClient(t, addr, 2, "")
	ctx := context.Background()
	cases := []struct {
		args []any
		want string
	}{
		{[]any{"FOO", "a", "b"}, "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "},
		{[]any{"NEXTID", 1, 2}, "ERR wrong number of arguments for 'nextid' command"},
		{[]any{"GENEID"}, "ERR wrong number of arguments for 'geneid' command"},
		{[]any{"NEXTID", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"NEXTID", "0"}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"NEXTID", "10001"}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"NEXTID", "99999999999999999999999"}, "ERR value is not an integer or out of range"},
		{[]any{"GENEID", strings.Repeat("b", 257)}, "ERR buyer must be 1 to 256 bytes"},
		{[]any{"GENEID", ""}, "ERR buyer must be 1 to 256 bytes"},
		{[]any{"DECODE", "abc"}, "ERR invalid id"},
		{[]any{"DECODE", "-5"}, "ERR invalid id"},
		{[]any{"DECODE", "0"}, "ERR invalid id"},
		{[]any{"DECODE", "18446744073709551615"}, "ERR invalid id"},
		{[]any{"SELECT", "1"}, "ERR DB index is out of range"},
		{[]any{"HELLO", "4"}, "NOPROTO unsupported protocol version"},
		{[]any{"AUTH", "x"}, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{[]any{"CLIENT", "BOGUS"}, "ERR unknown subcommand 'BOGUS'. Try CLIENT HELP."},
		{[]any{"CLIENT", "SETNAME", "a b"}, "ERR Client names cannot contain spaces, newlines or special characters."},
	}
	for _, tc := range cases {
		err := rdb.Do(ctx, tc.args...).Err()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
	// And the connection is still fine.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestToolingCommands(t *testing.T) {
	addr := startServer(t, Config{})
	rdb := newClient(t, addr, 2, "")
	ctx := context.Background()
	if v, err := rdb.Do(ctx, "PING", "hi").Text(); err != nil || v != "hi" {
		t.Fatalf("PING hi: %q %v", v, err)
	}
	if v, err := rdb.Echo(ctx, "x y").Result(); err != nil || v != "x y" {
		t.Fatalf("ECHO: %q %v", v, err)
	}
	if err := rdb.Do(ctx, "SELECT", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := rdb.ConfigGet(ctx, "*").Result()
	if err != nil || cfg["save"] != "" || cfg["appendonly"] != "no" {
		t.Fatalf("CONFIG GET *: %v %v", cfg, err)
	}
	if _, ok := cfg["save"]; !ok {
		t.Fatal("CONFIG GET has no save")
	}
	if tm, err := rdb.Time(ctx).Result(); err != nil || time.Since(tm).Abs() > time.Minute {
		t.Fatalf("TIME: %v %v", tm, err)
	}
	if err := rdb.Do(ctx, "CLIENT", "SETNAME", "orders").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Do(ctx, "CLIENT", "GETNAME").Text(); err != nil || n != "orders" {
		t.Fatalf("CLIENT GETNAME: %q %v", n, err)
	}
	if id, err := rdb.Do(ctx, "CLIENT", "ID").Int64(); err != nil || id <= 0 {
		t.Fatalf("CLIENT ID: %d %v", id, err)
	}
	if info, err := rdb.Do(ctx, "CLIENT", "INFO").Text(); err != nil || !strings.Contains(info, "name=orders") {
		t.Fatalf("CLIENT INFO: %q %v", info, err)
	}
	if n, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64(); err != nil || n != int64(len(commandTable)) {
		t.Fatalf("COMMAND COUNT: %d %v", n, err)
	}
	if info, err := rdb.Do(ctx, "COMMAND", "INFO", "nextid", "nosuch").Slice(); err != nil || len(info) != 2 || info[1] != nil {
		t.Fatalf("COMMAND INFO: %v %v", info, err)
	}
	if _, err := rdb.Do(ctx, "COMMAND", "DOCS").Result(); err != nil {
		t.Fatal(err)
	}
	info, err := rdb.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	sections := 0
	for _, line := range strings.Split(strings.TrimRight(info, "\r\n"), "\r\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "# "):
			sections++
		case !strings.Contains(line, ":"):
			t.Fatalf("INFO line %q is not key:value", line)
		}
	}
	if sections < 5 || !strings.Contains(info, "worker_id:3") {
		t.Fatalf("INFO:\n%s", info)
	}
	if only, _ := rdb.Info(ctx, "snowflake").Result(); strings.Contains(only, "# Server") || !strings.Contains(only, "# Snowflake") {
		t.Fatalf("INFO snowflake:\n%s", only)
	}
}

func TestHelloSwitchesToRESP3Maps(t *testing.T) {
	addr := startServer(t, Config{})
	conn, rd := dial(t, addr)
	send(t, conn, "HELLO 3\r\n")
	if line := readLine(t, rd); !strings.HasPrefix(line, "%8") {
		t.Fatalf("HELLO 3 reply starts %q, want a map", line)
	}
	drainMap(t, rd, 8)
	send(t, conn, "CLIENT GETNAME\r\n")
	if line := readLine(t, rd); line != "_" {
		t.Fatalf("RESP3 nil is %q", line)
	}
	send(t, conn, "HELLO 2\r\n")
	if line := readLine(t, rd); line != "*16" {
		t.Fatalf("HELLO 2 reply starts %q, want a flat array", line)
	}
}

func TestAuth(t *testing.T) {
	addr := startServer(t, Config{Password: "s3cret"})
	ctx := context.Background()
	anon := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer anon.Close()
	if err := anon.Do(ctx, "NEXTID").Err(); err == nil || err.Error() != "NOAUTH Authentication required." {
		t.Fatalf("NEXTID before AUTH: %v", err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: addr, Password: "nope"})
	defer wrong.Close()
	if err := wrong.Do(ctx, "NEXTID").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
	for _, proto := range []int{2, 3} {
		rdb := newClient(t, addr, proto, "s3cret")
		if err := rdb.Do(ctx, "NEXTID").Err(); err != nil {
			t.Fatalf("RESP%d with password: %v", proto, err)
		}
	}
	// Before AUTH, Redis's smaller frame limits apply.
	conn, rd := dial(t, addr)
	send(t, conn, "*11\r\n")
	if line := readLine(t, rd); line != "-ERR Protocol error: unauthenticated multibulk length" {
		t.Fatalf("pre-auth count: %q", line)
	}
	expectClosed(t, rd)
}

func TestAdversarialFramesCloseOnlyTheirConnection(t *testing.T) {
	addr := startServer(t, Config{})
	ctx := context.Background()
	bystander := newClient(t, addr, 3, "")
	var last int64
	frames := []string{
		"*99999999999999\r\n",
		"*1\r\n$9223372036854775807\r\n",
		"*1\r\n$18446744073709551617\r\n",
		"*-9223372036854775808\r\n",
		"*3\r\n$6\r\nNEXTID\r\n$-5\r\n",
		"*1\r\n$100000\r\n",
		strings.Repeat("x", 70000),
		"*1\r\n$4\r\nPINGxx",
		"*2\r\n:1\r\n",
	}
	for _, frame := range frames {
		conn, rd := dial(t, addr)
		// A valid command first in the same packet is answered before the refusal.
		send(t, conn, "PING\r\n"+frame)
		if line := readLine(t, rd); line != "+PONG" {
			t.Fatalf("%q: first reply %q", frame[:min(len(frame), 30)], line)
		}
		if line := readLine(t, rd); !strings.HasPrefix(line, "-ERR Protocol error: ") {
			t.Fatalf("%q: got %q, want a protocol error", frame[:min(len(frame), 30)], line)
		}
		expectClosed(t, rd)
		id, err := bystander.Do(ctx, "NEXTID").Int64()
		if err != nil || id <= last {
			t.Fatalf("bystander after %q: %d, %v", frame[:min(len(frame), 30)], id, err)
		}
		last = id
	}
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, bufio.NewReader(conn)
}

func send(t *testing.T, conn net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(conn, s); err != nil {
		t.Fatal(err)
	}
}

func readLine(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, line)
	}
	return strings.TrimSuffix(line, "\r\n")
}

func drainMap(t *testing.T, rd *bufio.Reader, pairs int) {
	t.Helper()
	for range pairs * 2 {
		line := readLine(t, rd)
		switch line[0] {
		case '$':
			readLine(t, rd)
		case '*':
			if line != "*0" {
				t.Fatalf("unexpected nested array %q", line)
			}
		}
	}
}

func expectClosed(t *testing.T, rd *bufio.Reader) {
	t.Helper()
	if b, err := rd.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("connection still open after a protocol error: %q, %v", b, err)
	}
}

func TestMaxClients(t *testing.T) {
	addr := startServer(t, Config{MaxClients: 2})
	a, ra := dial(t, addr)
	b, rb := dial(t, addr)
	send(t, a, "PING\r\n")
	send(t, b, "PING\r\n")
	readLine(t, ra)
	readLine(t, rb)
	_, rc := dial(t, addr)
	if line := readLine(t, rc); line != "-ERR max number of clients reached" {
		t.Fatalf("third client: %q", line)
	}
	expectClosed(t, rc)
	a.Close()
	// A freed slot is usable again.
	wait.For(t, 5*time.Second, "PONG after a client left", func() (bool, string) {
		d, rd := dial(t, addr)
		send(t, d, "PING\r\n")
		line := readLine(t, rd)
		return line == "+PONG", line
	})
}

func calls(s *Server, name string) int64 {
	return s.cmdStats[commandTable[name].index].calls.Load()
}

// TestNothingRunsAfterQuit: commands pipelined after QUIT, in the same
// packet or the next, never reach a handler.
func TestNothingRunsAfterQuit(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	for i := range 20 {
		conn, rd := dial(t, addr)
		tail := "*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nNEXTID\r\n"
		if i%2 == 0 {
			send(t, conn, "PING\r\nQUIT\r\n"+tail)
		} else {
			send(t, conn, "PING\r\nQUIT\r\n")
			send(t, conn, tail)
		}
		if a, b := readLine(t, rd), readLine(t, rd); a != "+PONG" || b != "+OK" {
			t.Fatalf("connection %d: %q %q", i, a, b)
		}
		// EOF, or a reset when the tail reached a closed socket.
		if b, err := rd.ReadByte(); err == nil {
			t.Fatalf("connection %d: open after QUIT: %q", i, b)
		}
	}
	if n, m := calls(srv, "echo"), calls(srv, "nextid"); n != 0 || m != 0 {
		t.Fatalf("after QUIT: %d ECHO and %d NEXTID ran", n, m)
	}
}

// TestEmptyMultibulkAndInline: *0 and *-1 are ignored as Redis does, and
// inline commands split as Redis splits them.
func TestEmptyMultibulkAndInline(t *testing.T) {
	addr := startServer(t, Config{})
	conn, rd := dial(t, addr)
	send(t, conn, "*0\r\n*-1\r\nPING\r\n\t ECHO\t\"\\x41\\tb\" 'c d'\r\n")
	if line := readLine(t, rd); line != "+PONG" {
		t.Fatalf("after *0 and *-1: %q", line)
	}
	send(t, conn, "*1\r\n$4\r\nPING\r\n")
	if line := readLine(t, rd); line != "-ERR wrong number of arguments for 'echo' command" {
		t.Fatalf("inline ECHO with two arguments: %q", line)
	}
	send(t, conn, "ECHO \"\\x41\\tb\"\r\n")
	readLine(t, rd) // +PONG
	if a, b := readLine(t, rd), readLine(t, rd); a != "$3" || b != "A\tb" {
		t.Fatalf("inline escapes: %q %q", a, b)
	}
}
