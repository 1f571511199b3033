// Package systest is what the real-process test packages under systest/
// share: the idserver binary built once per package (Main), processes
// started on ports from testproc.FreePort and stopped by their handle
// (Proc), clusters of them joined with --join (Member), and the readers of
// their replies and metrics.
package systest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
)

var binary string

// Main is a test package's TestMain: it builds idserver once for the
// package's tests, runs them and removes the binary. Under -short it runs
// nothing: every test of these packages starts real processes (Long), and
// some start them from goroutines, where a skip would not end the test.
func Main(m *testing.M) { runMain(m, false) }

// MainShort is Main for a package that also holds tests that start no
// process: under -short it runs the tests without building the binary,
// and those that start one skip (Binary, Start).
func MainShort(m *testing.M) { runMain(m, true) }

func runMain(m *testing.M, unitsInShort bool) {
	flag.Parse()
	if testing.Short() {
		if unitsInShort {
			os.Exit(m.Run())
		}
		fmt.Println("real-process tests: not in -short")
		os.Exit(0)
	}
	bin, remove, err := testproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	remove()
	os.Exit(code)
}

// Binary is the idserver binary Main built; under -short it skips the
// test, as Start does.
func Binary(t testing.TB) string {
	t.Helper()
	testproc.Long(t)
	return binary
}

// FreePort is testproc.FreePort as a flag value, for --port: the default
// Raft port 10000 above it is reserved with it.
func FreePort(t testing.TB) string {
	t.Helper()
	return strconv.Itoa(testproc.FreePort(t))
}

// FreeAddr is 127.0.0.1 with a port from testproc.FreePort, for a flag
// such as --raft-addr.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + FreePort(t)
}

// Proc is one idserver process of a test.
type Proc struct {
	*testproc.Server
	t testing.TB
}

// StartProc starts idserver on a free port with dir, waits until it
// answers PING, and stops it (SIGKILL) when the test ends if it still runs.
func StartProc(t *testing.T, dir string, args ...string) *Proc {
	t.Helper()
	p, err := Launch(t, dir, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Launch is StartProc with env added to the environment, returning the
// process (if it started) with the error when it did not become ready.
func Launch(t testing.TB, dir string, env []string, args ...string) (*Proc, error) {
	t.Helper()
	return StartConfig(t, testproc.Config{Binary: binary, Dir: dir, Args: args, Env: env})
}

// LaunchTLS starts idserver and waits for it to answer PING over TLS.
func LaunchTLS(t *testing.T, dir string, pool *x509.CertPool, args ...string) (*Proc, error) {
	t.Helper()
	return StartConfig(t, testproc.Config{Binary: binary, Dir: dir, Args: args, TLS: &tls.Config{RootCAs: pool}})
}

// StartConfig starts idserver as cfg says, for the length of the test;
// cfg.Binary is the package's binary when empty.
func StartConfig(t testing.TB, cfg testproc.Config) (*Proc, error) {
	t.Helper()
	if cfg.Binary == "" {
		cfg.Binary = binary
	}
	s, err := testproc.Start(t, cfg)
	if s == nil {
		return nil, err
	}
	return &Proc{s, t}, err
}

// Shutdown sends SIGTERM and fails the test unless the process exits 0
// within 20 s.
func (p *Proc) Shutdown() {
	p.t.Helper()
	if err := p.Stop(20 * time.Second); err != nil {
		p.t.Fatal(err)
	}
}

// Client is a go-redis client of the process, closed when the test ends.
func (p *Proc) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	p.t.Cleanup(func() { c.Close() })
	return c
}

// RunToExit runs the binary to its end and returns its exit code and
// output.
func RunToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return RunToExitEnv(t, nil, args...)
}

// RunToExitEnv is RunToExit with env added to the environment.
func RunToExitEnv(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	default:
		t.Fatal(err)
		return -1, ""
	}
}

