package compat

// Restart to first ID, per client library: each library's client, created
// before the restart and left to reconnect as it does in production, against
// a one-node cluster killed with SIGKILL and restarted on its directory, a
// member of three restarted inside its worker lease, and Redis's
// redis-server on an empty directory beside them. The test asserts that
// every client gets its IDs back; the times are logged, not asserted.
// IDSERVER_RESTARTS=5 restarts each server five times per library (default 1).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// restartable is a server process started, killed and started again with
// the same arguments.
type restartable struct {
	t    *testing.T
	path string
	args []string
	addr string
	cmd  *exec.Cmd
}

// start execs the process and returns when it did.
func (r *restartable) start() time.Time {
	r.cmd = exec.Command(r.path, r.args...)
	began := time.Now()
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	return began
}

func (r *restartable) kill() {
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
}

// waitPong polls PING over raw connections until the server answers +PONG.
func (r *restartable) waitPong() {
	wait.For(r.t, 20*time.Second, fmt.Sprintf("%s %v: PONG", r.path, r.args), func() (bool, string) {
		conn, err := net.DialTimeout("tcp", r.addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.SetDeadline(time.Now().Add(time.Second))
		io.WriteString(conn, "PING\r\n")
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		return strings.HasPrefix(line, "+PONG"), line
	})
}

// restartProbe is one client library: run retries NEXTID (when nextid is
// set) and then INCR every 5 ms until each succeeds, and returns when.
type restartProbe interface {
	run(nextid bool) (nextidAt, incrAt time.Time, err error)
	close()
}

// goProbe is a Go library's client, do sending one command.
type goProbe struct {
	do   func(ctx context.Context, args ...string) error
	stop func()
}

func (p goProbe) first(args ...string) (time.Time, error) {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.do(ctx, args...)
		cancel()
		if err == nil {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%v: %w", args, err)
		}
	}
}

func (p goProbe) close() { p.stop() }

func (p goProbe) run(nextid bool) (n, i time.Time, err error) {
	if nextid {
		if n, err = p.first("NEXTID"); err != nil {
			return
		}
	}
	i, err = p.first("INCR", "restart")
	return
}

// procProbe is a client in another language: clients/restart_probe.*.
type procProbe struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startProcProbe(t *testing.T, cmd *exec.Cmd) *procProbe {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &procProbe{cmd: cmd, stdin: stdin, lines: make(chan string, 4)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	if line, err := p.line(); err != nil || line != "ready" {
		p.close()
		t.Fatalf("%v: %q %v", cmd.Args, line, err)
	}
	return p
}

func (p *procProbe) line() (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("the probe exited")
		}
		return line, nil
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("no answer within 30 s")
	}
}

func (p *procProbe) at(word string) (time.Time, error) {
	line, err := p.line()
	if err != nil {
		return time.Time{}, err
	}
	ms, err := strconv.ParseFloat(strings.TrimPrefix(line, word+" "), 64)
	if err != nil || !strings.HasPrefix(line, word+" ") {
		return time.Time{}, fmt.Errorf("probe said %q, want %s", line, word)
	}
	return time.UnixMicro(int64(ms * 1000)), nil
}

func (p *procProbe) run(nextid bool) (n, i time.Time, err error) {
	mode := "incr\n"
	if nextid {
		mode = "both\n"
	}
	io.WriteString(p.stdin, mode)
	if nextid {
		if n, err = p.at("nextid"); err != nil {
			return
		}
	}
	i, err = p.at("incr")
	return
}

