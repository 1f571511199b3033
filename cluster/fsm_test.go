package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
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
	f, err := newFSM(openStore(t), 3)
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
	// forgotten holder's last lease.
	workers := map[int64]bool{}
	for i, node := range []string{"n1", "n2", "n3", "n4"} {
		jr := applyEntry(t, f, uint64(6+i), joinEntry(node, 1000)).(joinResult)
		if jr.Err != nil || workers[jr.Worker] || jr.LeaseEndMS != 11000 {
			t.Fatalf("join %s: %+v", node, jr)
		}
		workers[jr.Worker] = true
	}
	if jr := applyEntry(t, f, 10, joinEntry("n5", 1000)).(joinResult); jr.Err == nil {
		t.Fatal("a fifth member got one of four worker IDs")
	}
	if jr := applyEntry(t, f, 11, joinEntry("n2", 1000)).(joinResult); !errors.Is(jr.Err, ErrRefused) {
		t.Fatalf("a member joined twice: %+v", jr)
	}
	if lr := applyEntry(t, f, 12, newEntry(entryLease).string("n2").varint(1).varint(20000)).(leaseResult); lr.Err != nil || lr.EndMS != 20000 {
		t.Fatalf("renew: %+v", lr)
	}
	if lr := applyEntry(t, f, 13, newEntry(entryLease).string("n2").varint(1).varint(15000)).(leaseResult); lr.EndMS != 20000 {
		t.Fatalf("a lease went back: %+v", lr)
	}
	if lr := applyEntry(t, f, 14, newEntry(entryLease).string("n2").varint(2).varint(30000)).(leaseResult); !errors.Is(lr.Err, ErrNotMember) {
		t.Fatalf("n2 renewed n3's worker: %+v", lr)
	}
	applyEntry(t, f, 15, newEntry(entryForget).string("n2"))
	if lr := applyEntry(t, f, 16, newEntry(entryLease).string("n2").varint(1).varint(40000)).(leaseResult); !errors.Is(lr.Err, ErrNotMember) {
		t.Fatalf("a forgotten node renewed: %+v", lr)
	}
	jr := applyEntry(t, f, 17, joinEntry("n5", 1000)).(joinResult)
	if jr.Err != nil || jr.Worker != 1 || jr.StartAboveMS != 20000 || jr.LeaseEndMS != 30000 {
		t.Fatalf("after FORGET: %+v, want worker 1 above 20000 with lease to 30000", jr)
	}
	// A replayed entry (index not above the applied one) changes nothing.
	if r := applyEntry(t, f, 17, newEntry(entryAlloc).uvarint(1).string("a").varint(1)); r != nil {
		t.Fatalf("replay answered %v", r)
	}
	if v, _ := f.tag("a"); v != 101 {
		t.Fatalf("a is at %d after a replay, want 101", v)
	}
}

// joinEntry is a join at ID time now with a 10s lease.
func joinEntry(node string, now int64) encoder {
	return newEntry(entryJoin).string(node).string("r").string("p").varint(now).varint(10000)
}

func TestFSMIdentityIsSetOnce(t *testing.T) {
	f, _ := newFSM(openStore(t), 1023)
	applyEntry(t, f, 1, newEntry(entryInit).string("c1").string("layout-a"))
	applyEntry(t, f, 2, newEntry(entryInit).string("c2").string("layout-b"))
	if id, layout := f.identity(); id != "c1" || layout != "layout-a" {
		t.Fatalf("identity %s %s, want c1 layout-a", id, layout)
	}
}

func TestFSMSurvivesReopenAndSnapshotRestore(t *testing.T) {
	store := openStore(t)
	f, _ := newFSM(store, 1023)
	applyEntry(t, f, 1, newEntry(entryAlloc).uvarint(1).string("orders").varint(1000))
	applyEntry(t, f, 2, joinEntry("n1", 0))
	// Reopen from Pebble.
	g, err := newFSM(store, 1023)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := g.tag("orders"); !ok || v != 1000 || g.applied() != 2 {
		t.Fatalf("after reopen: %d %v applied %d", v, ok, g.applied())
	}
	// Snapshot into another store and restore.
	h, _ := newFSM(openStore(t), 1023)
	applyEntry(t, h, 1, newEntry(entryAlloc).uvarint(1).string("stale").varint(5))
	if err := h.Restore(snapshotOf(t, f)); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.tag("orders"); v != 1000 || h.size() != 1 || h.applied() != 2 {
		t.Fatalf("after restore: orders %d, size %d, applied %d", v, h.size(), h.applied())
	}
	if _, ok := h.member("n1"); !ok {
		t.Fatal("member lost in restore")
	}
}

