// Package engine measures idserver's ID engine in process, with no server
// and no network, beside github.com/bwmarrin/snowflake and
// github.com/sony/sonyflake/v2 in the same go test -bench run:
//
//	cd bench && go test -bench . -benchmem -run '^$' ./engine
//
// It is its own package so that the parent's TestMain (which builds and
// starts idserver processes for the client benchmarks) does not run.
package engine

import (
	"context"
	"math"
	"testing"
	"time"

	"idserver/bench/internal/peers"
	"idserver/engine"
	"idserver/internal/memstore"
)

var generators = []peers.Generator{
	{Name: "idserver-engine", Make: func(b *testing.B, wide bool) func() (int64, error) {
		layout := engine.DefaultLayout()
		if wide {
			layout.WorkerBits, layout.SeqBits = 6, 16
		}
		// No borrowing: a benchmark of a second or two would otherwise
		// run up to a second ahead of the clock and beat the layout's
		// ceiling, which no sustained load can.
		// The machine's clocks, as a node passes them.
		gen, err := engine.New(engine.Config{Layout: layout, Worker: 1, MaxBorrow: 0, LeaseEndMS: math.MaxInt64,
			Monotonic: engine.MonotonicClock()}, time.Now, &memstore.HighWater{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { gen.Close() })
		// The background step that keeps the high-water ahead, as a node
		// runs it: the hot path never writes the store.
		ctx, stop := context.WithCancel(context.Background())
		b.Cleanup(stop)
		go gen.Run(ctx, nil)
		return gen.NextID
	}},
	peers.Snowflake,
	peers.Sonyflake,
}

// BenchmarkEngine: one op is one ID. Default is each generator's default
// layout (idserver and bwmarrin: 4096 IDs per ms, so at best 244 ns per
// ID; sonyflake: 256 per 10 ms), Wide 16 sequence bits, where the
// generator's own cost shows. Single is one goroutine, Parallel
// b.RunParallel.
func BenchmarkEngine(b *testing.B) {
	peers.Run(b, generators)
}

// TestEngineIsUniqueAndIncreasing keeps the benchmark honest: the
// generator it measures hands out strictly increasing IDs.
func TestEngineIsUniqueAndIncreasing(t *testing.T) {
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 1, LeaseEndMS: math.MaxInt64,
		Monotonic: engine.MonotonicClock()}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	var last int64
	for i := range 100000 {
		id, err := gen.NextID()
		if err != nil || id <= last {
			t.Fatalf("ID %d: %d after %d (%v)", i, id, last, err)
		}
		last = id
	}
}
