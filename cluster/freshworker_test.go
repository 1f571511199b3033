package cluster

import (
	"errors"
	"reflect"
	"testing"
)

func freshEntry(node string, from, now int64) encoder {
	return newEntry(entryFresh).string(node).varint(from).varint(now).varint(10000)
}

// A fresh worker ID: one whose previous lease ended below the asking
// node's clock; the old one retired (held, its lease not renewable),
// released once a later entry's clock is above its lease end, and
// reused by then starting above that end. Four worker IDs and two nodes
// take turns without the pool running dry; with every worker ID's lease
// above the clock, the answer is a refusal that names the clock.
func TestFSMFreshWorker(t *testing.T) {
	f, _ := newFSM(openStore(t), 3)
	idx := uint64(0)
	apply := func(e encoder) any { idx++; return applyEntry(t, f, idx, e) }
	a := apply(joinEntry("a", 1000)).(joinResult) // worker 0, lease to 11000
	b := apply(joinEntry("b", 1000)).(joinResult) // worker 1
	if a.Worker != 0 || b.Worker != 1 {
		t.Fatalf("joins: %+v %+v", a, b)
	}
	// a's clock ran ahead: its lease went to 3h+.
	if r := apply(newEntry(entryLease).string("a").varint(0).varint(3 * 3600_000)).(leaseResult); r.Err != nil {
		t.Fatal(r.Err)
	}
	// Back at 2000: worker 2 (never used), worker 0 retired.
	r := apply(freshEntry("a", 0, 2000)).(joinResult)
	if r.Err != nil || r.Worker != 2 || r.StartAboveMS != 0 || r.LeaseEndMS != 12000 {
		t.Fatalf("fresh: %+v", r)
	}
	if m, _ := f.member("a"); m.Worker != 2 || !reflect.DeepEqual(m.Retired, []int64{0}) || f.lease("a") != 12000 {
		t.Fatalf("member after fresh: %+v, lease %d", m, f.lease("a"))
	}
	if got := f.retired("a"); !reflect.DeepEqual(got, []RetiredWorker{{0, 3 * 3600_000}}) {
		t.Fatalf("retired: %+v", got)
	}
	// The old worker's lease is not renewable; the new one's is.
	if r := apply(newEntry(entryLease).string("a").varint(0).varint(4 * 3600_000)).(leaseResult); !errors.Is(r.Err, ErrNotMember) {
		t.Fatalf("renewal of the retired worker: %+v", r)
	}
	if r := apply(newEntry(entryLease).string("a").varint(2).varint(20000)).(leaseResult); r.Err != nil || r.EndMS != 20000 {
		t.Fatalf("renewal of the fresh worker: %+v", r)
	}
	// b steps back too: worker 3. Then a again, at 25000: no worker in the
	// pool has a lease ended below 25000 (0 and 1 retired to 3h and
	// 30000, 2 and 3 held).
	apply(newEntry(entryLease).string("b").varint(1).varint(30000))
	if r := apply(freshEntry("b", 1, 21000)).(joinResult); r.Err != nil || r.Worker != 3 {
		t.Fatalf("fresh for b: %+v", r)
	}
	r = apply(freshEntry("a", 2, 25000)).(joinResult)
	if !errors.Is(r.Err, ErrRefused) {
		t.Fatalf("fresh with the pool used up: %+v", r)
	}
	if m, _ := f.member("a"); m.Worker != 2 {
		t.Fatalf("a refused fresh worker changed the member: %+v", m)
	}
	// At 3h+1: worker 0's lease ended (and b's worker 1's, at 30000):
	// released, then the lowest is taken, above its lease end.
	r = apply(freshEntry("a", 2, 3*3600_000+1)).(joinResult)
	if r.Err != nil || r.Worker != 0 || r.StartAboveMS != 3*3600_000 {
		t.Fatalf("fresh after the old lease ended: %+v", r)
	}
	if m, _ := f.member("a"); !reflect.DeepEqual(m.Retired, []int64{2}) {
		t.Fatalf("retired after the reuse: %+v", m)
	}
	if m, _ := f.member("b"); len(m.Retired) != 0 || !f.meta.Workers[1].Forgotten {
		t.Fatalf("b's lapsed worker not let go: %+v %+v", m, f.meta.Workers[1])
	}
	// A retry naming a worker the node no longer issues on (its answer was
	// lost) is taken: the one it was given is retired too.
	r = apply(freshEntry("a", 2, 3*3600_000+2)).(joinResult)
	if r.Err != nil || r.Worker != 1 {
		t.Fatalf("retry: %+v", r)
	}
	// (2's lease, 20000, lapsed: let go.)
	if m, _ := f.member("a"); !reflect.DeepEqual(m.Retired, []int64{0}) || !f.meta.Workers[2].Forgotten {
		t.Fatalf("retired after the retry: %+v", m)
	}
	// Not a worker of the node, or not a member: refused.
	if r := apply(freshEntry("a", 3, 3*3600_000+3)).(joinResult); !errors.Is(r.Err, ErrNotMember) {
		t.Fatalf("another node's worker: %+v", r)
	}
	if r := apply(freshEntry("z", 0, 3*3600_000+3)).(joinResult); !errors.Is(r.Err, ErrNotMember) {
		t.Fatalf("not a member: %+v", r)
	}

	// A snapshot keeps the retired workers.
	h, _ := newFSM(openStore(t), 3)
	if err := h.Restore(snapshotOf(t, f)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.retired("a"), f.retired("a")) || h.lease("a") != f.lease("a") {
		t.Fatalf("after restore: %+v, want %+v", h.retired("a"), f.retired("a"))
	}
	// FORGET lets go of the retired workers too, and a SET waits for the
	// latest of their leases (a's buffered values run to it).
	apply(newEntry(entryForget).string("a"))
	if end := f.departedLeases()["a"]; end != 3*3600_000+2+10000 {
		t.Fatalf("departed lease end %d", end)
	}
	// A retired worker whose lease runs past the current one's: the SET
	// waits for the retired one.
	g, _ := newFSM(openStore(t), 3)
	applyEntry(t, g, 1, joinEntry("a", 1000))
	applyEntry(t, g, 2, newEntry(entryLease).string("a").varint(0).varint(3*3600_000))
	applyEntry(t, g, 3, freshEntry("a", 0, 2000))
	applyEntry(t, g, 4, newEntry(entryForget).string("a"))
	if end := g.departedLeases()["a"]; end != 3*3600_000 {
		t.Fatalf("departed lease end %d, want the retired worker's 3h", end)
	}
	for _, w := range []int64{0, 1} {
		if !f.meta.Workers[w].Forgotten {
			t.Fatalf("worker %d still held after FORGET: %+v", w, f.meta.Workers[w])
		}
	}
}

// Apply is deterministic: two state machines fed the same entries agree.
func TestFSMFreshWorkerDeterministic(t *testing.T) {
	var states [2]string
	for i := range states {
		f, _ := newFSM(openStore(t), 7)
		idx := uint64(0)
		for _, n := range []string{"a", "b", "c"} {
			idx++
			applyEntry(t, f, idx, joinEntry(n, 1000))
		}
		now := int64(2000)
		for k := range 30 {
			idx++
			node := []string{"a", "b", "c"}[k%3]
			m, _ := f.member(node)
			applyEntry(t, f, idx, freshEntry(node, m.Worker, now))
			now += 7000
		}
		state, err := f.stateJSON()
		if err != nil {
			t.Fatal(err)
		}
		states[i] = string(state)
	}
	if states[0] != states[1] {
		t.Fatalf("two replicas differ:\n%s\n%s", states[0], states[1])
	}
}
