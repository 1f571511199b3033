package testproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreePort is a TCP port free on 127.0.0.1 now, for a process that must
// keep its port across a restart or be told it in advance. It is drawn at
// random from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), so that no outgoing connection of the
// test's own load takes it before the process binds it, and it is never
// given twice, in one test binary or to two that run at once (reserve): a
// port picked and not yet bound is still free to the kernel, so asking it
// again could hand out the same one.
//
// The port 10000 above it, idserver's default Raft port for that RESP
// port, is free too, below the ephemeral range, and reserved with it.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Port is FreePort for a program that is not a test (bench/cmd/freeport):
// a port, with the one 10000 above it, free now and neither of them in
// given, the ports an earlier run of that program handed out.
func Port(given []int) (int, error) {
	portMu.Lock()
	for _, p := range given {
		portsGiven[p] = true
	}
	portMu.Unlock()
	return pickPort()
}

// raftOffset is how far above its RESP port idserver puts its Raft port
// when --raft-addr is not given.
const raftOffset = 10000

// pickPort is FreePort's draw.
func pickPort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	lo, hi := 10000, ephemeralStart()-raftOffset
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if portsGiven[port] || portsGiven[port+raftOffset] || !free(port) || !free(port+raftOffset) {
			continue
		}
		if !reserve(port) {
			continue
		}
		if !reserve(port + raftOffset) {
			release(port)
			continue
		}
		portsGiven[port], portsGiven[port+raftOffset] = true, true
		return port, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 in %d..%d with its Raft port free", lo, hi-1)
}

// reserve locks port for this test binary against the others that run
// at the same time (go test runs packages in parallel): an exclusive
// flock on a file named by the port, held until the binary exits, when
// the kernel drops it. It says false when another binary holds it.
func reserve(port int) bool {
	dir := filepath.Join(os.TempDir(), "idserver-testproc-ports")
	os.MkdirAll(dir, 0o777)
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true // no lock to take: the in-binary check alone
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	portLocks[port] = f
	return true
}

// release gives up reserve's lock on port.
func release(port int) {
	if f := portLocks[port]; f != nil {
		f.Close()
		delete(portLocks, port)
	}
}

// free says whether port can be bound on 127.0.0.1 now.
func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

var (
	portMu     sync.Mutex
	portsGiven = map[int]bool{}
	portLocks  = map[int]*os.File{} // reserve's locks, held until the binary exits
)

// ephemeralStart is the first port of the kernel's ephemeral range, or
// 32768 (Linux's default) when it cannot be read or leaves too few ports
// below it.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n >= 10000+raftOffset+2000 {
				return n
			}
		}
	}
	return 32768
}

// StartRedis runs Debian's redis-server on a free loopback port, without
// persistence and with args, for the length of the test, and returns its
// address. It skips the test when redis-server is not installed.
func StartRedis(t testing.TB, args ...string) string {
	t.Helper()
	server := Need(t, "redis-server")
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
