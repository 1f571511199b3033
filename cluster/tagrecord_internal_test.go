package cluster

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"idserver/persist"
)

// compactTags is an fsm of a cluster created by this build (its entryInit
// names the compact format) with n tags, allocated to two nodes, some SET.
func compactTags(t *testing.T, n int) *fsm {
	t.Helper()
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	applyEntry(t, f, 1, newEntry(entryInit).string("c1").string("layout").uvarint(tagFormatCompact))
	applyEntry(t, f, 2, joinEntry("a", 1000))
	applyManyTags(t, f, 2, n, [2]string{"node-a", "node-b"}, 60)
	return f
}

// A compact record reads back as the state it was written from, whatever
// the state holds, and one cut short or with bytes after it is refused.
func TestCompactTagRecordRoundTrips(t *testing.T) {
	for _, ts := range []tagState{
		{},
		{MaxID: 1, Rev: 1},
		{MaxID: -5, Floor: -7, Rev: 3},
		{MaxID: 1 << 62, Floor: 1 << 61, Rev: 1 << 40, Bound: 1 << 62},
		{MaxID: 1_000_000_000_000, Floor: 5, Rev: 2, Bound: 1_000_000_000_000}, // 16 bytes unpadded
		{MaxID: 300, Rev: 9, Nodes: map[string]nodeAlloc{"n1": {Boot: 1<<63 | 5, Last: 300}}},
		{MaxID: 300, Floor: 20, Rev: 9, Bound: 7, Nodes: map[string]nodeAlloc{
			"n1": {Boot: 3, Last: 120, Before: 100}, "n2": {Boot: 0, Last: 300}, "": {Last: -4, Before: 1 << 62}}},
	} {
		v := encodeTag(ts, tagFormatCompact)
		if len(v) == 16 {
			t.Fatalf("%+v: a compact record of 16 bytes (%x), which older builds read as the oldest shape", ts, v)
		}
		got, err := decodeTag(v)
		if err != nil || !reflect.DeepEqual(got, ts) && !(len(ts.Nodes) == 0 && len(got.Nodes) == 0 && got.MaxID == ts.MaxID && got.Floor == ts.Floor && got.Rev == ts.Rev && got.Bound == ts.Bound) {
			t.Fatalf("%+v: encoded %x, decoded %+v, %v", ts, v, got, err)
		}
		for cut := 1; cut < len(v); cut++ {
			if got, err := decodeTag(v[:cut]); err == nil {
				t.Fatalf("%+v: the record cut to %d bytes (%x) decodes as %+v", ts, cut, v[:cut], got)
			}
		}
		if _, err := decodeTag(append(v, 0)); err == nil {
			t.Fatalf("%+v: a byte after the record is taken", ts)
		}
	}
	// No record is 16 bytes, whatever its fields' sizes.
	for _, max := range []int64{0, 1, 1 << 20, 1e9, 1e12, 1 << 50, 1<<63 - 1} {
		for _, rev := range []uint64{1, 1 << 14, 1 << 40} {
			for _, floor := range []int64{0, 5, 1 << 30} {
				ts := tagState{MaxID: max, Rev: rev, Floor: floor, Bound: max}
				if v := encodeTag(ts, tagFormatCompact); len(v) == 16 {
					t.Fatalf("%+v: a compact record of 16 bytes (%x)", ts, v)
				} else if got, err := decodeTag(v); err != nil || got.MaxID != max || got.Rev != rev || got.Floor != floor {
					t.Fatalf("%+v: encoded %x, decoded %+v, %v", ts, v, got, err)
				}
			}
		}
	}
	// A tag allocated by one node: a few bytes beside the node's name.
	one := tagState{MaxID: 123456, Rev: 800, Nodes: map[string]nodeAlloc{"0123456789abcdef": {Boot: 1<<64 - 1, Last: 123456}}}
	if v := encodeTag(one, tagFormatCompact); len(v) > 16+8+12 {
		t.Fatalf("the record of a tag of one node is %d bytes: %x", len(v), v)
	}
}

