package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"idserver/internal/wait"
)

// TestRaftPortOutlivesRunningOutOfDescriptors: a connection that arrives
// while the process has no file descriptor left makes the Raft port's
// accept fail (EMFILE, for real: the soft RLIMIT_NOFILE is lowered and the
// table filled). The port retries, and once descriptors are free again a
// Raft stream is taken as before.
func TestRaftPortOutlivesRunningOutOfDescriptors(t *testing.T) {
	m, log, _ := acceptorMux(t, "pw")
	port := m.addr.(*net.TCPAddr).Port

	// The connecting socket is made while there are descriptors; it
	// connects once there are none.
	sock, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(sock)
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	lowered := limit
	lowered.Cur = min(limit.Cur, 1024)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var fill []*os.File
	free := func() {
		for _, f := range fill {
			f.Close()
		}
		fill = nil
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
			t.Error(err)
		}
	}
	defer free()
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, f)
	}
	if err := syscall.Connect(sock, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	// The accept fails: the port logs it and retries (or, without the
	// retry, closes).
	if _, ok := wait.Until(10*time.Second, func() (bool, string) {
		select {
		case <-m.closed:
			return true, ""
		default:
		}
		return strings.Contains(log.String(), "too many open files"), ""
	}); !ok {
		free()
		t.Fatalf("no accept failure within 10s with every descriptor taken; log:\n%s", log)
	}
	free()

	wait.For(t, 10*time.Second, "a Raft stream after descriptors were freed", func() (bool, string) {
		conn, err := dialerMux(tcpNetwork{}, "pw", "c1").dial(m.addr.String(), streamRaft, 2*time.Second)
		if err != nil {
			return false, fmt.Sprintf("%v; log:\n%s", err, log)
		}
		conn.Close()
		return true, ""
	})
	select {
	case c := <-m.raftConns:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the Raft stream never reached Raft")
	}
	if !strings.Contains(log.String(), "the Raft port accepts connections again") {
		t.Errorf("no line saying the port accepts again; log:\n%s", log)
	}
	t.Logf("log:\n%s", log)
}
