// Package peers holds what the benchmarks of bench and bench/engine share:
// the in-process ID generators idserver is measured beside
// (github.com/bwmarrin/snowflake and github.com/sony/sonyflake/v2) and Run,
// the loop that measures a list of generators. Each generator takes wide:
// false for its default layout, true for 16 sequence bits.
package peers

import (
	"syscall"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake/v2"
)

// Snowflake is bwmarrin/snowflake's node 1: 10 node and 12 step bits, or 6
// and 16 when wide.
var Snowflake = Generator{Name: "bwmarrin-snowflake", Make: newSnowflake}

// Sonyflake is sonyflake's generator for machine 1: its default of 10 ms
// ticks and 8 sequence bits (25,600 IDs/s), or 16 sequence bits and 8
// machine bits when wide.
var Sonyflake = Generator{Name: "sonyflake-v2", Make: newSonyflake}

func newSnowflake(b *testing.B, wide bool) func() (int64, error) {
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
}

func newSonyflake(b *testing.B, wide bool) func() (int64, error) {
	st := sonyflake.Settings{MachineID: func() (int, error) { return 1, nil }}
	if wide {
		st.BitsSequence, st.BitsMachineID = 16, 8
	}
	sf, err := sonyflake.New(st)
	if err != nil {
		b.Fatal(err)
	}
	return sf.NextID
}

// Generator is one way of getting an ID.
type Generator struct {
	Name string
	// Make returns the function that gets one ID; wide asks for the
	// 16-sequence-bit layout.
	Make func(b *testing.B, wide bool) func() (int64, error)
}

// Run measures each generator in the Default and the Wide layout, Single
// (one goroutine) and Parallel (b.RunParallel, GOMAXPROCS goroutines), as
// sub-benchmarks named Layout/Single|Parallel/Name: one op is one ID, so
// ns/op is ns per ID and allocs/op allocations per ID. cpu-ns/op is the
// process's CPU time (user + system, all threads) per ID: on a machine
// shared with other work it counts only what the generator spent, where
// ns/op also counts the time the benchmark waited for a CPU. A generator
// that sleeps when a millisecond's sequence is used up spends no CPU
// then, one that spins does, so in the Default layout the two differ.
func Run(b *testing.B, gens []Generator) {
	for _, layout := range []string{"Default", "Wide"} {
		for _, g := range gens {
			b.Run(layout+"/Single/"+g.Name, func(b *testing.B) {
				next := g.Make(b, layout == "Wide")
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				for b.Loop() {
					if _, err := next(); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu)
			})
			b.Run(layout+"/Parallel/"+g.Name, func(b *testing.B) {
				next := g.Make(b, layout == "Wide")
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := next(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				reportCPU(b, cpu)
			})
		}
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time since start per op as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}
