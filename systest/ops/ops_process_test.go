package ops

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// startUnready starts idserver with args on a port of its own without
// waiting for it (a node that cannot join logs no "listening" line), and
// returns its address and standard error. It is killed when the test ends.
func startUnready(t *testing.T, args ...string) (string, *testproc.Buffer) {
	t.Helper()
	port := strconv.Itoa(testproc.FreePort(t))
	cmd := exec.Command(systest.Binary(t), append([]string{"--port", port, "--dir", t.TempDir()}, args...)...)
	cmd.Stdout = io.Discard
	return "127.0.0.1:" + port, testproc.StartLogged(t, cmd, fmt.Sprintf("log of %v", args))
}

// TestPingAnswersLoadingUntilReady: a readiness probe's PING says ready
// only when the node issues, as Redis 7 answers -LOADING to PING while it
// loads. A joiner whose --join cannot be reached answers INFO (loading:1)
// and -LOADING to PING; a fresh node whose PING answered PONG issues at
// once.
func TestPingAnswersLoadingUntilReady(t *testing.T) {
	nowhere := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	addr, _ := startUnready(t, "--join", nowhere)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	var info string
	wait.For(t, 10*time.Second, "INFO on a joiner that cannot join", func() (bool, string) {
		var err error
		info, err = rdb.Info(ctx, "persistence").Result()
		return err == nil, fmt.Sprint(err)
	})
	if !strings.Contains(info, "loading:1") {
		t.Fatalf("INFO persistence on a joiner that cannot join: %q", info)
	}
	if err := rdb.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
		t.Fatalf("PING on a joiner that cannot join: %v, want -LOADING", err)
	}

	// testproc waits for PING to succeed: then NEXTID and INCR answer.
	p := systest.StartProc(t, t.TempDir())
	c := p.Client()
	if err := c.Do(ctx, "NEXTID").Err(); err != nil {
		t.Fatalf("NEXTID right after PONG: %v", err)
	}
	if err := c.Do(ctx, "INCR", "t").Err(); err != nil {
		t.Fatalf("INCR right after PONG: %v", err)
	}
}

// firstID starts idserver with args on dir and a port of its own, and
// returns how long after the process started its first NEXTID answered
// (polled every millisecond), and
// the process, stopped by SIGTERM when the test ends.
func firstID(t *testing.T, dir string, args ...string) (time.Duration, *exec.Cmd, string) {
	t.Helper()
	port := strconv.Itoa(testproc.FreePort(t))
	if i := slices.Index(args, "--port"); i >= 0 {
		port = args[i+1]
	}
	addr := "127.0.0.1:" + port
	cmd := exec.Command(systest.Binary(t), append([]string{"--port", port, "--dir", dir}, args...)...)
	stderr := &testproc.Buffer{}
	cmd.Stderr = stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("log of %s:\n%s", dir, stderr)
		}
	})
	// A raw connection, not a client library's pool: a pool backs off
	// after failed dials, which would be measured instead of the server.
	for deadline := began.Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.SetDeadline(time.Now().Add(time.Second))
			io.WriteString(conn, "NEXTID\r\n")
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(line, ":") {
				return time.Since(began), cmd, addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NEXTID from %s within 20 s\n%s", addr, stderr)
		}
	}
}

// TestOneNodeRestartServesAtOnce: a one-node cluster, fresh and restarted,
// leads itself at once: it never waits out an election. Its Raft timings
// are stretched ten times (a heartbeat timeout of 5 s, the least
// hashicorp/raft waits before an election), so a start that waited for one
// stands apart from a slow machine's start by seconds.
func TestOneNodeRestartServesAtOnce(t *testing.T) {
	dir := t.TempDir()
	slow := []string{"--raft-timeout-scale", "10", "--worker-lease", "4m"}
	fresh, cmd, _ := firstID(t, dir, slow...)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	var restarts []time.Duration
	for range 3 {
		d, cmd, _ := firstID(t, dir, slow...)
		restarts = append(restarts, d)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	t.Logf("process start to first NEXTID: fresh %v, restarts %v", fresh.Round(time.Millisecond), restarts)
	election := 5 * time.Second
	if slices.Max(restarts) >= election || fresh >= election {
		t.Fatalf("first NEXTID %v after a fresh start, %v after restarts: a one-node cluster waited for an election (%v)", fresh, restarts, election)
	}
}

// TestMemberRestartFirstID: a member of three restarted inside its worker
// lease issues soon after its process starts, through the same first lease
// renewal (carrying its incarnation, node/restart.go) as before: nothing is
// issued from the disk alone, so a rolled-back directory is still caught.
func TestMemberRestartFirstID(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	m := ms[2]
	m.P.Cmd.Process.Signal(syscall.SIGTERM)
	m.P.Err()
	args := []string{"--port", m.Port, "--raft-addr", "127.0.0.1:" + m.Raft, "--join", m.Join}
	d, _, addr := firstID(t, m.Dir, args...)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	start := time.Now()
	if err := rdb.Do(context.Background(), "INCR", "restart").Err(); err != nil {
		t.Fatal(err)
	}
	incr := time.Since(start)
	t.Logf("member restarted inside its lease: first NEXTID %v after the process started, first INCR %v after that",
		d.Round(time.Millisecond), incr.Round(time.Millisecond))
	// Before, a start's check-in retried every 250 ms and the first try
	// comes before Raft is up: 0.75 to 1.1 s. The bound leaves room for a
	// loaded machine.
	if d > 600*time.Millisecond || incr > 600*time.Millisecond {
		t.Fatalf("member restart: first NEXTID after %v, first INCR %v after that", d, incr)
	}
}

// jsonLines parses a --log-format json log line by line: every line is a
// JSON object with time, level and msg.
func jsonLines(t *testing.T, name, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("%s, line %d is not JSON: %v\n%s", name, i+1, err, line)
			continue
		}
		if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("%s, line %d lacks time, level or msg: %s", name, i+1, line)
		}
		out = append(out, rec)
	}
	return out
}

