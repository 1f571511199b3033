package cluster

import (
	"runtime"
	"sort"
	"sync"
	"weak"
)

// ScanTags pages over the tags in sorted order, for SCAN: up to count tags
// from position cursor, and the cursor of the next page (0 after the last).
//
// The cursor is an offset into the sorted order. Tags are never deleted,
// so a tag created during a scan can only move later tags one place on: a
// page may then repeat the tag before it, but no tag present for the whole
// scan is skipped. That is Redis's SCAN guarantee.
func (c *Cluster) ScanTags(cursor uint64, count int) (next uint64, tags []string) {
	sorted := indexOf(c.fsm).sorted(c.fsm)
	if cursor >= uint64(len(sorted)) {
		return 0, nil
	}
	end := min(cursor+uint64(max(count, 1)), uint64(len(sorted)))
	tags = append(tags, sorted[cursor:end]...)
	if end == uint64(len(sorted)) {
		end = 0
	}
	return end, tags
}

// tagIndex keeps the tags sorted between SCAN pages, so that a scan in
// pages of 10 does not sort every tag for each page. Tags are never
// deleted, so the index is current while the count is unchanged (a Restore
// brings a superset of the tags a node had).
type tagIndex struct {
	mu   sync.Mutex
	tags []string
}

// tagIndexes holds each state machine's index without keeping the state
// machine alive: it lives here rather than in a field so that it stays out
// of cluster.go and fsm.go.
var tagIndexes sync.Map // weak.Pointer[fsm] -> *tagIndex

func indexOf(f *fsm) *tagIndex {
	key := weak.Make(f)
	if ix, ok := tagIndexes.Load(key); ok {
		return ix.(*tagIndex)
	}
	ix, loaded := tagIndexes.LoadOrStore(key, &tagIndex{})
	if !loaded {
		runtime.AddCleanup(f, func(k weak.Pointer[fsm]) { tagIndexes.Delete(k) }, key)
	}
	return ix.(*tagIndex)
}

// sorted returns the tags in order; the slice is shared, never modified.
func (ix *tagIndex) sorted(f *fsm) []string {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if f.size() == len(ix.tags) {
		return ix.tags
	}
	f.mu.RLock()
	tags := make([]string, 0, len(f.tags))
	for tag := range f.tags {
		tags = append(tags, tag)
	}
	f.mu.RUnlock()
	sort.Strings(tags)
	ix.tags = tags
	return tags
}
