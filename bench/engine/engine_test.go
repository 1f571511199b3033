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
	"math"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake/v2"

	"idserver/engine"
)

// memHighWater is the high-water store in memory: the engine's background
// step writes it, never the hot path.
type memHighWater struct {
	mu sync.Mutex
	ms int64
}

func (m *memHighWater) HighWater() (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ms, nil
}

func (m *memHighWater) SetHighWaterSync(ms int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ms = ms
	return nil
}

// generator makes one ID generator; wide: 16 sequence bits instead of 12.
type generator struct {
	name string
	make func(b *testing.B, wide bool) func() (int64, error)
}

var generators = []generator{
	{"idserver-engine", func(b *testing.B, wide bool) func() (int64, error) {
		layout := engine.DefaultLayout()
		if wide {
			layout.WorkerBits, layout.SeqBits = 6, 16
		}
		// No borrowing: a benchmark of a second or two would otherwise
		// run up to a second ahead of the clock and beat the layout's
		// ceiling, which no sustained load can.
		gen, err := engine.New(engine.Config{Layout: layout, Worker: 1, MaxBorrow: 0, LeaseEndMS: math.MaxInt64}, time.Now, &memHighWater{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { gen.Close() })
		return gen.NextID
	}},
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

// BenchmarkEngine: one op is one ID. Default is each generator's default
// layout (idserver and bwmarrin: 4096 IDs per ms, so at best 244 ns per
// ID; sonyflake: 256 per 10 ms), Wide 16 sequence bits, where the
// generator's own cost shows. Single is one goroutine, Parallel
// b.RunParallel.
func BenchmarkEngine(b *testing.B) {
	for _, layout := range []string{"Default", "Wide"} {
		for _, g := range generators {
			b.Run(layout+"/Single/"+g.name, func(b *testing.B) {
				next := g.make(b, layout == "Wide")
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := next(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(layout+"/Parallel/"+g.name, func(b *testing.B) {
				next := g.make(b, layout == "Wide")
				b.ReportAllocs()
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

// TestEngineIsUniqueAndIncreasing keeps the benchmark honest: the
// generator it measures hands out strictly increasing IDs.
func TestEngineIsUniqueAndIncreasing(t *testing.T) {
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 1, LeaseEndMS: math.MaxInt64}, time.Now, &memHighWater{})
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
