package cluster

import (
	"fmt"
	"testing"
)

func TestScanTagsPagesInOrderWithoutSkips(t *testing.T) {
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{fsm: f}
	alloc := func(index uint64, tag string) {
		applyEntry(t, f, index, newEntry(entryAlloc).uvarint(1).string(tag).varint(1))
	}
	for i := range 25 {
		alloc(uint64(i+1), fmt.Sprintf("t%02d", i*2)) // t00, t02, ... t48
	}
	if next, tags := c.ScanTags(0, 0); next == 0 || len(tags) != 1 || tags[0] != "t00" {
		t.Fatalf("count 0: %d %v", next, tags)
	}
	seen := map[string]int{}
	var order []string
	cursor, pages := uint64(0), 0
	for {
		next, tags := c.ScanTags(cursor, 7)
		for _, tag := range tags {
			seen[tag]++
			order = append(order, tag)
		}
		if pages++; pages == 2 {
			alloc(100, "t01") // created mid-scan, before the cursor
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	for i := range 25 {
		if tag := fmt.Sprintf("t%02d", i*2); seen[tag] == 0 {
			t.Fatalf("%s skipped: %v", tag, order)
		}
	}
	if len(order) > 27 {
		t.Fatalf("more than one repeat: %v", order)
	}
	if next, tags := c.ScanTags(cursor, 10); next != 0 || len(tags) == 0 || tags[len(tags)-1] != "t48" {
		t.Fatalf("the last page again: %d %v", next, tags)
	}
	// A cursor the node does not know (of another process, or older than
	// the last maxCursors) starts the scan over.
	first, _ := c.ScanTags(0, 1)
	if next, tags := c.ScanTags(first, 1); len(tags) != 1 || tags[0] != "t01" || next == 0 {
		t.Fatalf("the page after t00: %d %v", next, tags)
	}
	for range maxCursors {
		c.ScanTags(0, 1)
	}
	if _, tags := c.ScanTags(first, 1); len(tags) != 1 || tags[0] != "t00" {
		t.Fatalf("a forgotten cursor: %v, want the scan over from t00", tags)
	}
}
