package cluster

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
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
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		closed := false
		select {
		case <-m.closed:
			closed = true
		default:
		}
		if closed || strings.Contains(log.String(), "too many open files") {
			break
		}
		if time.Now().After(deadline) {
			free()
			t.Fatalf("no accept failure within 10s with every descriptor taken; log:\n%s", log)
		}
	}
	free()

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := dialerMux(tcpNetwork{}, "pw", "c1").dial(m.addr.String(), streamRaft, 2*time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a Raft stream 10s after descriptors were freed: %v; log:\n%s", err, log)
		}
	}
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
