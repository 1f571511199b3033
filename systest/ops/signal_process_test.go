package ops

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// silentMember listens on 127.0.0.1 and accepts connections it never
// answers: a --join address whose member hangs.
func silentMember(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(testproc.FreePort(t))))
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestSIGTERMDuringAJoinExitsAtOnce: a node joining through a member that
// never answers is stopped by SIGTERM within 2 s, exits 0, and says in one
// log line which phase of the start it was in.
func TestSIGTERMDuringAJoinExitsAtOnce(t *testing.T) {
	member := silentMember(t)
	var log testproc.Buffer
	cmd := exec.Command(systest.Binary(t), "--port", strconv.Itoa(testproc.FreePort(t)), "--dir", t.TempDir(), "--join", member)
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	})
	wait.For(t, 20*time.Second, `a "joining the cluster" log line`, func() (bool, string) {
		return strings.Contains(log.String(), "joining the cluster"), log.String()
	})
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
	took, err := time.Since(sent), waitErr
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("exit status %d after SIGTERM, want 0", exit.ExitCode())
	} else if err != nil {
		t.Fatal(err)
	}
	if took > 2*time.Second {
		t.Errorf("exit %v after SIGTERM, want within 2s", took.Round(time.Millisecond))
	}
	if n := strings.Count(log.String(), `phase="joining the cluster"`); n != 1 {
		t.Errorf("%d log lines name the phase \"joining the cluster\", want 1", n)
	}
	t.Logf("exited %v after SIGTERM", took.Round(time.Millisecond))
}
