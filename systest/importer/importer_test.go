// Package importer tests idserver import against real processes on
// 127.0.0.1: Debian's redis-server, PostgreSQL and MariaDB as sources,
// idserver clusters as the target, each procedure of docs/migrating.md run
// as written there.
package importer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/wait"
)

func TestMain(m *testing.M) { systest.Main(m) }

// docCommands are the idserver import commands of docs/migrating.md, in
// the order the document gives them.
func docCommands(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, m := range regexp.MustCompile("`(idserver import --from [^`]+)`").FindAllStringSubmatch(string(doc), -1) {
		cmds = append(cmds, m[1])
	}
	want := []string{"redis://", "redis://", "redis:// --verify", "redis:// --margin", "redis:// --verify",
		"postgres://", "postgres:// --verify", "mysql://", "mysql:// --verify"}
	if len(cmds) != len(want) {
		t.Fatalf("docs/migrating.md gives %d idserver import commands, the tests run %d:\n%s", len(cmds), len(want), strings.Join(cmds, "\n"))
	}
	for i, w := range want {
		for _, part := range strings.Fields(w) {
			if !strings.Contains(cmds[i], part) {
				t.Fatalf("docs/migrating.md command %d does not hold %q: %s", i, part, cmds[i])
			}
		}
	}
	return cmds
}

// Which of docCommands each procedure step is.
const (
	docRedisLive = iota
	docRedisSecond
	docRedisVerify
	docMarginLive
	docMarginVerify
	docPostgres
	docPostgresVerify
	docLeaf
	docLeafVerify
)

// runDoc runs a command of the docs with its placeholders replaced
// (OLD:6379 and friends by the test's addresses) and returns its exit code
// and output.
func runDoc(t *testing.T, command string, replace map[string]string) (int, string) {
	t.Helper()
	froms := make([]string, 0, len(replace))
	for from := range replace {
		froms = append(froms, from)
	}
	// The longest first: ID1:6380,ID2:6380,ID3:6380 before ID1:6380.
	sort.Slice(froms, func(i, j int) bool { return len(froms[i]) > len(froms[j]) })
	for _, from := range froms {
		command = strings.ReplaceAll(command, from, replace[from])
	}
	args := splitWords(t, command)
	if args[0] != "idserver" {
		t.Fatalf("not an idserver command: %s", command)
	}
	t.Logf("$ %s", command)
	return systest.RunToExit(t, args[1:]...)
}

// splitWords splits a command as a shell does, for words in single quotes.
func splitWords(t *testing.T, command string) []string {
	var words []string
	for _, m := range regexp.MustCompile(`'[^']*'|\S+`).FindAllString(command, -1) {
		words = append(words, strings.Trim(m, "'"))
	}
	return words
}

// placeholders maps the docs' addresses to the test's.
func placeholders(old string, members []*systest.Member) map[string]string {
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, "127.0.0.1:"+m.Port)
	}
	r := map[string]string{"redis://OLD:6379": "redis://" + old, "ID1:6380": addrs[0]}
	r["ID1:6380,ID2:6380,ID3:6380"] = strings.Join(addrs, ",")
	return r
}

// client is a client of m whose replies may take a Raft round per tag:
// the first INCR of a tag after its floor allocates its segment.
func client(t *testing.T, m *systest.Member) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + m.Port, ReadTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// issued records every value of every counter handed out, by the old
// Redis or by idserver, and finds repeats.
type issued struct {
	mu      sync.Mutex
	values  map[string]map[int64]string
	repeats []string
	count   int
}

func newIssued() *issued { return &issued{values: map[string]map[int64]string{}} }

func (is *issued) add(key string, v int64, by string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.values[key] == nil {
		is.values[key] = map[int64]string{}
	}
	if first, dup := is.values[key][v]; dup {
		is.repeats = append(is.repeats, fmt.Sprintf("%s=%d by %s and by %s", key, v, first, by))
	}
	is.values[key][v] = by
	is.count++
}