// TestJSONLogsParseThroughAFailedJoinAndAHealthyStart: under --log-format
// json every line of the log is JSON, go-redis's own lines included (a
// joiner that cannot reach --join, at debug level) and a refused join's
// last words; a healthy start (a fresh node, a joiner) logs no WARN or
// ERROR, and "member promoted to voter" is logged at most once per joiner.
func TestJSONLogsParseThroughAFailedJoinAndAHealthyStart(t *testing.T) {
	json := []string{"--log-format", "json"}
	nowhere := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	_, unreachable := startUnready(t, append(json, "--join", nowhere, "--log-level", "debug")...)

	first := systest.StartProc(t, t.TempDir(), json...)
	joiner := systest.StartProc(t, t.TempDir(), append(json, "--join", first.Addr)...)
	// A join refused (another layout) ends the process.
	refused, err := systest.Launch(t, t.TempDir(), nil, append(json, "--join", first.Addr, "--epoch", "2024-01-01T00:00:00Z")...)
	refusedLog := systest.WaitExit(t, refused, err)

	promoted := func() int { return strings.Count(first.Log(), `"msg":"member promoted to voter"`) }
	// The joiner's promotion, and any second one, would come from
	// autopilot rounds: over three seconds of them, at most one is logged.
	wait.Holds(t, 3*time.Second, "at most one promotion logged", func() (bool, string) { return promoted() <= 1, first.Log() })

	if recs := jsonLines(t, "unreachable --join", unreachable.String()); !slices.ContainsFunc(recs, func(r map[string]any) bool {
		return r["from"] == "go-redis"
	}) {
		t.Errorf("no go-redis line in the debug log of a joiner that cannot reach --join:\n%s", unreachable)
	}
	jsonLines(t, "refused join", refusedLog)
	if !strings.Contains(refusedLog, `"level":"ERROR"`) {
		t.Errorf("the refused join's log has no ERROR:\n%s", refusedLog)
	}
	for name, log := range map[string]string{"first node": first.Log(), "joiner": joiner.Log()} {
		for _, rec := range jsonLines(t, name, log) {
			if rec["level"] == "WARN" || rec["level"] == "ERROR" {
				// The refused join is the first node's to report.
				if name == "first node" && strings.Contains(fmt.Sprint(rec["msg"], rec["err"]), "refused") {
					continue
				}
				t.Errorf("%s: %v on a healthy start: %v", name, rec["level"], rec)
			}
		}
	}
}

// TestRedisExporterScrape: Debian's prometheus-redis-exporter scraping a
// real idserver exports the CPU, client, memory and net metrics it exports
// for Redis, from INFO. (It exports no instantaneous_* field, for Redis
// either: rate() of the counters does that job.)
func TestRedisExporterScrape(t *testing.T) {
	exporter := testproc.Need(t, "prometheus-redis-exporter")
	p := systest.StartProc(t, t.TempDir())
	rdb := p.Client()
	ctx := context.Background()
	// Load until the process has spent measurable CPU in both modes (a
	// fresh process may show 0 ms of user time even after 200 NEXTIDs).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		for range 200 {
			rdb.Do(ctx, "NEXTID")
		}
		cpu, _ := rdb.Info(ctx, "cpu").Result()
		if !strings.Contains(cpu, "used_cpu_user:0.000000") && !strings.Contains(cpu, "used_cpu_sys:0.000000") {
			break
		}
	}
	rdb.Do(ctx, "GET", "nosuch")
	web := systest.StartExporter(t, exporter, p.Addr)
	var body string
	wait.For(t, 10*time.Second, "the exporter answers", func() (bool, string) {
		res, err := http.Get("http://" + web + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		body = string(b)
		return true, ""
	})
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && strings.HasPrefix(line, "redis_") {
			names[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		}
	}
	if systest.MetricValue(t, body, "redis_up") != 1 {
		t.Fatalf("redis_up is not 1:\n%s", body)
	}
	for _, name := range []string{
		"redis_cpu_sys_seconds_total", "redis_cpu_user_seconds_total",
		"redis_cpu_sys_children_seconds_total", "redis_cpu_user_children_seconds_total",
		"redis_connected_clients", "redis_blocked_clients",
		"redis_memory_used_bytes", "redis_memory_used_rss_bytes", "redis_memory_used_peak_bytes",
		"redis_net_input_bytes_total", "redis_net_output_bytes_total",
		"redis_keyspace_hits_total", "redis_keyspace_misses_total", "redis_commands_processed_total",
	} {
		if !names[name] {
			t.Errorf("the exporter has no %s", name)
		}
	}
	for _, name := range []string{"redis_cpu_sys_seconds_total", "redis_cpu_user_seconds_total", "redis_net_input_bytes_total",
		"redis_memory_used_rss_bytes", "redis_keyspace_misses_total"} {
		if systest.MetricValue(t, body, name) <= 0 {
			t.Errorf("%s not measured: %v", name, systest.MetricValue(t, body, name))
		}
	}
	t.Logf("redis_exporter exports %d metric names from idserver: %v", len(names), slices.Sorted(maps.Keys(names)))
}
