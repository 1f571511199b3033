package resp

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
)

// The checks of the Redis Tcl suite's unit/info, unit/info-command and the
// INFO-reading tests of unit/introspection(-2), as Go tests: the Tcl
// sources cannot be fetched at test time, and vendoring them would bring
// their whole framework (tests/test_helper.tcl, tests/support/*, and the
// start_server machinery that runs redis-server itself), for 17 tests
// of which a third use commands idserver refuses (EVAL, XGROUP, ACL,
// CONFIG SET). Each test below names the Tcl test it follows; SET k v
// becomes NEXTID or INCR, the commands idserver has.

// infoProbe reads INFO fields as the Tcl helpers do: s (a field of
// INFO), cmdstat (cmdrstat) and errorstat (errorrstat).
type infoProbe struct {
	t   *testing.T
	rdb *redis.Client
}

func (p infoProbe) info(section string) string {
	p.t.Helper()
	text, err := p.rdb.Do(context.Background(), "INFO", section).Text()
	if err != nil {
		p.t.Fatalf("INFO %s: %v", section, err)
	}
	return text
}

func field(text, name string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `:(.*)\r$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

func (p infoProbe) s(name string) string { p.t.Helper(); return field(p.info("all"), name) }
func (p infoProbe) cmdstat(cmd string) string {
	p.t.Helper()
	return field(p.info("commandstats"), "cmdstat_"+cmd)
}
func (p infoProbe) errorstat(code string) string {
	p.t.Helper()
	return field(p.info("errorstats"), "errorstat_"+code)
}

// match is Tcl's string match (a glob).
func (p infoProbe) match(what, pattern, got string) {
	p.t.Helper()
	if ok, _ := path.Match(pattern, got); !ok {
		p.t.Errorf("%s: %q does not match %q", what, got, pattern)
	}
}

func (p infoProbe) do(args ...any) error {
	return p.rdb.Do(context.Background(), args...).Err()
}

func (p infoProbe) resetstat() {
	p.t.Helper()
	if err := p.do("CONFIG", "RESETSTAT"); err != nil {
		p.t.Fatal(err)
	}
}

func newInfoProbe(t *testing.T) infoProbe {
	addr := startServer(t, Config{Cluster: newFakeCluster()})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	p := infoProbe{t, rdb}
	// Errors before the tests, which CONFIG RESETSTAT must clear.
	for range 3 {
		p.do("NOSUCHCOMMAND")
		p.do("AUTH", "k")
		p.do("GET")
		p.do("NEXTID")
	}
	return p
}

// TestRedisInfoErrorstats follows unit/info.tcl's errorstats tests that use
// no command idserver refuses: failed call authentication error, failed
// call within MULTI/EXEC, rejected call unknown command, rejected call
// within MULTI/EXEC, rejected call due to wrong arity.
func TestRedisInfoErrorstats(t *testing.T) {
	p := newInfoProbe(t)

	t.Run("failed call authentication error", func(t *testing.T) {
		p.t = t
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
		p.match("total_error_replies", "0", p.s("total_error_replies"))
		err := p.do("AUTH", "k")
		p.match("auth", "ERR AUTH*", fmt.Sprint(err))
		p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
		p.match("cmdstat auth", "*calls=1,*,rejected_calls=0,failed_calls=1", p.cmdstat("auth"))
		p.match("total_error_replies", "1", p.s("total_error_replies"))
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
	})

	t.Run("failed call within MULTI/EXEC", func(t *testing.T) {
		p.t = t
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
		p.match("total_error_replies", "0", p.s("total_error_replies"))
		p.do("MULTI")
		p.do("NEXTID")
		p.do("AUTH", "a")
		replies, err := p.rdb.Do(context.Background(), "EXEC").Slice()
		if err != nil || len(replies) != 2 {
			t.Fatalf("EXEC: %v %v", replies, err)
		}
		p.match("exec's AUTH", "ERR AUTH*", fmt.Sprint(replies[1]))
		p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
		p.match("cmdstat nextid", "*calls=1,*,rejected_calls=0,failed_calls=0", p.cmdstat("nextid"))
		p.match("cmdstat auth", "*calls=1,*,rejected_calls=0,failed_calls=1", p.cmdstat("auth"))
		p.match("cmdstat exec", "*calls=1,*,rejected_calls=0,failed_calls=0", p.cmdstat("exec"))
		p.match("total_error_replies", "1", p.s("total_error_replies"))
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
		// MULTI/EXEC command errors should still be pinpointed to him
		err = p.do("EXEC")
		p.match("exec", "ERR EXEC without MULTI", fmt.Sprint(err))
		p.match("cmdstat exec", "*calls=1,*,rejected_calls=0,failed_calls=1", p.cmdstat("exec"))
		p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
	})

	t.Run("rejected call unknown command", func(t *testing.T) {
		p.t = t
		p.resetstat()
		p.match("total_error_replies", "0", p.s("total_error_replies"))
		p.match("errorstat ERR", "", p.errorstat("ERR"))
		err := p.do("asdf")
		p.match("asdf", "ERR unknown*", fmt.Sprint(err))
		p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
		p.match("total_error_replies", "1", p.s("total_error_replies"))
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
	})

	t.Run("rejected call within MULTI/EXEC", func(t *testing.T) {
		p.t = t
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
		p.match("total_error_replies", "0", p.s("total_error_replies"))
		p.do("MULTI")
		err := p.do("GET")
		p.match("get", "ERR wrong number of arguments for 'get' command", fmt.Sprint(err))
		err = p.do("EXEC")
		p.match("exec", "EXECABORT*", fmt.Sprint(err))
		p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
		p.match("errorstat EXECABORT", "*count=1*", p.errorstat("EXECABORT"))
		p.match("total_error_replies", "2", p.s("total_error_replies"))
		p.match("cmdstat get", "*calls=0,*,rejected_calls=1,failed_calls=0", p.cmdstat("get"))
		p.match("cmdstat multi", "*calls=1,*,rejected_calls=0,failed_calls=0", p.cmdstat("multi"))
		p.match("cmdstat exec", "*calls=1,*,rejected_calls=0,failed_calls=1", p.cmdstat("exec")) // Redis 7.0 counts EXECABORT
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
	})

	t.Run("rejected call due to wrong arity", func(t *testing.T) {
		p.t = t
		p.resetstat()
		p.match("errorstat ERR", "", p.errorstat("ERR"))
		err := p.do("INCR")
		p.match("incr", "ERR wrong number of arguments*", fmt.Sprint(err))
		p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
		p.match("cmdstat incr", "*calls=0,*,rejected_calls=1,failed_calls=0", p.cmdstat("incr"))
		// ensure that after a rejected command, valid ones are counted properly
		p.do("EXISTS", "k1")
		p.do("EXISTS", "k2")
		p.do("EXISTS")
		p.match("cmdstat exists", "calls=2,*,rejected_calls=1,failed_calls=0", p.cmdstat("exists"))
	})
}

// TestRedisIntrospectionStats follows unit/introspection-2.tcl's "command
// stats for MULTI" and "errors stats for GEOADD", and checks that CONFIG
// RESETSTAT clears total_commands_processed and the connection counters.
func TestRedisIntrospectionStats(t *testing.T) {
	p := newInfoProbe(t)
	p.resetstat()
	p.do("MULTI")
	p.do("NEXTID")
	p.do("GENEID", "b")
	p.do("UUIDV7")
	p.do("EXEC")
	for _, cmd := range []string{"multi", "exec", "nextid", "geneid", "uuidv7"} {
		p.match("cmdstat "+cmd, "*calls=1,*", p.cmdstat(cmd))
	}

	p.resetstat()
	err := p.do("NEXTID", "0") // a failed call, as GEOADD with a bad argument
	p.match("nextid 0", "ERR count*", fmt.Sprint(err))
	p.match("errorstat ERR", "*count=1*", p.errorstat("ERR"))
	p.match("cmdstat nextid", "*calls=1,*,rejected_calls=0,failed_calls=1", p.cmdstat("nextid"))

	p.resetstat()
	// The INFO that reads it is the first command after the reset.
	p.match("total_commands_processed", "1", p.s("total_commands_processed"))
	p.match("total_connections_received", "0", p.s("total_connections_received"))
	if got := p.cmdstat("nextid"); got != "" {
		t.Errorf("cmdstat nextid after CONFIG RESETSTAT: %q", got)
	}
}

// TestRedisInfoCommand follows unit/info-command.tcl: INFO with at most
// one section, one section, and several.
func TestRedisInfoCommand(t *testing.T) {
	p := newInfoProbe(t)
	has := func(info, what string) bool { return strings.Contains(info, what) }
	for _, arg := range []string{"", "all", "default", "everything"} {
		var info string
		if arg == "" {
			info, _ = p.rdb.Do(context.Background(), "INFO").Text()
		} else {
			info = p.info(arg)
		}
		if !has(info, "redis_version") || !has(info, "used_cpu_user") || has(info, "sentinel_tilt") || !has(info, "used_memory") {
			t.Errorf("INFO %s:\n%s", arg, info)
		}
		if (arg == "" || arg == "default") == has(info, "rejected_calls") {
			t.Errorf("INFO %s: rejected_calls %v", arg, has(info, "rejected_calls"))
		}
	}
	info := p.info("cpu")
	if !has(info, "used_cpu_user") || has(info, "sentinel_tilt") || has(info, "used_memory") {
		t.Errorf("INFO cpu:\n%s", info)
	}
	info = p.info("sentinel")
	if has(info, "sentinel_tilt") || has(info, "used_memory") {
		t.Errorf("INFO sentinel:\n%s", info)
	}
	info = p.info("commandSTATS")
	if has(info, "used_memory") || !has(info, "rejected_calls") {
		t.Errorf("INFO commandSTATS:\n%s", info)
	}
	for _, args := range [][]any{{"INFO", "cpu", "sentinel"}, {"INFO", "cpu", "all"}, {"INFO", "cpu", "default"}} {
		info, err := p.rdb.Do(context.Background(), args...).Text()
		if err != nil || !has(info, "used_cpu_user") || has(info, "sentinel_tilt") ||
			strings.Count(info, "used_cpu_user_children") != 1 {
			t.Errorf("%v: %v\n%s", args, err, info)
		}
		switch args[2] {
		case "sentinel":
			if has(info, "master_repl_offset") {
				t.Errorf("%v has master_repl_offset", args)
			}
		case "all", "default":
			if !has(info, "used_memory") || !has(info, "master_repl_offset") || has(info, "rejected_calls") != (args[2] == "all") {
				t.Errorf("%v:\n%s", args, info)
			}
		}
	}
}

// TestInfoFieldsToolsRead: the fields redis-cli --stat, redis_exporter and
// monitoring read, with values that move as the load does.
func TestInfoFieldsToolsRead(t *testing.T) {
	testproc.Long(t)
	p := newInfoProbe(t)
	ctx := context.Background()
	p.rdb.Do(ctx, "SET", "k", "5")
	p.rdb.Do(ctx, "GET", "k")
	p.rdb.Do(ctx, "GET", "nosuch")
	p.rdb.Do(ctx, "EXISTS", "k", "nosuch")
	p.rdb.Do(ctx, "TYPE", "nosuch")
	// A second of load, for the instantaneous rates (sampled every 100 ms,
	// the mean of the last 16 samples, as Redis does).
	for end := time.Now().Add(1700 * time.Millisecond); time.Now().Before(end); {
		pipe := p.rdb.Pipeline()
		for range 50 {
			pipe.Do(ctx, "NEXTID")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	info := p.info("everything")
	num := func(name string) float64 {
		t.Helper()
		v, err := strconv.ParseFloat(field(info, name), 64)
		if err != nil {
			t.Errorf("%s: %q", name, field(info, name))
		}
		return v
	}
	for _, name := range []string{"used_cpu_sys", "used_cpu_user", "used_memory_rss", "used_memory_peak",
		"instantaneous_ops_per_sec", "total_net_input_bytes", "total_net_output_bytes",
		"instantaneous_input_kbps", "instantaneous_output_kbps"} {
		if num(name) <= 0 {
			t.Errorf("%s: %q, want > 0", name, field(info, name))
		}
	}
	if num("used_cpu_sys_children") < 0 || num("used_cpu_user_children") < 0 || field(info, "blocked_clients") != "0" {
		t.Errorf("children's CPU or blocked_clients:\n%s", info)
	}
	if num("used_memory_peak") < num("used_memory")/2 {
		t.Errorf("used_memory_peak %v below used_memory %v", num("used_memory_peak"), num("used_memory"))
	}
	if h, m := num("keyspace_hits"), num("keyspace_misses"); h != 2 || m != 3 {
		t.Errorf("keyspace_hits %v keyspace_misses %v, want 2 and 3", h, m)
	}
	// NEXTID's frame is 16 bytes, its reply 21: at least that much per call.
	calls := num("total_commands_processed")
	if in, out := num("total_net_input_bytes"), num("total_net_output_bytes"); in < 16*calls*0.9 || out < 21*calls*0.9 {
		t.Errorf("net bytes in %v out %v for %v commands", in, out, calls)
	}
	if len(info) > 8<<10 {
		t.Errorf("INFO everything: %d bytes", len(info))
	}
	p.resetstat()
	info = p.info("all")
	if field(info, "keyspace_hits") != "0" || field(info, "total_net_input_bytes") == "" {
		t.Errorf("after CONFIG RESETSTAT:\n%s", info)
	}
	if in, _ := strconv.Atoi(field(info, "total_net_input_bytes")); in > 200 {
		t.Errorf("total_net_input_bytes %d after CONFIG RESETSTAT", in)
	}
}
