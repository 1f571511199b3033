package persist

import (
	"context"
	"fmt"
	"testing"
)

// Lookup answers as Get does for keys in the memtable and in every level,
// the last one included, for keys that are there, keys that are not, and
// keys that are a prefix of another or extend one.
func TestLookupAnswersAsGet(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(from, to int) {
		b := s.NewBatch()
		for i := from; i < to; i++ {
			b.Set(fmt.Sprintf("t/%d", i), []byte(fmt.Sprint(i)))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stage string) {
		t.Helper()
		for i := 0; i < 3000; i += 7 {
			for _, k := range []string{fmt.Sprintf("t/%d", i), fmt.Sprintf("t/%d0", i), fmt.Sprintf("t/%dx", i), fmt.Sprintf("t/%d", i)[:3]} {
				gv, gok, gerr := s.Get(k)
				lv, lok, lerr := s.Lookup(k)
				if gerr != nil || lerr != nil || gok != lok || string(gv) != string(lv) {
					t.Fatalf("%s: %q: Get %q %v %v, Lookup %q %v %v", stage, k, gv, gok, gerr, lv, lok, lerr)
				}
			}
		}
	}
	put(0, 1000)
	check("memtable")
	if err := s.db.Compact(context.Background(), []byte("t/"), []byte("t0"), true); err != nil {
		t.Fatal(err)
	}
	if n := s.db.Metrics().Levels[6].TablesCount; n == 0 {
		t.Fatalf("no table in the last level after the compaction")
	}
	put(1000, 2000)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	put(2000, 2500)
	check("last level, level 0 and memtable")
}
