package cluster

import (
	"errors"
	"testing"
)

// TestFSMFloorsAllOrNothing: entryFloors raises each tag to at least its
// value and leaves one above it as it is; a moved rev or a new tag past
// the bound on tags changes none of its tags; the bound is in the state
// after a reopen.
func TestFSMFloorsAllOrNothing(t *testing.T) {
	store := openStore(t)
	f, err := newFSM(store, 3)
	if err != nil {
		t.Fatal(err)
	}
	applyEntry(t, f, 1, newEntry(entryAllocBy).uvarint(1).string("a").varint(50).string("n1").uvarint(7))
	st, _ := f.tagState("a")
	rev := st.Rev
	floors := func(pairs ...any) encoder {
		e := newEntry(entryFloors).uvarint(uint64(len(pairs) / 3))
		for i := 0; i < len(pairs); i += 3 {
			e = e.string(pairs[i].(string)).varint(int64(pairs[i+1].(int))).uvarint(uint64(pairs[i+2].(int)))
		}
		return e
	}
	if err := applyEntry(t, f, 2, floors("a", 100, int(rev), "b", 7, 0, "a", 20, int(rev))); err != nil {
		t.Fatalf("floors: %v", err)
	}
	if v, _ := f.tag("a"); v != 100 {
		t.Fatalf("a after floors 100 then 20: %d, want 100", v)
	}
	if v, ok := f.tag("b"); !ok || v != 7 {
		t.Fatalf("b after floor 7: %d %v", v, ok)
	}
	// A rev moved since the leader read it: nothing changes, b included.
	if err, _ := applyEntry(t, f, 3, floors("b", 900, revOf(f, "b"), "a", 900, int(rev))).(error); !errors.Is(err, errMoved) {
		t.Fatalf("floors over a moved rev: %v, want errMoved", err)
	}
	if v, _ := f.tag("b"); v != 7 {
		t.Fatalf("b after a refused entry: %d, want 7", v)
	}
	applyEntry(t, f, 4, newEntry(entryMaxTags).uvarint(3))
	if err, _ := applyEntry(t, f, 5, floors("b", 900, revOf(f, "b"), "c", 1, 0, "d", 1, 0)).(error); !errors.Is(err, ErrTagLimit) {
		t.Fatalf("two new tags past a bound of 3: %v, want ErrTagLimit", err)
	}
	if v, _ := f.tag("b"); v != 7 || f.size() != 2 {
		t.Fatalf("after a refused entry: b %d, %d tags, want 7 and 2", v, f.size())
	}
	if err := applyEntry(t, f, 6, floors("c", 1, 0)); err != nil {
		t.Fatalf("the third tag: %v", err)
	}
	res := applyEntry(t, f, 7, newEntry(entryAllocBy).uvarint(2).string("e").varint(1).string("n1").uvarint(7).string("a").varint(1).string("n1").uvarint(7)).([]allocResult)
	if !errors.Is(res[0].Err, ErrTagLimit) || res[1].Err != nil {
		t.Fatalf("allocations of a new and an existing tag at the bound: %+v", res)
	}
	again, err := newFSM(store, 3)
	if err != nil {
		t.Fatal(err)
	}
	if again.maxTags() != 3 {
		t.Fatalf("bound after a reopen: %d, want 3", again.maxTags())
	}
}

func revOf(f *fsm, tag string) int {
	st, _ := f.tagState(tag)
	return int(st.Rev)
}
