package importer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// docRedisCLI runs a redis-cli command as docs/migrating.md gives it
// (the one holding needle), its placeholders replaced, and returns its
// output.
func docRedisCLI(t *testing.T, needle string, replace map[string]string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	var command string
	for _, part := range strings.Split(string(doc), "`") {
		if strings.HasPrefix(part, "redis-cli ") && strings.Contains(part, needle) {
			command = part
		}
	}
	if command == "" {
		t.Fatalf("docs/migrating.md gives no redis-cli command with %q", needle)
	}
	for from, to := range replace {
		command = strings.ReplaceAll(command, from, to)
	}
	t.Logf("$ %s", command)
	words := splitWords(t, command)
	out, err := exec.Command(need(t, "redis-cli", "apt-get install redis-tools"), words[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

// TestImportFromSentinelsMaster follows docs/migrating.md for Sentinel:
// the master's address asked of a sentinel, then the two passes and the
// check from it.
func TestImportFromSentinelsMaster(t *testing.T) {
	cmds := docCommands(t)
	master := startOldRedis(t)
	src := redis.NewClient(&redis.Options{Addr: master.addr()})
	keys := loadCounters(t, src, 1000)
	src.Close()
	dir := t.TempDir()
	port := strconv.Itoa(testproc.FreePort(t))
	conf := filepath.Join(dir, "sentinel.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("bind 127.0.0.1\nport %s\ndir %s\nsentinel monitor orders 127.0.0.1 %s 1\n", port, dir, master.port)), 0o644)
	testproc.StartLogged(t, exec.Command(master.bin, conf, "--sentinel"), "sentinel output")
	wait.For(t, 10*time.Second, "the sentinel listens", func() (bool, string) { return dials("127.0.0.1:" + port), "" })

	out := docRedisCLI(t, "SENTINEL get-master-addr-by-name", map[string]string{"SENTINEL -p": "127.0.0.1 -p", "26379": port, "NAME": "orders"})
	lines := strings.Fields(out)
	if len(lines) != 2 {
		t.Fatalf("the sentinel answered %q, want a host and a port", out)
	}
	from := lines[0] + ":" + lines[1]
	if from != master.addr() {
		t.Fatalf("the sentinel names %s, the master is %s", from, master.addr())
	}
	members := systest.StartMembers(t, 1)
	for _, step := range []int{docRedisLive, docRedisSecond} {
		if code, out := runDoc(t, cmds[step], placeholders(from, members)); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	}
	code, out := runDoc(t, cmds[docRedisVerify], placeholders(from, members))
	verified(t, code, out, len(keys))
}

// TestImportFromRedisCluster follows docs/migrating.md for Redis Cluster:
// the masters listed by CLUSTER NODES, each step run once per master;
// every key of the cluster lands.
func TestImportFromRedisCluster(t *testing.T) {
	cmds := docCommands(t)
	server := need(t, "redis-server", "apt-get install redis-server")
	cli := need(t, "redis-cli", "apt-get install redis-tools")
	var addrs []string
	for range 3 {
		dir, port := t.TempDir(), strconv.Itoa(testproc.FreePort(t))
		testproc.StartLogged(t, exec.Command(server, "--bind", "127.0.0.1", "--port", port, "--dir", dir, "--save", "",
			"--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf")), "redis-server output")
		addrs = append(addrs, "127.0.0.1:"+port)
		wait.For(t, 10*time.Second, "redis-server listens", func() (bool, string) { return dials(addrs[len(addrs)-1]), "" })
	}
	if out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer rc.Close()
	wait.For(t, 30*time.Second, "the cluster is ok", func() (bool, string) {
		info, err := rc.ClusterInfo(context.Background()).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok"), info
	})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("counter:%d", i)
		if err := rc.Set(context.Background(), keys[i], int64(i)*1_000_003, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	host, port, _ := strings.Cut(addrs[1], ":")
	var masters []string
	for _, line := range strings.Split(docRedisCLI(t, "CLUSTER NODES", map[string]string{"ANY": host, "6379": port}), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && strings.Contains(f[2], "master") {
			masters = append(masters, strings.Split(f[1], "@")[0])
		}
	}
	if len(masters) != 3 {
		t.Fatalf("CLUSTER NODES lists masters %v, want 3", masters)
	}
	members := systest.StartMembers(t, 1)
	ok := 0
	for _, m := range masters {
		for _, step := range []int{docRedisLive, docRedisSecond} {
			if code, out := runDoc(t, cmds[step], placeholders(m, members)); code != 0 {
				t.Fatalf("%s: exit %d:\n%s", m, code, out)
			}
		}
		code, out := runDoc(t, cmds[docRedisVerify], placeholders(m, members))
		if code != 0 {
			t.Fatalf("%s: --verify exited %d:\n%s", m, code, tail(out))
		}
		ok += strings.Count(out, "\tok\n")
	}
	if ok != len(keys) {
		t.Fatalf("%d keys ok over the masters, want %d", ok, len(keys))
	}
	n, err := client(t, members[0]).DBSize(context.Background()).Result()
	if err != nil || n < int64(len(keys)) {
		t.Fatalf("idserver holds %d tags (%v), want %d", n, err, len(keys))
	}
}
