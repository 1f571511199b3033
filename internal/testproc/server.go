package testproc

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config says how to start one idserver process.
type Config struct {
	Binary string   // from Build
	Dir    string   // the data directory (--dir)
	Args   []string // flags after "--port P --dir Dir", P from FreePort; a later --port wins
	Env    []string // added to this process's environment
	// TLS is the client configuration of the readiness check, for a server
	// started with --tls-cert; nil for plain TCP.
	TLS *tls.Config
	// Ready is the command that must succeed before the server counts as
	// started: PING when nil. NEXTID waits until a joining node has its
	// worker ID.
	Ready []any
}

// Server is one idserver process.
type Server struct {
	Addr string    // RESP address, from the server's listening line (on 127.0.0.1 when it binds every interface)
	Port string    // the port of Addr
	Cmd  *exec.Cmd // the process, for signals such as SIGSTOP

	done chan struct{}
	err  error // from Wait, once done is closed
	log  Buffer
}

// listening is the server's log line, in text and JSON, that names the
// address it listens on.
var listening = regexp.MustCompile(`msg=listening addr=(\S+)|"msg":"listening","addr":"([^"]+)"`)

// Start is Launch for a test: whatever Launch started is killed with
// SIGKILL when the test ends, if it still runs, and its log is printed if
// the test failed. Like Launch, it returns the Server with the error when
// the process started but did not become ready. Under -short it skips the
// test (Long), so it is called from the test's goroutine.
func Start(t testing.TB, cfg Config) (*Server, error) {
	t.Helper()
	Long(t)
	s, err := Launch(cfg)
	if s != nil {
		t.Cleanup(func() {
			s.Kill()
			if t.Failed() {
				t.Logf("server log (pid %d, %s):\n%s", s.Cmd.Process.Pid, s.Addr, s.Log())
			}
		})
	}
	return s, err
}

// Launch starts idserver with "--port P --dir cfg.Dir" and cfg.Args, P
// from FreePort (so its default Raft port is free and below the ephemeral
// range too),
// waits (20 s) for its listening line and then (10 s) until cfg.Ready
// succeeds, with the password of --requirepass in cfg.Args. The Server is
// returned whenever the process started, also with an error: a process
// that refuses to start is then still running or has exited (Done), and
// the caller ends it with Kill.
func Launch(cfg Config) (*Server, error) {
	picked, err := pickPort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Binary, append([]string{"--port", strconv.Itoa(picked), "--dir", cfg.Dir}, cfg.Args...)...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Cmd: cmd, done: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			s.log.Write([]byte(sc.Text() + "\n"))
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1] + m[2]:
				default:
				}
			}
		}
		s.err = cmd.Wait()
		close(s.done)
	}()
	select {
	case s.Addr = <-found:
	case <-s.done:
		return s, fmt.Errorf("idserver exited before listening: %v\n%s", s.err, s.Log())
	case <-time.After(20 * time.Second):
		return s, fmt.Errorf("idserver did not listen within 20s\n%s", s.Log())
	}
	host, port, _ := net.SplitHostPort(s.Addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		s.Addr = net.JoinHostPort("127.0.0.1", port) // bound to every interface: reached on loopback only
	}
	s.Port = port
	ready := cfg.Ready
	if ready == nil {
		ready = []any{"PING"}
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, TLSConfig: cfg.TLS, Password: flagValue(cfg.Args, "--requirepass")})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := rdb.Do(context.Background(), ready...).Err(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			return s, fmt.Errorf("no reply to %v from %s within 10s: %v", ready, s.Addr, err)
		}
	}
}

// flagValue is the value after name in args, or "".
func flagValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// Log is what the server has written to its standard error so far.
func (s *Server) Log() string { return s.log.String() }

// Done is closed once the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err waits for the process to exit and returns what Wait returned (nil
// for exit status 0).
func (s *Server) Err() error {
	<-s.done
	return s.err
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
// It does nothing to a process that has exited.
func (s *Server) Kill() {
	select {
	case <-s.done:
	default:
		s.Cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
}

// Stop sends SIGTERM and waits up to timeout for an exit with status 0.
func (s *Server) Stop(timeout time.Duration) error {
	s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(timeout):
		return fmt.Errorf("no exit within %v of SIGTERM", timeout)
	}
	if s.err != nil {
		return fmt.Errorf("exit after SIGTERM: %w", s.err)
	}
	return nil
}
