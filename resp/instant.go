package resp

import (
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// What INFO reports as Redis samples it: the instantaneous rates, the
// memory peak, the process's CPU and resident memory.

const (
	sampleEvery = 100 * time.Millisecond // Redis's serverCron at hz 10
	samples     = 16                     // Redis's STATS_METRIC_SAMPLES
)

// rateSampler is one instantaneous metric: the last samples of a
// counter's rate per second, of which INFO shows the mean, as Redis's
// trackInstantaneousMetric and getInstantaneousMetric do.
type rateSampler struct {
	lastAt    time.Time
	lastValue int64
	rates     [samples]float64
	next      int
}

func (r *rateSampler) add(now time.Time, value int64) {
	if !r.lastAt.IsZero() {
		if dt := now.Sub(r.lastAt); dt > 0 {
			r.rates[r.next] = float64(value-r.lastValue) / dt.Seconds()
			r.next = (r.next + 1) % samples
		}
	}
	r.lastAt, r.lastValue = now, value
}

func (r *rateSampler) mean() float64 {
	sum := 0.0
	for _, v := range r.rates {
		sum += v
	}
	return sum / samples
}

// instant holds the samples, taken every sampleEvery while Serve runs.
type instant struct {
	mu                       sync.Mutex
	ops, netInput, netOutput rateSampler
	peakMemory               atomic.Int64 // used_memory_peak
}

// sampleLoop samples until stop is closed.
func (s *Server) sampleLoop(stop <-chan struct{}) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

func (s *Server) sample(now time.Time) {
	in := &s.instant
	in.mu.Lock()
	in.ops.add(now, s.stats.commands.Load())
	in.netInput.add(now, s.stats.netInput.Load())
	in.netOutput.add(now, s.stats.netOutput.Load())
	in.mu.Unlock()
	s.usedMemory() // keeps the peak
}

// resetSamples is CONFIG RESETSTAT's part: the rates start again, and the
// peak is the memory used now.
func (s *Server) resetSamples() {
	in := &s.instant
	in.mu.Lock()
	in.ops, in.netInput, in.netOutput = rateSampler{}, rateSampler{}, rateSampler{}
	in.mu.Unlock()
	in.peakMemory.Store(0)
	s.usedMemory()
}

// instantaneous returns ops per second and input and output KiB per second.
func (s *Server) instantaneous() (ops, inKbps, outKbps float64) {
	in := &s.instant
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ops.mean(), in.netInput.mean() / 1024, in.netOutput.mean() / 1024
}

// usedMemory is the memory the Go runtime holds from the system (Redis's
// used_memory is its allocator's); it also raises the peak.
func (s *Server) usedMemory() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(sample)
	used := int64(0)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		used = int64(sample[0].Value.Uint64())
	}
	for {
		peak := s.instant.peakMemory.Load()
		if used <= peak || s.instant.peakMemory.CompareAndSwap(peak, used) {
			return used
		}
	}
}

// residentMemory is the process's resident set (used_memory_rss), from
// /proc/self/statm; 0 where there is none.
func residentMemory() int64 {
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := bytes.Fields(statm)
	if len(fields) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

func humanBytes(n int64) string { return fmt.Sprintf("%.2fM", float64(n)/(1<<20)) }

// infoCPU is Redis's # CPU: seconds of system and user time of the
// process and of its waited-for children, from getrusage.
func (s *Server) infoCPU() []string {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) string { return fmt.Sprintf("%d.%06d", t.Sec, t.Usec) }
	return []string{
		kv("used_cpu_sys", tv(self.Stime)),
		kv("used_cpu_user", tv(self.Utime)),
		kv("used_cpu_sys_children", tv(children.Stime)),
		kv("used_cpu_user_children", tv(children.Utime)),
	}
}