func (p *procProbe) close() {
	p.stdin.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// clientLibs are the libraries timed, each a constructor of a probe on addr
// (nil when the library is not installed, with what to install).
func clientLibs(t *testing.T) (names []string, probes map[string]func(addr string) restartProbe, missing map[string]string) {
	probes = map[string]func(string) restartProbe{}
	missing = map[string]string{}
	names = []string{"go-redis", "rueidis", "redis-py", "ioredis", "node-redis"}
	probes["go-redis"] = func(addr string) restartProbe {
		c := redis.NewClient(&redis.Options{Addr: addr})
		return goProbe{
			do: func(ctx context.Context, args ...string) error {
				a := make([]any, len(args))
				for i := range args {
					a[i] = args[i]
				}
				return c.Do(ctx, a...).Err()
			},
			stop: func() { c.Close() }}
	}
	probes["rueidis"] = func(addr string) restartProbe {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatalf("rueidis: %v", err)
		}
		return goProbe{
			do: func(ctx context.Context, args ...string) error {
				return c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build()).Error()
			},
			stop: c.Close}
	}
	if python, why := testproc.PythonRedis(); python != "" {
		probes["redis-py"] = func(addr string) restartProbe {
			host, port, _ := net.SplitHostPort(addr)
			return startProcProbe(t, exec.Command(python, filepath.Join(repoRoot(t), "clients", "restart_probe.py"), host, port))
		}
	} else {
		missing["redis-py"] = why
	}
	node, modules, why := testproc.NodeModules("ioredis", "redis")
	for _, lib := range []string{"ioredis", "node-redis"} {
		if node == "" {
			missing[lib] = why
			continue
		}
		probes[lib] = func(addr string) restartProbe {
			host, port, _ := net.SplitHostPort(addr)
			cmd := exec.Command(node, filepath.Join(repoRoot(t), "clients", "restart_probe.js"), lib, host, port)
			cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
			return startProcProbe(t, cmd)
		}
	}
	return names, probes, missing
}

// skipPart reports a part of t that cannot run here as a skipped subtest
// named part, saying why, and lets the rest of t run.
func skipPart(t *testing.T, part, why string) {
	t.Run(part, func(t *testing.T) { t.Skip(why) })
}

func TestRestartFirstIDPerClient(t *testing.T) {
	restarts := 1
	if n, err := strconv.Atoi(os.Getenv("IDSERVER_RESTARTS")); err == nil && n > 0 {
		restarts = n
	}
	redisServer, redisMissing := testproc.Find("redis-server")
	names, probes, missing := clientLibs(t)

	oneNode := func() *restartable {
		port := strconv.Itoa(testproc.FreePort(t))
		return &restartable{t: t, path: systest.Binary(t), addr: "127.0.0.1:" + port, args: []string{"--port", port, "--dir", t.TempDir()}}
	}
	member := func() *restartable {
		ms := systest.StartMembers(t, 3)
		m := ms[2]
		m.P.Cmd.Process.Signal(syscall.SIGKILL)
		m.P.Err()
		return &restartable{t: t, path: systest.Binary(t), addr: "127.0.0.1:" + m.Port,
			args: []string{"--port", m.Port, "--dir", m.Dir, "--raft-addr", "127.0.0.1:" + m.Raft, "--join", m.Join}}
	}
	redisSrv := func() *restartable {
		port := strconv.Itoa(testproc.FreePort(t))
		return &restartable{t: t, path: redisServer, addr: "127.0.0.1:" + port,
			args: []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir()}}
	}
	var table []string
	for _, sc := range []struct {
		name   string
		server func() *restartable
		nextid bool
	}{{"one-node", oneNode, true}, {"member of 3", member, true}, {"redis-server", redisSrv, false}} {
		if sc.name == "redis-server" && redisServer == "" {
			skipPart(t, sc.name, redisMissing)
			continue
		}
		srv := sc.server()
		srv.start()
		t.Cleanup(srv.kill)
		srv.waitPong()
		for _, lib := range names {
			if why, ok := missing[lib]; ok {
				skipPart(t, sc.name+"/"+lib, why)
				continue
			}
			p := probes[lib](srv.addr)
			var nextids, incrs []time.Duration
			for range restarts {
				srv.kill()
				began := srv.start()
				n, i, err := p.run(sc.nextid)
				if err != nil {
					p.close()
					t.Fatalf("%s, %s after a restart: %v", sc.name, lib, err)
				}
				if sc.nextid {
					nextids = append(nextids, n.Sub(began))
				}
				incrs = append(incrs, i.Sub(began))
			}
			p.close()
			row := fmt.Sprintf("%-12s %-10s first INCR %s ms", sc.name, lib, systest.Spread(incrs))
			if sc.nextid {
				row = fmt.Sprintf("%-12s %-10s first NEXTID %s ms, first INCR %s ms", sc.name, lib, systest.Spread(nextids), systest.Spread(incrs))
			}
			table = append(table, row)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("process start to first reply, median (min-max) over %d restarts, load average %s\n%s",
		restarts, strings.Join(strings.Fields(string(load))[:3], " "), strings.Join(table, "\n"))
}
