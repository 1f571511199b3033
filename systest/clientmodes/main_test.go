package clientmodes

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

func TestMain(m *testing.M) { systest.Main(m) }

// node is one idserver process of a test cluster, on ports it keeps across
// a restart.
type node struct {
	dir, port, join string
	flags           []string
	p               *testproc.Server
}

func (n *node) addr() string { return "127.0.0.1:" + n.port }

// start starts (or restarts) the node; a joining node is ready once it
// issues.
func (n *node) start(t *testing.T) {
	t.Helper()
	args := append([]string{"--port", n.port}, n.flags...)
	if n.join != "" {
		args = append(args, "--join", n.join)
	}
	p, err := testproc.Start(t, testproc.Config{Binary: systest.Binary(t), Dir: n.dir, Args: args, Ready: []any{"NEXTID"}})
	if err != nil {
		t.Fatal(err)
	}
	n.p = p
}

// startCluster starts size nodes with flags, the first bootstrapping and
// the others joining it, and waits until every node lists every member.
func startCluster(t *testing.T, size int, flags ...string) []*node {
	t.Helper()
	if testing.Short() {
		t.Skip("starts idserver processes: not under -short")
	}
	nodes := make([]*node, size)
	for i := range nodes {
		nodes[i] = &node{dir: t.TempDir(), port: strconv.Itoa(testproc.FreePort(t)), flags: flags}
		if i > 0 {
			nodes[i].join = nodes[0].addr()
		}
		nodes[i].start(t)
	}
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.addr()})
		eventually(t, 20*time.Second, func() error {
			if systest.ClusterInfo(t, rdb)["members"] != strconv.Itoa(size) {
				return fmt.Errorf("%s does not know every member yet", n.addr())
			}
			return nil
		})
		rdb.Close()
	}
	return nodes
}

func addrs(nodes []*node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.addr()
	}
	return out
}

// eventually polls cond until it returns nil, failing the test with its
// last error after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("not within %v: %v", timeout, err)
}

// inUse is the node that answered the test's INCRs: the one node whose
// INFO commandstats counts INCR (or INCRBY) calls (a client sends every command to the
// one node it took its map or its master from). It fails the test when it
// is not exactly one.
func inUse(t *testing.T, nodes []*node) *node {
	t.Helper()
	var used []*node
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.addr()})
		text, err := rdb.Info(context.Background(), "commandstats").Result()
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, "cmdstat_incr:") || strings.Contains(text, "cmdstat_incrby:") { // redis-py's incr is INCRBY tag 1
			used = append(used, n)
		}
	}
	if len(used) != 1 {
		t.Fatalf("INCR answered by %d nodes, want 1", len(used))
	}
	return used[0]
}

// restartAlone restarts the node killed in a cluster of one, on its ports
// and directory: what a client of a single node carries on through.
func restartAlone(t *testing.T, nodes []*node) {
	t.Helper()
	if len(nodes) == 1 {
		nodes[0].start(t)
	}
}

// checkValues: every INCR value above the one before (so none repeats and
// none goes back: the client sends one tag's INCRs to one node at a time),
// no NEXTID answered twice, and every NEXTID after the kill above every one
// before it. NEXTIDs before the kill need not increase: a client may spread
// commands without a key over the nodes (rueidis does), and two nodes'
// IDs of one millisecond are ordered by worker, not by time.
func checkValues(t *testing.T, what string, incrs, before, after []int64) {
	t.Helper()
	if len(incrs) == 0 || len(before) == 0 || len(after) == 0 {
		t.Fatalf("%s: no values (%d INCR, %d and %d NEXTID)", what, len(incrs), len(before), len(after))
	}
	for i := 1; i < len(incrs); i++ {
		if incrs[i] <= incrs[i-1] {
			t.Fatalf("%s: INCR answered %d after %d: %v", what, incrs[i], incrs[i-1], incrs)
		}
	}
	seen := map[int64]bool{}
	for _, id := range append(slices.Clone(before), after...) {
		if seen[id] {
			t.Fatalf("%s: NEXTID %d answered twice", what, id)
		}
		seen[id] = true
	}
	if last, first := slices.Max(before), slices.Min(after); first <= last {
		t.Fatalf("%s: NEXTID answered %d after the kill, %d before it", what, first, last)
	}
}
