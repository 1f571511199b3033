package lazyfs

import (
	"maps"
	"math"
	"syscall"
	"time"
)

// pageSize is the unit in which unsynced writes are kept.
const pageSize = 4096

// entry is one file or directory. The FUSE inode that shows it is made
// afresh whenever the kernel looks it up; the entry lives on across power
// cuts, so an unlinked name that comes back brings its file with it.
type entry struct {
	ino      uint64
	mode     uint32 // syscall.S_IFDIR or S_IFREG, and the permission bits
	uid, gid uint32
	mtime    time.Time

	// A regular file: durable is what survives a power cut; pages hold the
	// current content of every page written since the last fsync (whole
	// pages, copied from durable at their first write); size is the
	// current size. Durable bytes at or past truncLow read as zero: the
	// file was truncated below them and not synced since.
	durable  []byte
	pages    map[int64][]byte
	size     int64
	truncLow int64

	// A directory: children is the namespace as processes see it,
	// durableChildren what survives a power cut.
	children        map[string]*entry
	durableChildren map[string]*entry
}

func (e *entry) isDir() bool { return e.mode&syscall.S_IFMT == syscall.S_IFDIR }

func newFile(ino uint64, perm, uid, gid uint32) *entry {
	return &entry{ino: ino, mode: syscall.S_IFREG | perm&0o7777, uid: uid, gid: gid, mtime: time.Now(),
		pages: map[int64][]byte{}, truncLow: math.MaxInt64}
}

func newDir(ino uint64, perm, uid, gid uint32) *entry {
	return &entry{ino: ino, mode: syscall.S_IFDIR | perm&0o7777, uid: uid, gid: gid, mtime: time.Now(),
		children: map[string]*entry{}, durableChildren: map[string]*entry{}}
}

// fromDurable fills p with the durable bytes at pos as the current view
// sees them (zero past the durable end or past a truncation).
func (e *entry) fromDurable(p []byte, pos int64) {
	clear(p)
	if lim := min(int64(len(e.durable)), e.truncLow); pos < lim {
		copy(p, e.durable[pos:lim])
	}
}

// readAt copies the current content at off into p and returns how much.
func (e *entry) readAt(p []byte, off int64) int {
	if off >= e.size {
		return 0
	}
	if int64(len(p)) > e.size-off {
		p = p[:e.size-off]
	}
	for i := 0; i < len(p); {
		pos := off + int64(i)
		po := int(pos % pageSize)
		n := min(pageSize-po, len(p)-i)
		if pg, ok := e.pages[pos/pageSize]; ok {
			copy(p[i:i+n], pg[po:po+n])
		} else {
			e.fromDurable(p[i:i+n], pos)
		}
		i += n
	}
	return len(p)
}

// page is the dirty page idx, made from the durable content if new.
func (e *entry) page(idx int64) []byte {
	if pg, ok := e.pages[idx]; ok {
		return pg
	}
	pg := make([]byte, pageSize)
	e.fromDurable(pg, idx*pageSize)
	e.pages[idx] = pg
	return pg
}

// writeAt puts p at off in the current content; nothing is durable yet.
func (e *entry) writeAt(p []byte, off int64) {
	for i := 0; i < len(p); {
		pos := off + int64(i)
		po := int(pos % pageSize)
		n := copy(e.page(pos / pageSize)[po:], p[i:])
		i += n
	}
	e.size = max(e.size, off+int64(len(p)))
}

// truncate sets the current size. Bytes past the new size read as zero if
// the file grows again.
func (e *entry) truncate(size int64) {
	if size < e.size {
		for idx, pg := range e.pages {
			switch start := idx * pageSize; {
			case start >= size:
				delete(e.pages, idx)
			case start+pageSize > size:
				clear(pg[size-start:])
			}
		}
		e.truncLow = min(e.truncLow, size)
	}
	e.size = size
}

// sync makes the current content durable and returns how many dirty
// pages it wrote.
func (e *entry) sync() int {
	d := e.durable[:min(int64(len(e.durable)), e.truncLow, e.size)]
	if int64(len(d)) < e.size {
		d = append(d, make([]byte, e.size-int64(len(d)))...)
	}
	for idx, pg := range e.pages {
		if start := idx * pageSize; start < e.size {
			copy(d[start:min(start+pageSize, e.size)], pg)
		}
	}
	n := len(e.pages)
	e.durable, e.pages, e.truncLow = d, map[int64][]byte{}, math.MaxInt64
	return n
}

// drop forgets everything written since the last fsync and returns how
// many dirty pages that was.
func (e *entry) drop() int {
	n := len(e.pages)
	e.pages, e.size, e.truncLow = map[int64][]byte{}, int64(len(e.durable)), math.MaxInt64
	return n
}

// commitNames makes a directory's current namespace durable.
func (e *entry) commitNames() { e.durableChildren = maps.Clone(e.children) }

// namesDiffer says whether a power cut now would change the directory.
func (e *entry) namesDiffer() bool {
	return !maps.EqualFunc(e.children, e.durableChildren, func(a, b *entry) bool { return a == b })
}
