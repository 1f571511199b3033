package testproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Long skips the test under go test -short: a test that starts real
// processes or runs for seconds calls it first, so that -short keeps unit
// tests and quick in-process tests only. Start calls it.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes or runs for seconds: not in -short")
	}
}

// installLines says how to install each program a test may drive, on
// Debian (what .ci/run installs).
var installLines = map[string]string{
	"redis-cli":                 "apt-get install redis-tools",
	"redis-benchmark":           "apt-get install redis-tools",
	"redis-server":              "apt-get install redis-server",
	"tmux":                      "apt-get install tmux",
	"iptables":                  "apt-get install iptables",
	"fusermount3":               "apt-get install fuse3",
	"etcd":                      "apt-get install etcd-server",
	"etcdctl":                   "apt-get install etcd-client",
	"prometheus-redis-exporter": "apt-get install prometheus-redis-exporter",
	"promtool":                  "apt-get install prometheus",
	"node":                      "apt-get install nodejs",
	"python3":                   "apt-get install python3",
	"nsenter":                   "apt-get install util-linux",
	"unshare":                   "apt-get install util-linux",
	"setpriv":                   "apt-get install util-linux",
	"taskset":                   "apt-get install util-linux",
	"bash":                      "apt-get install bash",
	"git":                       "apt-get install git",
}

// Find returns the path of program on PATH, or "" and a sentence that
// says it is missing and the line that installs it.
func Find(program string) (path, missing string) {
	path, err := exec.LookPath(program)
	if err != nil {
		install, ok := installLines[program]
		if !ok {
			install = "install " + program
		}
		return "", program + " not found on PATH: " + install
	}
	return path, ""
}

// Need returns the path of program on PATH, or skips the test with the
// line that installs it.
func Need(t testing.TB, program string) string {
	t.Helper()
	path, missing := Find(program)
	if path == "" {
		t.Skip(missing)
	}
	return path
}

// PythonRedis returns the first python3 on PATH that imports redis-py
// (Debian's python3-redis serves /usr/bin/python3, which a pyenv shim
// may come before), or "" and a sentence that says what is missing and the
// line that installs it.
func PythonRedis() (python, missing string) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		path := filepath.Join(dir, "python3")
		if _, err := exec.LookPath(path); err != nil {
			continue
		}
		if exec.Command(path, "-c", "import redis").Run() == nil {
			return path, ""
		}
		if missing == "" {
			missing = "redis-py not found for " + path + ": apt-get install python3-redis"
		}
	}
	if missing == "" {
		missing = "python3 not found on PATH: apt-get install python3-redis"
	}
	return "", missing
}

// NeedPythonRedis is PythonRedis for a test, which it skips when redis-py
// is missing.
func NeedPythonRedis(t testing.TB) string {
	t.Helper()
	python, missing := PythonRedis()
	if python == "" {
		t.Skip(missing)
	}
	return python
}

// NodeModules returns node's path and the node_modules folder that
// IDSERVER_NODE_MODULES names when it holds every one of modules, or a
// sentence that says what is missing and how to install it.
func NodeModules(modules ...string) (node, dir, missing string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "", "node not found on PATH: apt-get install nodejs, then npm install " + strings.Join(modules, " ") + " in a folder and set IDSERVER_NODE_MODULES to its node_modules (.ci/run does)"
	}
	dir = os.Getenv("IDSERVER_NODE_MODULES")
	for _, m := range modules {
		if _, err := os.Stat(filepath.Join(dir, m)); dir == "" || err != nil {
			return "", "", "node module " + m + " not found: npm install " + m + " in a folder and set IDSERVER_NODE_MODULES to its node_modules (.ci/run does)"
		}
	}
	return node, dir, ""
}

// NeedNodeModules is NodeModules for a test, which it skips when a module
// or node is missing.
func NeedNodeModules(t testing.TB, modules ...string) (node, dir string) {
	t.Helper()
	node, dir, missing := NodeModules(modules...)
	if node == "" {
		t.Skip(missing)
	}
	return node, dir
}

// NeedRoot skips the test unless it runs as root, saying what needs it.
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root: run the test as root, as CI does", what)
	}
}
