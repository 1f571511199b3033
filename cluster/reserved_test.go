package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"idserver/engine"
)

// Reserved worker IDs are never given to a member: through 400 joins and
// forgets in a random order, fresh worker IDs among them, no member holds
// one; joins take the lowest unreserved free ID; worker_ids_free counts
// only unreserved ones; with every unreserved ID held, a join is refused
// and the refusal counts the reserved ones.
func TestFSMReservedWorkersNeverTaken(t *testing.T) {
	f, err := newFSM(openStore(t), 15)
	if err != nil {
		t.Fatal(err)
	}
	f.reserved, _ = engine.ParseWorkerRanges("0-3,7,12-15")
	usable := []int64{4, 5, 6, 8, 9, 10, 11}
	if got := f.freeWorkers(); got != int64(len(usable)) {
		t.Fatalf("free workers of an empty cluster: %d, want %d", got, len(usable))
	}
	idx, now := uint64(0), int64(1000)
	apply := func(e encoder) any { idx++; return applyEntry(t, f, idx, e) }
	held := map[string]int64{} // member -> worker
	check := func(what string) {
		t.Helper()
		for node, w := range held {
			if f.isReserved(w) {
				t.Fatalf("%s: %s holds reserved worker %d", what, node, w)
			}
			if m, _ := f.member(node); m.Worker != w {
				t.Fatalf("%s: %s holds %d, the state says %d", what, node, w, m.Worker)
			}
		}
		want := int64(0) // free: unreserved, and never given or let go (a retired one is held until released)
		for _, w := range usable {
			if ws := f.meta.Workers[w]; ws == nil || ws.Forgotten {
				want++
			}
		}
		if got := f.freeWorkers(); got != want || got > int64(len(usable)-len(held)) {
			t.Fatalf("%s: %d free workers, want %d (held %v)", what, got, want, held)
		}
	}
	for i, want := range usable {
		node := fmt.Sprintf("n%d", i)
		r := apply(joinEntry(node, now)).(joinResult)
		if r.Err != nil || r.Worker != want {
			t.Fatalf("join %d: %+v, want worker %d", i, r, want)
		}
		held[node] = r.Worker
		check("filling up")
	}
	r := apply(joinEntry("extra", now)).(joinResult)
	if !errors.Is(r.Err, ErrRefused) || !strings.Contains(r.Err.Error(), "all 7 are held (9 more are reserved by --reserved-workers)") {
		t.Fatalf("join with every unreserved worker held: %+v", r)
	}
	if w := f.freeWorker(); w != -1 {
		t.Fatalf("freeWorker with every unreserved worker held: %d", w)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	next := len(usable)
	for step := range 400 {
		now += 20000 // past every lease: forgotten IDs are free again
		switch {
		case len(held) > 0 && rng.IntN(3) == 0:
			for node := range held {
				if err, _ := apply(newEntry(entryForget).string(node)).(error); err != nil {
					t.Fatalf("step %d: forget %s: %v", step, node, err)
				}
				delete(held, node)
				break
			}
		case len(held) > 0 && rng.IntN(2) == 0:
			for node, w := range held {
				r := apply(freshEntry(node, w, now)).(joinResult)
				if r.Err != nil {
					if errors.Is(r.Err, ErrRefused) {
						break // none free below the clock
					}
					t.Fatalf("step %d: fresh for %s: %v", step, node, r.Err)
				}
				held[node] = r.Worker
				break
			}
		default:
			node := fmt.Sprintf("n%d", next)
			next++
			r := apply(joinEntry(node, now)).(joinResult)
			if r.Err != nil {
				if len(held) < len(usable) && f.freeWorker() >= 0 {
					t.Fatalf("step %d: join refused with %d held: %v", step, len(held), r.Err)
				}
				continue
			}
			held[node] = r.Worker
		}
		check(fmt.Sprintf("step %d", step))
	}
	for w := range f.meta.Workers {
		if f.isReserved(w) {
			t.Fatalf("worker %d, reserved, was given out: %+v", w, f.meta.Workers[w])
		}
	}
}

// A fresh worker ID for a clock gone back skips the reserved ones, and the
// refusal when none is left counts them.
func TestFSMFreshWorkerSkipsReserved(t *testing.T) {
	f, _ := newFSM(openStore(t), 7)
	f.reserved, _ = engine.ParseWorkerRanges("1-2,4-7")
	idx := uint64(0)
	apply := func(e encoder) any { idx++; return applyEntry(t, f, idx, e) }
	if r := apply(joinEntry("a", 1000)).(joinResult); r.Err != nil || r.Worker != 0 {
		t.Fatalf("join a: %+v", r)
	}
	if r := apply(freshEntry("a", 0, 2000)).(joinResult); r.Err != nil || r.Worker != 3 {
		t.Fatalf("fresh for a: %+v, want worker 3", r)
	}
	r := apply(freshEntry("a", 3, 3000)).(joinResult)
	if !errors.Is(r.Err, ErrRefused) || !strings.Contains(r.Err.Error(), "none of the 2 (6 more are reserved by --reserved-workers)") {
		t.Fatalf("fresh with only reserved workers left: %+v", r)
	}
}
