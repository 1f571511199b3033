package cluster

import "testing"

// TestLeaseRecordsIncarnation: a renewal carrying an incarnation answers
// the one recorded before it and the lease end before it; a start whose
// incarnation the state already saw is a rollback; an entry without one
// (an older node) changes nothing of it.
func TestLeaseRecordsIncarnation(t *testing.T) {
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	if jr := applyEntry(t, f, 1, joinEntry("n1", 1000)).(joinResult); jr.Err != nil {
		t.Fatal(jr.Err)
	}
	lease := func(index uint64, end int64, inc uint64) leaseResult {
		e := newEntry(entryLease).string("n1").varint(0).varint(end)
		if inc > 0 {
			e = e.uvarint(inc)
		}
		return applyEntry(t, f, index, e).(leaseResult)
	}
	if r := lease(2, 20000, 1); r.Err != nil || r.PrevIncarnation != 0 || r.PrevEndMS != 11000 || r.EndMS != 20000 {
		t.Fatalf("first start: %+v", r)
	}
	if r := lease(3, 25000, 0); r.PrevIncarnation != 1 || r.EndMS != 25000 {
		t.Fatalf("an entry without incarnation: %+v", r)
	}
	r := lease(4, 26000, 2) // a plain restart
	if g := (LeaseGrant{PrevIncarnation: r.PrevIncarnation}); g.RolledBack(2) {
		t.Fatalf("a restart taken for a rollback: %+v", r)
	}
	r = lease(5, 27000, 2) // a copy from before start 2, starting again as 2
	if g := (LeaseGrant{PrevIncarnation: r.PrevIncarnation}); !g.RolledBack(2) || r.PrevEndMS != 26000 {
		t.Fatalf("a rollback not seen: %+v", r)
	}
}

// TestTagBaseCoversUnknownTags: a tag the state does not hold starts above
// TagBase, and a SET below it is refused as possibly issued.
func TestTagBaseCoversUnknownTags(t *testing.T) {
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	f.meta.TagBase = 5000
	res := applyEntry(t, f, 1, newEntry(entryAlloc).uvarint(1).string("new").varint(10)).([]allocResult)
	if res[0].First != 5001 || res[0].Last != 5010 {
		t.Fatalf("a tag unknown to the state: %+v", res[0])
	}
	if st, ok := f.tagState("other"); ok || st.Bound != 5000 || st.high() != 5000 {
		t.Fatalf("tagState of an unknown tag: %+v %v", st, ok)
	}
}

// TestRecoverSkipsUnknownTags: after --recover, a tag the survivor never
// saw (created in entries a lost majority committed) starts above the skip,
// as every known tag does.
func TestRecoverSkipsUnknownTags(t *testing.T) {
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	if jr := applyEntry(t, f, 1, joinEntry("n1", 1000)).(joinResult); jr.Err != nil {
		t.Fatal(jr.Err)
	}
	applyEntry(t, f, 2, newEntry(entryAlloc).uvarint(1).string("known").varint(10))
	applyEntry(t, f, 3, newEntry(entryRecover).string("n1").varint(2000).varint(1_000_000).varint(100_000).string("c2"))
	for i, c := range []struct {
		tag   string
		first int64
	}{{"known", 1_000_011}, {"unseen", 1_000_001}} {
		tag, first := c.tag, c.first
		res := applyEntry(t, f, uint64(4+i), newEntry(entryAlloc).uvarint(1).string(tag).varint(5)).([]allocResult)
		if res[0].First != first {
			t.Fatalf("%s after recover: first %d, want %d", tag, res[0].First, first)
		}
	}
}
