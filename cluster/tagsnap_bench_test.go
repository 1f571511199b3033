package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkSnapshotOfAMillionTags writes a Raft snapshot of 1,000,000
// tags, each allocated to a node, and restores it into an empty store,
// reporting the seconds of each, the snapshot's bytes, and the most heap
// in use above the start while each ran.
//
//	go test -run XXX -bench SnapshotOfAMillionTags -benchtime 1x ./cluster/
func BenchmarkSnapshotOfAMillionTags(b *testing.B) {
	const n = 1_000_000
	f, _ := newFSM(openStore(b), 3)
	f.meta.MaxTags = -1
	idx := uint64(0)
	for i := 0; i < n; i += 1000 {
		e := newEntry(entryAllocBy).uvarint(1000)
		for j := i; j < i+1000; j++ {
			e = e.string(fmt.Sprintf("tag:%07d", j)).varint(1000).string("n1").uvarint(5)
		}
		idx++
		f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: e})
	}
	for b.Loop() {
		file, err := os.CreateTemp(b.TempDir(), "snapshot")
		if err != nil {
			b.Fatal(err)
		}
		snap, _ := f.Snapshot()
		persist := peakHeap(func() {
			w := bufio.NewWriterSize(file, 256<<10)
			if err := writeState(w, snap.(*fsmSnapshot).snap); err != nil {
				b.Fatal(err)
			}
			w.Flush()
		})
		snap.Release()
		size, _ := file.Seek(0, io.SeekCurrent)
		file.Seek(0, io.SeekStart)
		g, _ := newFSM(openStore(b), 3)
		restore := peakHeap(func() {
			if err := g.Restore(file); err != nil {
				b.Fatal(err)
			}
		})
		if g.size() != n {
			b.Fatalf("restored %d tags", g.size())
		}
		b.ReportMetric(persist.took.Seconds(), "persist-s")
		b.ReportMetric(float64(persist.peak)/(1<<20), "persist-heap-MiB")
		b.ReportMetric(restore.took.Seconds(), "restore-s")
		b.ReportMetric(float64(restore.peak)/(1<<20), "restore-heap-MiB")
		b.ReportMetric(float64(size)/n, "snapshot-B/tag")
	}
}

type heapRun struct {
	took time.Duration
	peak uint64
}

// peakHeap runs fn and samples the heap in use every 5 ms.
func peakHeap(fn func()) heapRun {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
					peak.Store(ms.HeapInuse - base)
				}
			}
		}
	}()
	start := time.Now()
	fn()
	took := time.Since(start)
	close(done)
	return heapRun{took: took, peak: peak.Load()}
}
