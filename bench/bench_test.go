package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/redis/go-redis/v9"
	"github.com/sony/sonyflake/v2"

	idclient "idserver/client"
)

// Two idserver processes, started by TestMain: one with the default
// layout (12 sequence bits: at most 4096 IDs per millisecond per node, the
// same bound as bwmarrin's default), one with 16 sequence bits (6 worker
// bits) so that the server's capacity does not hide the client's cost.
var (
	defaultAddr string
	wideAddr    string
)

// wideLayout are the flags of the second server.
var wideLayout = []string{"--time-bits", "41", "--worker-bits", "6", "--seq-bits", "16", "--gene-bits", "8"}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "idserver-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary := filepath.Join(dir, "idserver")
	// Built in the main module, whose go.sum has the server's dependencies.
	build := exec.Command("go", "build", "-o", binary, "./cmd/idserver")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building idserver:", err)
		return 1
	}
	for _, srv := range []struct {
		addr *string
		args []string
	}{{&defaultAddr, nil}, {&wideAddr, wideLayout}} {
		addr, stop, err := startServer(binary, filepath.Join(dir, fmt.Sprint(len(srv.args))), srv.args...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
		*srv.addr = addr
	}
	return m.Run()
}

// startServer starts idserver on 127.0.0.1 with --port 0 and waits until
// it issues a NEXTID.
func startServer(binary, dir string, args ...string) (addr string, stop func(), err error) {
	cmd := exec.Command(binary, append([]string{"--port", "0", "--dir", dir}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	found := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`msg=listening addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr = <-found:
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, fmt.Errorf("idserver %v did not listen within 20s", args)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); rdb.Do(context.Background(), "NEXTID").Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("idserver %v issues no NEXTID", args)
		}
	}
	return addr, stop, nil
}

// generator is one way of getting an ID.
type generator struct {
	name string
	// make returns the function that gets one ID; wide asks for the
	// 16-sequence-bit layout.
	make func(b *testing.B, wide bool) func() (int64, error)
}

func serverAddr(wide bool) string {
	if wide {
		return wideAddr
	}
	return defaultAddr
}

func clientLevel(name string, buf idclient.Buffer) generator {
	return generator{name, func(b *testing.B, wide bool) func() (int64, error) {
		c, err := idclient.New(idclient.Options{Addrs: []string{serverAddr(wide)}, Buffer: buf})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		ctx := context.Background()
		return func() (int64, error) { return c.Next(ctx) }
	}}
}

var generators = []generator{
	{"raw-NEXTID", func(b *testing.B, wide bool) func() (int64, error) {
		rdb := redis.NewClient(&redis.Options{Addr: serverAddr(wide)})
		b.Cleanup(func() { rdb.Close() })
		ctx := context.Background()
		return func() (int64, error) { return rdb.Do(ctx, "NEXTID").Int64() }
	}},
	clientLevel("client-1-per-request", idclient.Buffer{Batch: 1, FixedBatch: true, Prefetch: -1, NoSingleflight: true, Local: -1}),
	clientLevel("client-batch128", idclient.Buffer{Batch: 128, FixedBatch: true, Prefetch: -1, NoSingleflight: true, Local: -1}),
	clientLevel("client-+prefetch", idclient.Buffer{Batch: 128, FixedBatch: true, NoSingleflight: true, Local: -1}),
	clientLevel("client-+singleflight", idclient.Buffer{Batch: 128, FixedBatch: true, Local: -1}),
	clientLevel("client-+adaptive", idclient.Buffer{Batch: 128, Local: -1}),
	clientLevel("client-+per-P(full)", idclient.Buffer{}),
	// The full client on NEXTID n (an array of IDs) instead of NEXTIDRUNS n.
	clientLevel("client-full-NEXTID-lists", idclient.Buffer{NoRuns: true}),
	clientLevel("client-strict", idclient.Buffer{Strict: true}),
	{"bwmarrin-snowflake", func(b *testing.B, wide bool) func() (int64, error) {
		// NewNode reads the package's bit widths; restore them after.
		if wide {
			snowflake.NodeBits, snowflake.StepBits = 6, 16
			defer func() { snowflake.NodeBits, snowflake.StepBits = 10, 12 }()
		}
		node, err := snowflake.NewNode(1)
		if err != nil {
			b.Fatal(err)
		}
		return func() (int64, error) { return node.Generate().Int64(), nil }
	}},
	{"sonyflake-v2", func(b *testing.B, wide bool) func() (int64, error) {
		// Its default: 10 ms ticks, 8 sequence bits (25,600 IDs/s).
		st := sonyflake.Settings{MachineID: func() (int, error) { return 1, nil }}
		if wide {
			st.BitsSequence, st.BitsMachineID = 16, 8
		}
		sf, err := sonyflake.New(st)
		if err != nil {
			b.Fatal(err)
		}
		return sf.NextID
	}},
}

// BenchmarkNextID: one op is one ID, so ns/op is ns per ID and allocs/op
// allocations per ID. Single is one goroutine; Parallel is b.RunParallel
// (GOMAXPROCS goroutines). Default is the default layout (4096 IDs per ms
// and node, for idserver and bwmarrin alike), Wide 16 sequence bits.
func BenchmarkNextID(b *testing.B) {
	for _, layout := range []string{"Default", "Wide"} {
		for _, g := range generators {
			b.Run(layout+"/Single/"+g.name, func(b *testing.B) {
				next := g.make(b, layout == "Wide")
				b.ResetTimer()
				for b.Loop() {
					if _, err := next(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(layout+"/Parallel/"+g.name, func(b *testing.B) {
				next := g.make(b, layout == "Wide")
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := next(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
