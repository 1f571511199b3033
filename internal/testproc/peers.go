package testproc

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// FreePort is a TCP port free on 127.0.0.1 now, for a process that must
// keep its port across a restart or be told it in advance.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartRedis runs Debian's redis-server on a free loopback port, without
// persistence and with args, for the length of the test, and returns its
// address. It skips the test when redis-server is not installed.
func StartRedis(t testing.TB, args ...string) string {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found: install Debian's redis-server (apt-get install redis-server) for the side-by-side tests")
	}
	port := strconv.Itoa(FreePort(t))
	cmd := exec.Command(server, append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return "127.0.0.1:" + port
		}
	}
	t.Fatal("redis-server did not listen within 10s")
	return ""
}
