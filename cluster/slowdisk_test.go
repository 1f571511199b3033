package cluster

import (
	"testing"
	"time"
)

// TestDiskWatch drives the slow-disk accounting with a fake clock: a sync
// past the threshold is counted once (while it runs or when it ends), the
// WARN line is rate-limited, and two slow syncs make a slow disk.
func TestDiskWatch(t *testing.T) {
	now := time.Unix(1000, 0)
	w := newDiskWatch(time.Second, func() time.Time { return now })
	step := func(d time.Duration) { now = now.Add(d) }

	done := w.begin("a write of the Raft log")
	step(100 * time.Millisecond)
	done()
	if _, logIt, slow := w.check(); logIt || slow {
		t.Fatalf("a 100ms sync: logged %v, slow disk %v", logIt, slow)
	}

	done = w.begin("a write of the Raft log")
	step(1500 * time.Millisecond)
	s, logIt, slow := w.check()
	if !logIt || !s.running || s.took != 1500*time.Millisecond || s.count != 1 || slow {
		t.Fatalf("a sync running 1.5s: %+v logged %v slow disk %v, want it logged as running, one slow sync, no slow disk yet", s, logIt, slow)
	}
	step(500 * time.Millisecond)
	done() // counted already, while it ran
	if st := w.status(); st.SlowSyncs != 1 || st.SyncSeconds != 2 {
		t.Fatalf("after the 2s sync: %+v, want 1 slow sync, longest 2s", st)
	}

	done = w.begin("a synced write of Pebble")
	step(1200 * time.Millisecond)
	done()
	s, logIt, slow = w.check()
	if logIt {
		t.Errorf("logged again %v after the last line, want at most one line per %v", 1700*time.Millisecond, slowDiskLogEvery)
	}
	if !slow {
		t.Errorf("two slow syncs within %v: not a slow disk", slowDiskWindow)
	}
	w.handedOff()
	if _, _, slow = w.check(); slow {
		t.Errorf("slow disk still reported after a handoff")
	}
	step(slowDiskLogEvery)
	if s, logIt, _ = w.check(); !logIt || s.count != 1 {
		t.Errorf("after %v: %+v logged %v, want the one unlogged slow sync logged", slowDiskLogEvery, s, logIt)
	}
	step(latencySpan)
	if st := w.status(); st.SyncSeconds != 0 || st.SlowSyncs != 2 || st.Handoffs != 1 {
		t.Errorf("after %v quiet: %+v, want no recent sync, 2 slow syncs, 1 handoff", latencySpan, st)
	}
}