// A store of a compact cluster holding records in the older shapes (JSON,
// 16 bytes) reads them, and each tag written again is written compact.
func TestOlderTagRecordsAreReadAndWrittenCompact(t *testing.T) {
	store := openStore(t)
	f, _ := newFSM(store, 3)
	applyEntry(t, f, 1, newEntry(entryInit).string("c1").string("layout").uvarint(tagFormatCompact))
	old := tagState{MaxID: 300, Floor: 20, Rev: 4, Nodes: map[string]nodeAlloc{"n1": {Boot: 9, Last: 300, Before: 50}}}
	b := store.NewBatch()
	b.Set(keyTagBase+"json", encodeTag(old, tagFormatJSON))
	b.Set(keyTagBase+"sixteen", binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 500), 20))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// Reopened, as a directory an older build wrote.
	g, err := newFSM(store, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := g.tag("json"); !ok || v != 300 {
		t.Fatalf("the JSON record reads %d %v", v, ok)
	}
	if v, ok := g.tag("sixteen"); !ok || v != 500 {
		t.Fatalf("the 16-byte record reads %d %v", v, ok)
	}
	res := applyEntry(t, g, 2, newEntry(entryAllocBy).uvarint(2).string("json").varint(5).string("n1").uvarint(9).
		string("sixteen").varint(1).string("n2").uvarint(7)).([]allocResult)
	if res[0] != (allocResult{First: 301, Last: 305}) || res[1] != (allocResult{First: 501, Last: 501}) {
		t.Fatalf("allocations above the older records: %+v", res)
	}
	for tag, want := range map[string]tagState{
		"json":    {MaxID: 305, Floor: 20, Rev: 5, Nodes: map[string]nodeAlloc{"n1": {Boot: 9, Last: 305, Before: 50}}},
		"sixteen": {MaxID: 501, Floor: 20, Rev: 1, Bound: 500, Nodes: map[string]nodeAlloc{"n2": {Boot: 7, Last: 501}}},
	} {
		v, ok, err := store.Get(keyTagBase + tag)
		if err != nil || !ok || v[0] != tagCompact {
			t.Fatalf("%s is stored as %x (%v)", tag, v, err)
		}
		if got, err := decodeTag(v); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s reads %+v (%v), want %+v", tag, got, err, want)
		}
	}
}

// A cluster created by an older build (no tag format in its entryInit)
// keeps writing what that build reads: JSON records and JSON snapshots.
func TestOlderClusterKeepsTheShapeOlderBuildsRead(t *testing.T) {
	store := openStore(t)
	f, _ := newFSM(store, 3)
	applyEntry(t, f, 1, newEntry(entryInit).string("c1").string("layout"))
	applyEntry(t, f, 2, newEntry(entryAllocBy).uvarint(1).string("orders").varint(5).string("n1").uvarint(9))
	if v, _, _ := store.Get(keyTagBase + "orders"); len(v) == 0 || v[0] != tagJSON {
		t.Fatalf("the tag of an older cluster is stored as %x", v)
	}
	rc := snapshotOf(t, f)
	head := make([]byte, 1)
	rc.Read(head)
	if head[0] != '{' {
		t.Fatalf("the snapshot of an older cluster begins with %q", head)
	}
}

