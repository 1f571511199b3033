package idclient

// Real idserver processes on 127.0.0.1 for the tests, started by
// internal/testproc.

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runUniqueHelper())
	}
	flag.Parse()
	if testing.Short() {
		// Every test that starts a server skips (testproc.Start), and so
		// does Example, which reads from the one started below.
		skip := "^Example$"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		flag.Set("test.skip", skip)
		os.Exit(m.Run())
	}
	bin, remove, err := testproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := 1
	if stop, err := exampleServer(filepath.Dir(bin)); err != nil {
		fmt.Fprintln(os.Stderr, "starting idserver for the example:", err)
	} else {
		code = m.Run()
		stop()
	}
	remove()
	os.Exit(code)
}

// exampleServer starts the idserver process Example uses, at IDSERVER_ADDR.
func exampleServer(dir string) (stop func(), err error) {
	if os.Getenv("IDSERVER_ADDR") != "" {
		return func() {}, nil
	}
	s, err := testproc.Launch(testproc.Config{Binary: binary, Dir: filepath.Join(dir, "example"), Ready: []any{"NEXTID"}})
	if err != nil {
		if s != nil {
			s.Kill()
		}
		return nil, err
	}
	os.Setenv("IDSERVER_ADDR", s.Addr)
	return func() {
		s.Stop(20 * time.Second)
		s.Kill()
	}, nil
}

// server is one idserver process of a test, which start restarts on the
// same directory with the same flags.
type server struct {
	*testproc.Server
	t   *testing.T
	cfg testproc.Config
}

// serverTLS is the client TLS config for servers started with --tls-cert.
var serverTLS *tls.Config

// startServer starts idserver on dir (a new one when empty) with --port 0
// unless args name a port, waits until it issues a NEXTID, and kills it
// when the test ends.
func startServer(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := testproc.Config{Binary: binary, Dir: dir, Args: args, Ready: []any{"NEXTID"}}
	if slices.Contains(args, "--tls-cert") {
		cfg.TLS = serverTLS
	}
	s := &server{t: t, cfg: cfg}
	s.start()
	return s
}

func (s *server) start() {
	s.t.Helper()
	srv, err := testproc.Start(s.t, s.cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.Server = srv
}

// freePort is testproc.FreePort as a flag value.
func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(testproc.FreePort(t))
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
			args = append(args, "--join", nodes[0].Addr)
		}
		nodes = append(nodes, startServer(t, "", args...))
	}
	return nodes
}

func addrsOf(nodes []*server) []string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
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
