package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/bench/internal/peers"
	idclient "idserver/client"
	"idserver/internal/testproc"
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
	binary, remove, err := testproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	for _, srv := range []struct {
		addr *string
		args []string
	}{{&defaultAddr, nil}, {&wideAddr, wideLayout}} {
		s, err := testproc.Launch(testproc.Config{Binary: binary, Dir: filepath.Join(filepath.Dir(binary), fmt.Sprint(len(srv.args))), Args: srv.args, Ready: []any{"NEXTID"}})
		if s != nil {
			defer func() {
				s.Stop(20 * time.Second)
				s.Kill()
			}()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "idserver %v: %v\n", srv.args, err)
			return 1
		}
		*srv.addr = s.Addr
	}
	return m.Run()
}

func serverAddr(wide bool) string {
	if wide {
		return wideAddr
	}
	return defaultAddr
}

func clientLevel(name string, buf idclient.Buffer) peers.Generator {
	return peers.Generator{Name: name, Make: func(b *testing.B, wide bool) func() (int64, error) {
		c, err := idclient.New(idclient.Options{Addrs: []string{serverAddr(wide)}, Buffer: buf})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		ctx := context.Background()
		return func() (int64, error) { return c.Next(ctx) }
	}}
}

// geneLevel is the full client's gene IDs (Gene) for buyers "0".."buyers-1"
// in turn: one buyer is one gene, which gets 2^(seq-bits - gene-bits) IDs
// per ms on a node (16 by default, 256 wide), so the server's per-gene
// capacity shows; 256 buyers cover every gene of the 8 gene bits, so the
// client's own cost per gene ID shows, beside its cost per snowflake ID.
func geneLevel(name string, buyers int, buf idclient.Buffer) peers.Generator {
	return peers.Generator{Name: name, Make: func(b *testing.B, wide bool) func() (int64, error) {
		c, err := idclient.New(idclient.Options{Addrs: []string{serverAddr(wide)}, Buffer: buf})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		ctx := context.Background()
		names := make([]string, buyers)
		for i := range names {
			names[i] = strconv.Itoa(i)
		}
		var turn atomic.Uint64
		return func() (int64, error) { return c.Gene(ctx, names[turn.Add(1)%uint64(buyers)]) }
	}}
}

var generators = []peers.Generator{
	{Name: "raw-NEXTID", Make: func(b *testing.B, wide bool) func() (int64, error) {
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
	// Gene IDs through the full client: GENEIDRUNS runs, and GENEID lists.
	geneLevel("client-gene-runs-1-buyer", 1, idclient.Buffer{}),
	geneLevel("client-gene-runs-256-buyers", 256, idclient.Buffer{}),
	geneLevel("client-gene-GENEID-lists-256-buyers", 256, idclient.Buffer{NoRuns: true}),
	peers.Snowflake,
	peers.Sonyflake,
}

// BenchmarkNextID: one op is one ID, so ns/op is ns per ID and allocs/op
// allocations per ID. Single is one goroutine; Parallel is b.RunParallel
// (GOMAXPROCS goroutines). Default is the default layout (4096 IDs per ms
// and node, for idserver and bwmarrin alike), Wide 16 sequence bits.
func BenchmarkNextID(b *testing.B) {
	peers.Run(b, generators)
}