// A compact snapshot restores the state it was taken of, on a store that
// held another, in batches; the JSON image of a backup stays JSON; and a
// snapshot cut anywhere is refused.
func TestCompactSnapshotRoundTrips(t *testing.T) {
	const n = 3000
	f := compactTags(t, n)
	rc := snapshotOf(t, f)
	snap, _ := io.ReadAll(rc)
	if !bytes.HasPrefix(snap, []byte(compactMagic)) {
		t.Fatalf("the snapshot of a compact cluster begins with %q", snap[:min(len(snap), 16)])
	}
	state, err := f.stateJSON()
	if err != nil || !bytes.HasPrefix(state, []byte(`{"meta":`)) {
		t.Fatalf("a backup's image: %.40q, %v", state, err)
	}
	names := 0
	for i := range n {
		names += len(fmt.Sprintf("tag:%06d", i))
	}
	t.Logf("%d tags: compact snapshot %d bytes (%.1f a tag above its name), JSON %d bytes (%.1f)",
		n, len(snap), float64(len(snap)-names)/n, len(state), float64(len(state)-names)/n)
	if per := float64(len(snap)-names) / n; per > 16 {
		t.Fatalf("the compact snapshot takes %.1f bytes a tag above its name", per)
	}

	defer func(was int) { restoreBatchBytes = was }(restoreBatchBytes)
	restoreBatchBytes = 16 << 10
	g, _ := newFSM(openStore(t), 3)
	applyEntry(t, g, 1, newEntry(entryAlloc).uvarint(1).string("stale").varint(5))
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	again, _ := g.stateJSON()
	if !bytes.Equal(again, state) || g.size() != n {
		t.Fatalf("restored: %d tags, same state %v", g.size(), bytes.Equal(again, state))
	}
	if _, ok := g.tag("stale"); ok {
		t.Fatal("a tag the snapshot does not hold is left after its restore")
	}
	// The restored store writes compact records, and its snapshot is the same.
	var compact bool
	g.store.Scan(keyTagBase, func(k string, v []byte) error {
		compact = compact || v[0] == tagCompact
		return nil
	})
	if again := readAll(t, snapshotOf(t, g)); !compact || !bytes.Equal(again, snap) {
		t.Fatalf("after the restore: compact records %v, the same snapshot %v", compact, bytes.Equal(again, snap))
	}
	// A JSON image of the compact cluster (a backup) restores as compact.
	h, _ := newFSM(openStore(t), 3)
	if err := h.Restore(io.NopCloser(bytes.NewReader(state))); err != nil {
		t.Fatal(err)
	}
	if again := readAll(t, snapshotOf(t, h)); !bytes.Equal(again, snap) {
		t.Fatal("a compact cluster restored from its JSON image snapshots otherwise")
	}

	for _, cut := range []int{len(compactMagic) + 1, len(compactMagic) + 40, len(snap) / 2, len(snap) - 2, len(snap) - 1} {
		k, _ := newFSM(openStore(t), 3)
		if err := k.Restore(io.NopCloser(bytes.NewReader(snap[:cut]))); err == nil {
			t.Fatalf("a snapshot cut to %d of its %d bytes is restored", cut, len(snap))
		} else if !strings.Contains(err.Error(), "restore") {
			t.Fatalf("cut to %d: %v", cut, err)
		}
	}
}

func readAll(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var _ = persist.ErrCorrupt

// entryAllocRuns allocates what entryAllocBy of the same items does, in
// fewer bytes, and only a compact cluster's leader writes it.
func TestAllocRunsAllocateAsAllocBy(t *testing.T) {
	var items []allocItem
	for i := range 300 {
		node := []string{"0123456789abcdef", "fedcba9876543210"}[i/100%2]
		items = append(items, allocItem{Tag: fmt.Sprintf("t:%d", i%250), N: int64(i%7 + 1), Node: node, Boot: uint64(i/150+1) << 62})
	}
	by := newEntry(entryAllocBy).uvarint(uint64(len(items)))
	for _, it := range items {
		by = by.string(it.Tag).varint(it.N).string(it.Node).uvarint(it.Boot)
	}
	runs := allocRunsEntry(items)
	if len(runs) > len(by)/2 {
		t.Fatalf("entryAllocRuns of %d items: %d bytes, entryAllocBy %d", len(items), len(runs), len(by))
	}
	var states [][]byte
	var answers [][]allocResult
	for _, e := range []encoder{by, runs} {
		f, _ := newFSM(openStore(t), 3)
		applyEntry(t, f, 1, newEntry(entryInit).string("c1").string("layout").uvarint(tagFormatCompact))
		applyEntry(t, f, 2, newEntry(entrySet).string("t:3").varint(1000))
		answers = append(answers, applyEntry(t, f, 3, e).([]allocResult))
		st, _ := f.stateJSON()
		states = append(states, st)
		if got := (&Cluster{fsm: f}).allocEntry(items); !bytes.Equal(got, runs) {
			t.Fatal("the leader of a compact cluster does not write entryAllocRuns")
		}
	}
	if !reflect.DeepEqual(answers[0], answers[1]) || !bytes.Equal(states[0], states[1]) {
		t.Fatalf("entryAllocRuns answered %v, entryAllocBy %v; same state %v", answers[1][:3], answers[0][:3], bytes.Equal(states[0], states[1]))
	}
	f, _ := newFSM(openStore(t), 3)
	applyEntry(t, f, 1, newEntry(entryInit).string("c1").string("layout"))
	if got := (&Cluster{fsm: f}).allocEntry(items); !bytes.Equal(got, by) {
		t.Fatal("the leader of a cluster an older build created writes another entry than entryAllocBy")
	}
	// A run that claims more items than the entry holds is malformed.
	defer func() {
		if recover() == nil {
			t.Fatal("a malformed entryAllocRuns was applied")
		}
	}()
	applyEntry(t, f, 2, newEntry(entryAllocRuns).uvarint(1).string("n").uvarint(1).uvarint(2).string("a").varint(1).string("b").varint(1))
}
