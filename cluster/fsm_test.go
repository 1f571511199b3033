package cluster

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"idserver/engine"
	"idserver/persist"
)

func openStore(t testing.TB) *persist.Store {
	t.Helper()
	s, err := persist.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func applyEntry(t *testing.T, f *fsm, index uint64, e encoder) any {
	t.Helper()
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: e})
}

func TestFSMAllocSetJoinForget(t *testing.T) {
	f, err := newFSM(openStore(t), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := applyEntry(t, f, 1, newEntry(entryAlloc).uvarint(3).string("a").varint(10).string("b").varint(1).string("a").varint(5)).([]allocResult)
	if res[0] != (allocResult{First: 1, Last: 10}) || res[1] != (allocResult{First: 1, Last: 1}) || res[2] != (allocResult{First: 11, Last: 15}) {
		t.Fatalf("alloc: %+v", res)
	}
	if r := applyEntry(t, f, 2, newEntry(entrySet).string("a").varint(14)).(setResult); !errors.Is(r.Err, engine.ErrWouldGoBack) {
		t.Fatalf("lowering SET: %+v", r)
	}
	if r := applyEntry(t, f, 3, newEntry(entrySet).string("a").varint(100)).(setResult); r != (setResult{Old: 15, Existed: true}) {
		t.Fatalf("SET: %+v", r)
	}
	res = applyEntry(t, f, 4, newEntry(entryAlloc).uvarint(2).string("a").varint(1).string("b").varint(1<<62)).([]allocResult)
	if res[0].First != 101 {
		t.Fatalf("after SET 100: %+v", res[0])
	}
	res = applyEntry(t, f, 5, newEntry(entryAlloc).uvarint(1).string("b").varint(1<<62)).([]allocResult)
	if !errors.Is(res[0].Err, engine.ErrOverflow) {
		t.Fatalf("overflow: %+v", res[0])
	}
	// Worker IDs: unique among members, reused only after FORGET, above the
	// forgotten holder's high-water.
	workers := map[int64]bool{}
	for i, node := range []string{"n1", "n2", "n3", "n4"} {
		jr := applyEntry(t, f, uint64(6+i), newEntry(entryJoin).string(node).string("r").string("p")).(joinResult)
		if jr.Err != nil || workers[jr.Worker] {
			t.Fatalf("join %s: %+v", node, jr)
		}
		workers[jr.Worker] = true
	}
	if jr := applyEntry(t, f, 10, newEntry(entryJoin).string("n5").string("r").string("p")).(joinResult); jr.Err == nil {
		t.Fatal("a fifth member got one of four worker IDs")
	}
	again := applyEntry(t, f, 11, newEntry(entryJoin).string("n2").string("r2").string("p2").uvarint(0)).(joinResult)
	if again.Worker != 1 {
		t.Fatalf("rejoin kept worker %d, want 1", again.Worker)
	}
	applyEntry(t, f, 12, newEntry(entryHighWater).string("n2").varint(777))
	applyEntry(t, f, 13, newEntry(entryForget).string("n2"))
	jr := applyEntry(t, f, 14, newEntry(entryJoin).string("n5").string("r").string("p")).(joinResult)
	if jr.Err != nil || jr.Worker != 1 || jr.StartAboveMS != 777 {
		t.Fatalf("after FORGET: %+v", jr)
	}
	// A replayed entry (index not above the applied one) changes nothing.
	if r := applyEntry(t, f, 14, newEntry(entryAlloc).uvarint(1).string("a").varint(1)); r != nil {
		t.Fatalf("replay answered %v", r)
	}
	if v, _ := f.tag("a"); v != 101 {
		t.Fatalf("a is at %d after a replay, want 101", v)
	}
}

func TestFSMWipedNodeGetsANewWorker(t *testing.T) {
	f, _ := newFSM(openStore(t), 1023, nil)
	first := applyEntry(t, f, 1, newEntry(entryJoin).string("n1").string("r").string("p").uvarint(1)).(joinResult)
	restart := applyEntry(t, f, 2, newEntry(entryJoin).string("n1").string("r").string("p").uvarint(0)).(joinResult)
	wiped := applyEntry(t, f, 3, newEntry(entryJoin).string("n1").string("r").string("p").uvarint(1)).(joinResult)
	if first.Worker != 0 || restart.Worker != 0 || wiped.Worker != 1 {
		t.Fatalf("first %d, restart %d, wiped %d: want 0, 0, 1", first.Worker, restart.Worker, wiped.Worker)
	}
	// FORGET frees the current worker ID only; the wiped one stays retired.
	applyEntry(t, f, 4, newEntry(entryForget).string("n1"))
	next := applyEntry(t, f, 5, newEntry(entryJoin).string("n2").string("r").string("p").uvarint(1)).(joinResult)
	if next.Worker != 1 {
		t.Fatalf("after FORGET, a new node got %d, want 1", next.Worker)
	}
}

func TestFSMSurvivesReopenAndSnapshotRestore(t *testing.T) {
	store := openStore(t)
	f, _ := newFSM(store, 1023, nil)
	applyEntry(t, f, 1, newEntry(entryAlloc).uvarint(1).string("orders").varint(1000))
	applyEntry(t, f, 2, newEntry(entryJoin).string("n1").string("r").string("p"))
	// Reopen from Pebble.
	g, err := newFSM(store, 1023, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := g.tag("orders"); !ok || v != 1000 || g.applied() != 2 {
		t.Fatalf("after reopen: %d %v applied %d", v, ok, g.applied())
	}
	// Snapshot into another store and restore.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	var floors []string
	h, _ := newFSM(openStore(t), 1023, func(tag string, v int64) { floors = append(floors, tag) })
	applyEntry(t, h, 1, newEntry(entryAlloc).uvarint(1).string("stale").varint(5))
	if err := h.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.tag("orders"); v != 1000 || h.size() != 1 || h.applied() != 2 || len(floors) != 1 {
		t.Fatalf("after restore: orders %d, size %d, applied %d, floors %v", v, h.size(), h.applied(), floors)
	}
	if _, ok := h.member("n1"); !ok {
		t.Fatal("member lost in restore")
	}
}

func TestFSMPanicsOnMalformedEntries(t *testing.T) {
	f, _ := newFSM(openStore(t), 1023, nil)
	for i, data := range [][]byte{{}, {99}, {entryAlloc, 0xff}, {entrySet, 5, 'a'}, append(newEntry(entryForget).string("x"), 1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("entry %d (%x) applied without a panic", i, data)
				}
			}()
			f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data})
		}()
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func TestFSMSetConditions(t *testing.T) {
	f, err := newFSM(openStore(t), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		cond byte
		v    int64
		want setResult
	}{
		{setXX, 5, setResult{}},                          // absent: XX does nothing
		{setNX, 5, setResult{}},                          // absent: NX creates it
		{setNX, 9, setResult{Old: 5, Existed: true}},     // present: NX does nothing
		{setXX, 7, setResult{Old: 5, Existed: true}},     // present: XX raises it
		{setAlways, 8, setResult{Old: 7, Existed: true}}, // plain
	} {
		r := applyEntry(t, f, uint64(i+1), newEntry(entrySet).string("a").varint(tc.v).uvarint(uint64(tc.cond))).(setResult)
		if r != tc.want {
			t.Fatalf("step %d: %+v, want %+v", i, r, tc.want)
		}
	}
	if v, ok := f.tag("a"); !ok || v != 8 {
		t.Fatalf("a is %d, %v; want 8", v, ok)
	}
	// An entry without the condition byte (written before it existed) is a plain SET.
	if r := applyEntry(t, f, 6, newEntry(entrySet).string("b").varint(3)).(setResult); r != (setResult{}) {
		t.Fatalf("old entry: %+v", r)
	}
	if v, ok := f.tag("b"); !ok || v != 3 {
		t.Fatalf("b is %d, %v; want 3", v, ok)
	}
}
