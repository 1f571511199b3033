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
// in use above the start while each ran: in the JSON shape every build
// reads, and in the compact one.
//
//	go test -run XXX -bench SnapshotOfAMillionTags -benchtime 1x ./cluster/
func BenchmarkSnapshotOfAMillionTags(b *testing.B) {
	for _, format := range []struct {
		name   string
		format int
	}{{"json", tagFormatJSON}, {"compact", tagFormatCompact}} {
		b.Run(format.name, func(b *testing.B) { benchmarkSnapshot(b, format.format) })
	}
}

func benchmarkSnapshot(b *testing.B, format int) {
	const n = 1_000_000
	f, _ := newFSM(openStore(b), 3)
	f.meta.MaxTags = -1
	f.meta.TagFormat = format
	idx, names := uint64(0), 0
	for i := 0; i < n; i += 1000 {
		e := newEntry(entryAllocBy).uvarint(1000)
		for j := i; j < i+1000; j++ {
			tag := fmt.Sprintf("tag:%07d", j)
			names += len(tag)
			e = e.string(tag).varint(1000).string("0d3640a65f0ed973").uvarint(0x9e3779b97f4a7c15)
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
			if err := writeSnapshot(w, snap.(*fsmSnapshot).snap); err != nil {
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
		b.ReportMetric(float64(size-int64(names))/n, "above-name-B/tag")
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