func TestFSMPanicsOnMalformedEntries(t *testing.T) {
	f, _ := newFSM(openStore(t), 1023)
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

// snapshotOf is f's snapshot as Raft would hand it to Restore.
func snapshotOf(t *testing.T, f *fsm) io.ReadCloser {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return io.NopCloser(bytes.NewReader(sink.Bytes()))
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func TestFSMSetConditions(t *testing.T) {
	f, err := newFSM(openStore(t), 3)
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

// TestFSMSetLowersOnlyOverTheStateItChecked: allocations record the node
// and process they went to; a checked SET applies only at the rev the
// leader read, may then lower the tag, and what each node may have issued
// is bounded from the fence answers and the record.
func TestFSMSetLowersOnlyOverTheStateItChecked(t *testing.T) {
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	alloc := func(index uint64, node string, boot uint64, n int64) allocResult {
		return applyEntry(t, f, index, newEntry(entryAllocBy).uvarint(1).string("a").varint(n).string(node).uvarint(boot)).([]allocResult)[0]
	}
	set := func(index uint64, v int64, rev uint64) setResult {
		return applyEntry(t, f, index, newEntry(entrySet).string("a").varint(v).uvarint(uint64(setAlways)).uvarint(rev)).(setResult)
	}
	alloc(1, "n1", 7, 100) // 1..100 to n1 in process 7
	alloc(2, "n2", 8, 100) // 101..200 to n2
	alloc(3, "n1", 9, 100) // 201..300 to n1, restarted as process 9
	st, _ := f.tagState("a")
	if st.Rev != 3 || st.Nodes["n1"] != (nodeAlloc{Boot: 9, Last: 300, Before: 100}) || st.Nodes["n2"] != (nodeAlloc{Boot: 8, Last: 200}) {
		t.Fatalf("state after three allocations: %+v", st)
	}
	for _, tc := range []struct {
		answers map[string]fenced
		want    int64
		who     string
	}{
		{map[string]fenced{"n1": {5, 9}, "n2": {150, 8}}, 150, "n2 issued 150"},
		{map[string]fenced{"n1": {0, 9}, "n2": {0, 8}}, 100, "n1 was given values up to 100 before it restarted"},
		{map[string]fenced{"n1": {0, 9}, "n2": {0, 11}}, 200, "n2 was given values up to 200 and has restarted"},
		{map[string]fenced{"n1": {0, 9}}, 200, "n2 was given values up to 200 and has restarted or left"},
	} {
		if got, who := st.issuedBound(tc.answers); got != tc.want || !strings.Contains(who, tc.who) {
			t.Fatalf("bound from %v: %d (%s), want %d (%s)", tc.answers, got, who, tc.want, tc.who)
		}
	}
	if r := set(4, 120, 2); !errors.Is(r.Err, errMoved) {
		t.Fatalf("SET at an old rev: %+v", r)
	}
	if v, _ := f.tag("a"); v != 300 {
		t.Fatalf("a refused SET changed the tag to %d", v)
	}
	if r := set(5, 120, 3); r.Err != nil || r.Old != 300 {
		t.Fatalf("SET 120 at rev 3: %+v", r)
	}
	st, _ = f.tagState("a")
	if st.MaxID != 120 || st.Nodes["n1"].Last != 120 || st.Nodes["n2"].Last != 120 || st.Nodes["n1"].Before != 100 {
		t.Fatalf("after SET 120: %+v", st)
	}
	if r := alloc(6, "n2", 8, 10); r.First != 121 {
		t.Fatalf("after SET 120 the next allocation starts at %d", r.First)
	}

	// A store written before allocations were recorded counts all of them
	// as possibly issued.
	old := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 500), 20)
	if lt, err := decodeTag(old); err != nil || lt.Bound != 500 || lt.high() != 500 {
		t.Fatalf("a 16-byte tag decodes as %+v, %v", lt, err)
	}
	if got, _ := (tagState{MaxID: 500, Bound: 500}).issuedBound(nil); got != 500 {
		t.Fatalf("bound of an untracked tag: %d", got)
	}
}
