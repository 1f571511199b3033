package clientmodes

import (
	"bufio"
	"encoding/json"
	"fmt"
	"idserver/internal/testproc"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptClient is a client driven through a script of clients/: the
// program, the script's arguments before the mode, and its environment.
type scriptClient struct {
	name string
	argv []string
	env  []string
}

// pythonClient is redis-py under the first python3 on PATH that has it,
// or a skip with the line that installs it.
func pythonClient(t *testing.T) scriptClient {
	t.Helper()
	py := testproc.NeedPythonRedis(t)
	return scriptClient{name: "redis-py", argv: []string{py, filepath.Join(repoRoot(), "clients", "cluster_modes.py")}}
}

// nodeClient is ioredis under node, or a skip with what to install.
func nodeClient(t *testing.T) scriptClient {
	t.Helper()
	node, modules := testproc.NeedNodeModules(t, "ioredis")
	return scriptClient{name: "ioredis", argv: []string{node, filepath.Join(repoRoot(), "clients", "cluster_modes.js")}, env: []string{"NODE_PATH=" + modules}}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// scriptResult is what a script prints on its RESULT line.
type scriptResult struct {
	OutageMS int64    `json:"outage_ms"`
	Rebuilt  bool     `json:"rebuilt"` // the script made a new client: see clients/cluster_modes.py
	Incr     []string `json:"incr"`
	NextID   []string `json:"nextid"`
}

// TestScriptClientsInClusterAndSentinelMode: redis-py's RedisCluster and
// Sentinel and ioredis's Cluster and sentinels, as go clients are tested:
// on one node and on three, the node in use killed after a first round of
// commands, the client carrying on by itself.
func TestScriptClientsInClusterAndSentinelMode(t *testing.T) {
	for _, lang := range []string{"redis-py", "ioredis"} {
		for _, mode := range []string{"cluster", "sentinel"} {
			for _, size := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/%d", lang, mode, size), func(t *testing.T) {
					sc := pythonClient
					if lang == "ioredis" {
						sc = nodeClient
					}
					runScript(t, sc(t), mode, size)
				})
			}
		}
	}
}

func runScript(t *testing.T, sc scriptClient, mode string, size int) {
	var flags []string
	if mode == "cluster" {
		flags = emulated
	}
	nodes := startCluster(t, size, flags...)
	args := append(append(sc.argv[1:], mode, "orders"), addrs(nodes)...)
	cmd := exec.Command(sc.argv[0], args...)
	cmd.Env = append(os.Environ(), sc.env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	done := false
	t.Cleanup(func() {
		if !done {
			cmd.Process.Kill()
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", sc.name, stderr.String())
		}
	})
	// next is the script's next line, within a deadline.
	next := func(timeout time.Duration) string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s %s exited early: %s", sc.name, mode, stderr.String())
			}
			return l
		case <-time.After(timeout):
			t.Fatalf("%s %s: no line within %v", sc.name, mode, timeout)
		}
		return ""
	}
	if l := next(60 * time.Second); l != "PHASE1" {
		t.Fatalf("%s %s: %s", sc.name, mode, l)
	}
	used := inUse(t, nodes)
	used.p.Kill()
	if _, err := io.WriteString(stdin, "killed\n"); err != nil {
		t.Fatal(err)
	}
	restartAlone(t, nodes)
	l := next(90 * time.Second)
	res, ok := strings.CutPrefix(l, "RESULT ")
	if !ok {
		t.Fatalf("%s %s: %s", sc.name, mode, l)
	}
	var r scriptResult
	if err := json.Unmarshal([]byte(res), &r); err != nil {
		t.Fatal(err)
	}
	incrs, ids := ints(t, r.Incr), ints(t, r.NextID)
	if len(ids) != 6 {
		t.Fatalf("%s %s: %d NEXTIDs, want 3 before the kill and 3 after", sc.name, mode, len(ids))
	}
	what := sc.name + " " + mode
	checkValues(t, what, incrs, ids[:3], ids[3:])
	done = true
	cmd.Wait()
	if r.Rebuilt {
		what += " (a new client made after the kill)"
	}
	t.Logf("OUTAGE %s on %d node(s): %d ms from the kill of %s to the first INCR answered", what, size, r.OutageMS, used.addr())
}

func ints(t *testing.T, vs []string) []int64 {
	t.Helper()
	out := make([]int64, len(vs))
	for i, v := range vs {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%q is not an int64: %v", v, err)
		}
		out[i] = n
	}
	return out
}