// WaitExit waits for a process that must refuse to start, and returns its
// log.
func WaitExit(t *testing.T, p *Proc, err error) string {
	t.Helper()
	if err == nil {
		t.Fatalf("the node started and serves at %s; it must refuse", p.Addr)
	}
	select {
	case <-p.Done():
	case <-time.After(90 * time.Second):
		t.Fatal("a refused node did not exit")
	}
	if p.Err() == nil {
		t.Fatalf("a refused node exited 0:\n%s", p.Log())
	}
	return p.Log()
}

// Member is one node of a process cluster, with fixed ports so that a
// restart keeps its addresses.
type Member struct {
	Dir, Port, Raft string
	Join            string // the address given to --join, "" for the first
	P               *Proc  // the running process, after Start
}

// Start starts the member on its ports, joining Join if set.
func (m *Member) Start(t *testing.T) {
	t.Helper()
	args := []string{"--port", m.Port, "--raft-addr", "127.0.0.1:" + m.Raft}
	if m.Join != "" {
		args = append(args, "--join", m.Join)
	}
	p, err := Launch(t, m.Dir, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	m.P = p
}

// StartMembers starts n processes on fixed ports, the first bootstrapping
// and the others joining it with --join.
func StartMembers(t *testing.T, n int) []*Member {
	t.Helper()
	members := make([]*Member, n)
	for i := range members {
		members[i] = &Member{Dir: t.TempDir(), Port: strconv.Itoa(testproc.FreePort(t)), Raft: strconv.Itoa(testproc.FreePort(t))}
		if i > 0 {
			members[i].Join = "127.0.0.1:" + members[0].Port
		}
		members[i].Start(t)
	}
	return members
}

// ClusterInfo is CLUSTER INFO's reply as a map, nil when the command
// fails.
func ClusterInfo(t testing.TB, rdb *redis.Client) map[string]string {
	t.Helper()
	text, err := rdb.Do(context.Background(), "CLUSTER", "INFO").Text()
	if err != nil {
		return nil
	}
	info := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info
}

// UntilServed retries cmd while the node answers TRYAGAIN or LOADING (it
// is starting, or its cluster has not stored the public-ID key yet).
func UntilServed(t *testing.T, rdb *redis.Client, args ...any) *redis.Cmd {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c := rdb.Do(context.Background(), args...)
		err := c.Err()
		if err == nil || time.Now().After(deadline) || !(strings.HasPrefix(err.Error(), "TRYAGAIN") || strings.HasPrefix(err.Error(), "LOADING")) {
			return c
		}
	}
}

// CollectIDs runs NEXTID 100 on each client from several connections for
// a while and fails the test on a repeat across all of them.
func CollectIDs(t *testing.T, d time.Duration, clients ...*redis.Client) int {
	t.Helper()
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for ci, c := range clients {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					ids, err := c.Do(context.Background(), "NEXTID", 100).Int64Slice()
					if err != nil {
						t.Errorf("client %d: %v", ci, err)
						return
					}
					mu.Lock()
					for _, id := range ids {
						if other, dup := seen[id]; dup {
							t.Errorf("ID %d issued by node %d and node %d", id, other, ci)
						}
						seen[id] = ci
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return len(seen)
}

// Scrape is the body of a GET of url, which must answer 200.
func Scrape(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, res.StatusCode, body)
	}
	return string(body)
}

// MetricValue finds one sample in a scrape, e.g.
// idserver_commands_total{command="nextid"}; 0 when it is absent.
func MetricValue(t *testing.T, text, sample string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// Spread is "median (min-max)" of ds, in milliseconds.
func Spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return fmt.Sprintf("%d (%d-%d)", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]))
}

// StartExporter starts prometheus-redis-exporter (the program at path)
// scraping the idserver at addr and returns the host:port of its
// /metrics. The exporter is killed when the test ends, its output logged
// if the test failed.
func StartExporter(t testing.TB, path, addr string) string {
	t.Helper()
	web := FreeAddr(t)
	testproc.StartLogged(t, exec.Command(path, "-redis.addr", "redis://"+addr, "-web.listen-address", web), "exporter output")
	return web
}
