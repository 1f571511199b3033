package idclient

// Real idserver processes on 127.0.0.1 for the tests, as
// cmd/idserver/process_test.go starts them.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runUniqueHelper())
	}
	dir, err := os.MkdirTemp("", "idclient-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "idserver")
	build := exec.Command("go", "build", "-o", binary, "../cmd/idserver")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building idserver:", err)
		os.Exit(1)
	}
	code := 1
	if stop, err := exampleServer(dir); err != nil {
		fmt.Fprintln(os.Stderr, "starting idserver for the example:", err)
	} else {
		code = m.Run()
		stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// exampleServer starts the idserver process Example uses, at IDSERVER_ADDR.
func exampleServer(dir string) (stop func(), err error) {
	if os.Getenv("IDSERVER_ADDR") != "" {
		return func() {}, nil
	}
	cmd := exec.Command(binary, "--port", "0", "--dir", filepath.Join(dir, "example"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr := <-found:
		os.Setenv("IDSERVER_ADDR", addr)
	case <-time.After(20 * time.Second):
		stop()
		return nil, fmt.Errorf("no listening line within 20s")
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("IDSERVER_ADDR"), MaxRetries: -1})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := rdb.Do(context.Background(), "NEXTID").Err(); err == nil {
			return stop, nil
		} else if time.Now().After(deadline) {
			stop()
			return nil, err
		}
	}
}

// server is one idserver process.
type server struct {
	t    *testing.T
	dir  string
	args []string
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServer starts idserver on dir (a new one when empty) with --port 0
// unless args name a port, waits for PING, and kills it when the test ends.
func startServer(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s := &server{t: t, dir: dir, args: args}
	s.start()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("server log (%s):\n%s", s.addr, s.log.String())
			s.mu.Unlock()
		}
	})
	return s
}

func (s *server) start() {
	t := s.t
	t.Helper()
	args := append([]string{"--dir", s.dir}, s.args...)
	if !strings.Contains(strings.Join(s.args, " "), "--port") {
		args = append(args, "--port", "0")
	}
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	found := make(chan string, 1)
	done := s.done
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		close(done)
	}()
	select {
	case s.addr = <-found:
	case <-done:
		t.Fatalf("idserver exited before listening:\n%s", s.log.String())
	case <-time.After(20 * time.Second):
		t.Fatal("idserver did not listen within 20s")
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, Password: flagValue(s.args, "--requirepass"), TLSConfig: tlsFor(s.args)})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := rdb.Do(context.Background(), "NEXTID").Err(); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("no NEXTID from %s: %v", s.addr, err)
		}
	}
}

// kill ends the process with SIGKILL, as a crash would.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func flagValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// serverTLS is the client TLS config for servers started with --tls-cert.
var serverTLS *tls.Config

func tlsFor(args []string) *tls.Config {
	if flagValue(args, "--tls-cert") != "" {
		return serverTLS
	}
	return nil
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startCluster starts n processes, the first bootstrapping and the others
// joining it (each with the extra flags), and returns them once each has
// issued a NEXTID.
func startCluster(t *testing.T, n int, extra ...string) []*server {
	t.Helper()
	var nodes []*server
	for i := range n {
		args := append([]string{"--port", freePort(t), "--raft-addr", "127.0.0.1:" + freePort(t)}, extra...)
		if i > 0 {
			args = append(args, "--join", nodes[0].addr)
		}
		nodes = append(nodes, startServer(t, "", args...))
	}
	return nodes
}

func addrsOf(nodes []*server) []string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	return addrs
}

// commandCalls reads cmdstat_<cmd> calls from INFO commandstats: what the
// server counted, not what the client thinks it sent.
func commandCalls(t *testing.T, addr, cmd string) int64 {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