// loadCounters sets n counters counter:0.. on rdb to values up to 10^12.
func loadCounters(t *testing.T, rdb *redis.Client, n int) []string {
	t.Helper()
	keys := make([]string, n)
	pipe := rdb.Pipeline()
	for i := range keys {
		keys[i] = fmt.Sprintf("counter:%d", i)
		pipe.Set(context.Background(), keys[i], rand.Int64N(1_000_000_000_000), 0)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	return keys
}

// writers INCR random keys on rdb from four goroutines until stop is
// called, recording each value as by.
func writers(t *testing.T, rdb *redis.Client, keys []string, is *issued, by string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				k := keys[rand.IntN(len(keys))]
				v, err := rdb.Incr(context.Background(), k).Result()
				if err != nil {
					t.Errorf("%s: INCR %s: %v", by, k, err)
					return
				}
				is.add(k, v, by)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// incrEach INCRs every key n times on rdb, recording the values.
func incrEach(t *testing.T, rdb *redis.Client, keys []string, n int, is *issued, by string) {
	t.Helper()
	for range n {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.Incr(context.Background(), k)
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds {
			is.add(keys[i], c.Val(), by)
		}
	}
}

func (is *issued) check(t *testing.T) {
	t.Helper()
	is.mu.Lock()
	defer is.mu.Unlock()
	t.Logf("%d values issued over %d counters, %d repeated", is.count, len(is.values), len(is.repeats))
	if len(is.repeats) > 0 {
		t.Fatalf("%d values repeated, the first: %s", len(is.repeats), strings.Join(is.repeats[:min(5, len(is.repeats))], "; "))
	}
}

// verified checks a --verify run: exit 0 and n keys, each ok.
func verified(t *testing.T, code int, out string, n int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("--verify pass exited %d:\n%s", code, tail(out))
	}
	if ok := strings.Count(out, "\tok\n"); ok != n {
		t.Fatalf("--verify: %d keys ok, want %d:\n%s", ok, n, tail(out))
	}
	if strings.Contains(out, "BELOW") {
		t.Fatalf("--verify found a key below:\n%s", tail(out))
	}
}

func tail(out string) string {
	lines := strings.Split(out, "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// TestCopyWhileIssuingThenSecondPass follows docs/migrating.md's first
// Redis procedure: 1,000 counters copied while the old writers issue,
// the writers stopped, a second pass with --verify, the writers moved to
// a three-node idserver: no value of any counter is issued twice.
func TestCopyWhileIssuingThenSecondPass(t *testing.T) {
	cmds := docCommands(t)
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	defer src.Close()
	keys := loadCounters(t, src, 1000)
	members := systest.StartMembers(t, 3)
	dst := client(t, members[1])
	is := newIssued()

	stopOld := writers(t, src, keys, is, "old redis")
	code, out := runDoc(t, cmds[docRedisLive], placeholders(old.addr(), members))
	if code != 0 {
		stopOld()
		t.Fatalf("live pass exited %d:\n%s", code, out)
	}
	stopOld()
	// Before the second pass, --verify names the keys the writers moved.
	if code, out = runDoc(t, cmds[docRedisVerify], placeholders(old.addr(), members)); code != 4 || !strings.Contains(out, "\tBELOW\n") {
		t.Fatalf("--verify before the second pass: exit %d, want 4 with keys BELOW:\n%s", code, tail(out))
	}
	if code, out = runDoc(t, cmds[docRedisSecond], placeholders(old.addr(), members)); code != 0 {
		t.Fatalf("second pass exited %d:\n%s", code, out)
	}
	code, out = runDoc(t, cmds[docRedisVerify], placeholders(old.addr(), members))
	verified(t, code, out, len(keys))
	incrEach(t, dst, keys, 3, is, "idserver")
	is.check(t)
}

// TestMarginCutOverWithoutAStop follows the procedure without a stop:
// a live pass with --margin, the writers moved to idserver while the old
// ones still run, the old ones stopped, --verify: no value repeated.
func TestMarginCutOverWithoutAStop(t *testing.T) {
	cmds := docCommands(t)
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	defer src.Close()
	keys := loadCounters(t, src, 1000)
	members := systest.StartMembers(t, 1)
	dst := client(t, members[0])
	is := newIssued()

	stopOld := writers(t, src, keys, is, "old redis")
	code, out := runDoc(t, cmds[docMarginLive], placeholders(old.addr(), members))
	if code != 0 {
		stopOld()
		t.Fatalf("live pass with --margin exited %d:\n%s", code, out)
	}
	stopNew := writers(t, dst, keys, is, "idserver")
	wait.For(t, 30*time.Second, "both sides issue at once", func() (bool, string) {
		is.mu.Lock()
		defer is.mu.Unlock()
		n := 0
		for _, vs := range is.values {
			for _, by := range vs {
				if by == "idserver" {
					n++
				}
			}
		}
		return n >= 2000, fmt.Sprintf("%d values from idserver", n)
	})
	stopOld()
	code, out = runDoc(t, cmds[docMarginVerify], placeholders(old.addr(), members))
	stopNew()
	verified(t, code, out, len(keys))
	is.check(t)
}

// TestBadValuesNamedRestImported: a value that is not an integer, a
// negative one, one above 2^63-1 and a list are refused, each key named;
// every other key is imported and the import exits 3.
func TestBadValuesNamedRestImported(t *testing.T) {
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	defer src.Close()
	ctx := context.Background()
	good := map[string]int64{"n:a": 5, "n:b": 1_000_000_000_000, "n:max": 9223372036854775807, "n:zero": 0}
	for k, v := range good {
		src.Set(ctx, k, v, 0)
	}
	bad := map[string]string{"n:text": "abc", "n:neg": "-7", "n:huge": "9223372036854775808", "n:float": "1.5"}
	for k, v := range bad {
		src.Set(ctx, k, v, 0)
	}
	src.RPush(ctx, "n:list", "x")
	members := systest.StartMembers(t, 1)
	dst := client(t, members[0])

	code, out := systest.RunToExit(t, "import", "--from", "redis://"+old.addr(), "--match", "n:*", "--to", "127.0.0.1:"+members[0].Port)
	if code != 3 {
		t.Fatalf("exit %d, want 3:\n%s", code, out)
	}
	for _, want := range []string{`refused "n:text": value "abc" is not an integer`, `refused "n:neg": value "-7" is negative`,
		`refused "n:huge": value "9223372036854775808" is above 9223372036854775807`, `refused "n:float": value "1.5" is not an integer`,
		`refused "n:list": holds a value that is not a string`, "4 imported, 5 refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	for k, v := range good {
		if got, err := dst.Get(ctx, k).Int64(); err != nil || got < v {
			t.Errorf("GET %s on idserver = %d, %v; want at least %d", k, got, err, v)
		}
	}
	for k := range bad {
		if n, _ := dst.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("refused key %s exists on idserver", k)
		}
	}
}

// TestRedisKilledMidwayRerunFinishes: the old Redis is killed in the
// middle of an import, which exits 1 saying how many floors landed; once
// it is back, the same command finishes and --verify finds every key ok.
func TestRedisKilledMidwayRerunFinishes(t *testing.T) {
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	keys := loadCounters(t, src, 20000)
	if err := src.Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	src.Close()
	members := systest.StartMembers(t, 1)
	dst := client(t, members[0])
	args := []string{"import", "--from", "redis://" + old.addr(), "--match", "counter:*", "--to", "127.0.0.1:" + members[0].Port}

	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	go func() {
		code, out := systest.RunToExit(t, append(args, "--rate", "4000")...)
		done <- result{code, out}
	}()
	wait.For(t, 30*time.Second, "the import lands its first floors", func() (bool, string) {
		n, err := dst.DBSize(context.Background()).Result()
		return n >= 2000, fmt.Sprintf("%d tags, %v", n, err)
	})
	old.kill()
	r := <-done
	if r.code != 1 || !strings.Contains(r.out, "floors landed before it; a rerun lands every one once the cause is mended") {
		t.Fatalf("import with its source killed: exit %d, want 1 and how many landed:\n%s", r.code, r.out)
	}
	if n, _ := dst.DBSize(context.Background()).Result(); n >= int64(len(keys)) {
		t.Fatalf("the source was killed after the import had landed all %d keys", n)
	}
	old.start()
	if code, out := systest.RunToExit(t, args...); code != 0 {
		t.Fatalf("rerun exited %d:\n%s", code, out)
	}
	code, out := systest.RunToExit(t, append(args, "--verify")...)
	verified(t, code, out, len(keys))
}

// TestLeaderRestartDuringImport: the leader of three is killed and
// started again while an import writes to all three; the import finishes
// and --verify finds every key ok.
func TestLeaderRestartDuringImport(t *testing.T) {
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	keys := loadCounters(t, src, 20000)
	src.Close()
	members := systest.StartMembers(t, 3)
	to := placeholders(old.addr(), members)["ID1:6380,ID2:6380,ID3:6380"]
	args := []string{"import", "--from", "redis://" + old.addr(), "--match", "counter:*", "--to", to}

	rdb := members[0].P.Client()
	var leader *systest.Member
	wait.For(t, 30*time.Second, "a leader", func() (bool, string) {
		addr, err := rdb.Do(context.Background(), "CLUSTER", "LEADER").Text()
		for _, m := range members {
			if addr == "127.0.0.1:"+m.Port {
				leader = m
			}
		}
		return leader != nil, fmt.Sprintf("%q %v", addr, err)
	})
	var follower *systest.Member
	for _, m := range members {
		if m != leader {
			follower = m
		}
	}
	fc := follower.P.Client()
	done := make(chan [2]any, 1)
	go func() {
		code, out := systest.RunToExit(t, append(args, "--rate", "4000")...)
		done <- [2]any{code, out}
	}()
	wait.For(t, 30*time.Second, "the import lands its first floors", func() (bool, string) {
		n, err := fc.DBSize(context.Background()).Result()
		return n >= 2000, fmt.Sprintf("%d tags, %v", n, err)
	})
	leader.P.Kill()
	leader.Start(t)
	r := <-done
	if code, out := r[0].(int), r[1].(string); code != 0 {
		t.Fatalf("import through a leader restart exited %d:\n%s", code, out)
	}
	code, out := systest.RunToExit(t, append(args, "--verify")...)
	verified(t, code, out, len(keys))
}

// TestUnreachableAddressInTo: a --to address where nothing listens fails
// each batch sent there, which goes on to the next address; every key
// lands, none counted as landed before it did.
func TestUnreachableAddressInTo(t *testing.T) {
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	keys := loadCounters(t, src, 5000)
	src.Close()
	members := systest.StartMembers(t, 1)
	nowhere := systest.FreeAddr(t)
	args := []string{"import", "--from", "redis://" + old.addr(), "--match", "counter:*", "--to", nowhere + ",127.0.0.1:" + members[0].Port}
	if code, out := systest.RunToExit(t, args...); code != 0 || !strings.Contains(out, fmt.Sprintf("%d imported", len(keys))) {
		t.Fatalf("import: exit %d, want 0 with every key imported:\n%s", code, out)
	}
	args[len(args)-1] = "127.0.0.1:" + members[0].Port
	code, out := systest.RunToExit(t, append(args, "--verify")...)
	verified(t, code, out, len(keys))
}

// TestPastMaxTagsStopsNamingTheBound: an import of more counters than the
// cluster's --max-tags stops at once with the bound named (a refusal that
// trying again cannot change), saying how many landed.
func TestPastMaxTagsStopsNamingTheBound(t *testing.T) {
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	loadCounters(t, src, 3000)
	src.Close()
	p := systest.StartProc(t, t.TempDir(), "--max-tags", "1000")
	// The bound holds once the leader's value is committed, shortly after
	// the start.
	rdb := p.Client()
	wait.For(t, 10*time.Second, "the bound on tags applied", func() (bool, string) {
		info := systest.ClusterInfo(t, rdb)
		return info["max_tags"] == "1000", "max_tags:" + info["max_tags"]
	})
	start := time.Now()
	code, out := systest.RunToExit(t, "import", "--from", "redis://"+old.addr(), "--to", p.Addr, "--timeout", "30s")
	if code != 1 || !strings.Contains(out, "tag limit reached") || !strings.Contains(out, "floors landed before it") ||
		!strings.Contains(out, "to which this command would add") || !strings.Contains(out, "once --max-tags on every node holds") {
		t.Fatalf("exit %d, want 1 naming the bound, the batch that would pass it, what landed and what a rerun needs:\n%s", code, out)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the import tried a refusal again for %v", took)
	}
}

// TestProgressOnATerminalOnly: on a terminal (script(1) gives the import
// one) a progress line counts, rates and says the time left; through a
// pipe the import prints no progress.
func TestProgressOnATerminalOnly(t *testing.T) {
	scriptBin := need(t, "script", "apt-get install bsdutils")
	old := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: old.addr()})
	loadCounters(t, src, 3000)
	src.Close()
	members := systest.StartMembers(t, 1)
	args := []string{"import", "--from", "redis://" + old.addr(), "--to", "127.0.0.1:" + members[0].Port, "--rate", "1500"}

	cmd := exec.Command(scriptBin, "-qefc", systest.Binary(t)+" "+strings.Join(args, " "), "/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("on a terminal: %v\n%q", err, out)
	}
	if !regexp.MustCompile(`\r\x1b\[Kread \d+ of 3000, imported \d+, refused 0, \d+/s, at most \d+s left`).Match(out) {
		t.Fatalf("no progress line with counts, rate and time left on a terminal:\n%q", out)
	}
	if !strings.Contains(string(out), "read 3000 of 3000, imported 3000, refused 0") {
		t.Fatalf("the last progress line does not count every key:\n%q", out)
	}
	code, piped := systest.RunToExit(t, args...)
	if code != 0 || strings.Contains(piped, "\r") || strings.Contains(piped, "left") {
		t.Fatalf("through a pipe: exit %d, want 0 and no progress:\n%q", code, piped)
	}
}
