package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"runtime"
	"sync"
	"weak"
)

// ScanTags pages over the tags in sorted order, for SCAN: up to count tags
// after the position cursor names, and the cursor of the next page (0
// after the last).
//
// A cursor names the last tag of the page it ended, and the next page
// starts after that tag in the store. Tags are never deleted, so no tag
// present for the whole scan is skipped: Redis's SCAN guarantee. The node
// remembers the last maxCursors cursors it gave out; an older one, or one
// of another process, starts the scan over (a scan may return a tag more
// than once).
func (c *Cluster) ScanTags(cursor uint64, count int) (next uint64, tags []string) {
	cs := cursorsOf(c.fsm)
	from := "" // the first tag
	if last, ok := cs.ended(cursor); ok {
		from = last + "\x00" // the first tag after last
	}
	tags = c.fsm.tagsFrom(from, max(count, 1))
	if len(tags) < max(count, 1) {
		return 0, tags
	}
	return cs.remember(tags[len(tags)-1]), tags
}

// tagsFrom is up to n tags that sort at or after from, in order.
func (f *fsm) tagsFrom(from string, n int) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	tags, err := f.store.KeysFrom(keyTagBase, from, n)
	if err != nil {
		panic("cluster: cannot read the state machine: " + err.Error())
	}
	return tags
}

// maxCursors is how many SCAN cursors a node remembers.
const maxCursors = 1024

// scanCursors is the last maxCursors cursors given out, each with the tag
// its page ended at.
type scanCursors struct {
	mu    sync.Mutex
	last  map[uint64]string
	order []uint64 // a ring, oldest at next
	next  int
}

// ended is the tag cursor's page ended at; false for 0 and for a cursor
// forgotten or never given out.
func (cs *scanCursors) ended(cursor uint64) (string, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	tag, ok := cs.last[cursor]
	return tag, ok
}

// remember gives out a new cursor for a page that ended at tag.
func (cs *scanCursors) remember(tag string) uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var cursor uint64
	for _, used := cs.last[cursor]; cursor == 0 || used; _, used = cs.last[cursor] {
		var b [8]byte
		rand.Read(b[:])
		cursor = binary.BigEndian.Uint64(b[:]) >> 1 // Redis cursors are read as signed by some clients
	}
	if len(cs.order) < maxCursors {
		cs.order = append(cs.order, cursor)
	} else {
		delete(cs.last, cs.order[cs.next])
		cs.order[cs.next] = cursor
		cs.next = (cs.next + 1) % maxCursors
	}
	cs.last[cursor] = tag
	return cursor
}

// scanCursorsOf holds each state machine's cursors without keeping the
// state machine alive: it lives here rather than in a field so that it
// stays out of cluster.go and fsm.go.
var scanCursorsOf sync.Map // weak.Pointer[fsm] -> *scanCursors

func cursorsOf(f *fsm) *scanCursors {
	key := weak.Make(f)
	if cs, ok := scanCursorsOf.Load(key); ok {
		return cs.(*scanCursors)
	}
	cs, loaded := scanCursorsOf.LoadOrStore(key, &scanCursors{last: map[uint64]string{}})
	if !loaded {
		runtime.AddCleanup(f, func(k weak.Pointer[fsm]) { scanCursorsOf.Delete(k) }, key)
	}
	return cs.(*scanCursors)
}
