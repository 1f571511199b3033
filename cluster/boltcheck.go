package cluster

// The Raft log file (raft/raft.db, a bbolt database) is checked before
// raft-boltdb opens it. bbolt trusts its pages: a zeroed or garbled page
// makes it panic ("invalid page type", "invalid freelist page") in a
// goroutine of its own, fault on an address past its memory map, or loop.
// So the file is first walked here with plain reads, every page and element
// bounds-checked against the file, and only a file that passes is opened,
// read-only, for bbolt's own consistency check (Tx.Check). A library panic
// left at that boundary is recovered into the same refusal.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The bbolt file format, version 2, as bbolt v1.4 and v1.5 write and check
// it (internal/common: page.go, meta.go, bucket.go, types.go).
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeader     = 16 // id u64, flags u16, count u16, overflow u32
	boltElement        = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	boltBucketHeader   = 16 // root pgid u64, sequence u64
	boltBranch         = 0x01
	boltLeaf           = 0x02
	boltMeta           = 0x04
	boltFreelist       = 0x10
	boltBucketLeafFlag = 0x01
	boltNoFreelist     = ^uint64(0)
)

// boltMetaPage is the part of a meta page the walk needs.
type boltMetaPage struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64
	pgid     uint64 // high water: pages at or above it are not in use
	txid     uint64
}

// readBoltMeta decodes and validates the meta page at off, as bbolt's
// Meta.Validate does: the magic number, the version, and the checksum,
// which must match (a zero checksum is no exception).
func readBoltMeta(f *os.File, off int64) (boltMetaPage, error) {
	b := make([]byte, boltPageHeader+64)
	if _, err := f.ReadAt(b, off); err != nil {
		return boltMetaPage{}, err
	}
	if binary.LittleEndian.Uint16(b[8:])&boltMeta == 0 {
		return boltMetaPage{}, errors.New("not a meta page")
	}
	m := b[boltPageHeader:]
	le := binary.LittleEndian
	switch {
	case le.Uint32(m[0:]) != boltMagic:
		return boltMetaPage{}, errors.New("no bbolt magic number")
	case le.Uint32(m[4:]) != boltVersion:
		return boltMetaPage{}, fmt.Errorf("bbolt format version %d", le.Uint32(m[4:]))
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if le.Uint64(m[56:]) != h.Sum64() {
		return boltMetaPage{}, errors.New("meta page checksum mismatch")
	}
	return boltMetaPage{pageSize: le.Uint32(m[8:]), root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]),
		pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, nil
}

// boltWalk reads the pages of one bbolt file with bounds checks.
type boltWalk struct {
	f        *os.File
	size     int64
	meta     boltMetaPage
	pageSize int64
	seen     map[uint64]bool
}

// walkBolt checks that every page bbolt would reach from the live meta page
// lies inside the file, is read once, has the right type, and holds elements
// that stay inside it.
func walkBolt(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() == 0 {
		return nil // a file bbolt creates on open
	}
	meta0, err0 := readBoltMeta(f, 0)
	pageSize := int64(os.Getpagesize())
	if err0 == nil {
		pageSize = int64(meta0.pageSize)
	}
	if pageSize < 1024 || pageSize > 1<<20 || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("page size %d", pageSize)
	}
	meta1, err1 := readBoltMeta(f, pageSize)
	// bbolt writes both meta pages when it creates a file and one per
	// commit after that, so both are valid in a whole file. With one
	// invalid bbolt would quietly use the other, a transaction older: the
	// last committed Raft entries and vote would be gone.
	switch {
	case err0 != nil:
		return fmt.Errorf("meta page 0 is invalid (%v): bbolt would fall back to an older transaction, losing committed entries", err0)
	case err1 != nil:
		return fmt.Errorf("meta page 1 is invalid (%v): bbolt would fall back to an older transaction, losing committed entries", err1)
	case meta1.pageSize != meta0.pageSize:
		return fmt.Errorf("the meta pages disagree on the page size (%d, %d)", meta0.pageSize, meta1.pageSize)
	}
	live := meta0 // bbolt uses the meta page with the higher transaction ID
	if meta1.txid > meta0.txid {
		live = meta1
	}
	w := &boltWalk{f: f, size: st.Size(), meta: live, pageSize: pageSize, seen: map[uint64]bool{0: true, 1: true}}
	if live.pgid*uint64(pageSize) > uint64(st.Size()) || live.pgid < 2 {
		return fmt.Errorf("high water page %d past the file's end (%d bytes)", live.pgid, st.Size())
	}
	if live.freelist != boltNoFreelist {
		if err := w.freelist(live.freelist); err != nil {
			return err
		}
	}
	return w.tree(live.root, 0)
}

// page reads page id with its overflow pages, checking its header.
func (w *boltWalk) page(id uint64, want uint16) ([]byte, error) {
	if id < 2 || id >= w.meta.pgid {
		return nil, fmt.Errorf("page %d: out of bounds (high water %d)", id, w.meta.pgid)
	}
	head := make([]byte, boltPageHeader)
	if _, err := w.f.ReadAt(head, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	le := binary.LittleEndian
	overflow := uint64(le.Uint32(head[12:]))
	switch {
	case le.Uint64(head) != id:
		return nil, fmt.Errorf("page %d: its header says page %d (zeroed or overwritten)", id, le.Uint64(head))
	case !validBoltPageType(le.Uint16(head[8:]), want):
		return nil, fmt.Errorf("page %d: invalid page type %#x", id, le.Uint16(head[8:]))
	case id+overflow >= w.meta.pgid:
		return nil, fmt.Errorf("page %d: %d overflow pages run past the high water %d", id, overflow, w.meta.pgid)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d: reached twice", i)
		}
		w.seen[i] = true
	}
	b := make([]byte, int64(overflow+1)*w.pageSize)
	if _, err := w.f.ReadAt(b, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	return b, nil
}

// validBoltPageType reports whether flags is exactly one page type, and one
// of want: bbolt takes a page with two type flags for the first it tests.
func validBoltPageType(flags, want uint16) bool {
	return flags&want != 0 && flags&(flags-1) == 0
}

func (w *boltWalk) freelist(id uint64) error {
	b, err := w.page(id, boltFreelist)
	if err != nil {
		return fmt.Errorf("freelist: %v", err)
	}
	le := binary.LittleEndian
	count, start := uint64(le.Uint16(b[10:])), uint64(boltPageHeader)
	if count == 0xFFFF {
		count, start = le.Uint64(b[boltPageHeader:]), boltPageHeader+8
	}
	if count > (uint64(len(b))-start)/8 {
		return fmt.Errorf("freelist page %d: %d entries do not fit", id, count)
	}
	for i := range count {
		if free := le.Uint64(b[start+8*i:]); free < 2 || free >= w.meta.pgid {
			return fmt.Errorf("freelist page %d: free page %d out of bounds", id, free)
		}
	}
	return nil
}

// tree walks a bucket's pages from root.
func (w *boltWalk) tree(root uint64, depth int) error {
	if depth > 64 {
		return fmt.Errorf("page %d: the tree is deeper than 64 levels (a cycle?)", root)
	}
	b, err := w.page(root, boltBranch|boltLeaf)
	if err != nil {
		return err
	}
	return w.node(b, root, depth)
}

// node checks one branch or leaf page (b, from page id, or an inline
// bucket's page when id is 0) and walks on from it.
func (w *boltWalk) node(b []byte, id uint64, depth int) error {
	le := binary.LittleEndian
	flags, count := le.Uint16(b[8:]), int(le.Uint16(b[10:]))
	if boltPageHeader+count*boltElement > len(b) {
		return fmt.Errorf("page %d: %d elements do not fit", id, count)
	}
	for i := range count {
		e := b[boltPageHeader+i*boltElement:]
		at := uint64(boltPageHeader + i*boltElement)
		if flags&boltBranch != 0 {
			pos, ksize, child := uint64(le.Uint32(e)), uint64(le.Uint32(e[4:])), le.Uint64(e[8:])
			if at+pos+ksize > uint64(len(b)) {
				return fmt.Errorf("page %d: branch element %d runs past the page", id, i)
			}
			if err := w.tree(child, depth+1); err != nil {
				return err
			}
			continue
		}
		eflags, pos, ksize, vsize := le.Uint32(e), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		end := at + pos + ksize + vsize
		if end > uint64(len(b)) {
			return fmt.Errorf("page %d: leaf element %d runs past the page", id, i)
		}
		if eflags&boltBucketLeafFlag == 0 {
			continue
		}
		v := b[at+pos+ksize : end]
		if len(v) < boltBucketHeader {
			return fmt.Errorf("page %d: bucket %d has a short header", id, i)
		}
		if root := le.Uint64(v); root != 0 {
			if err := w.tree(root, depth+1); err != nil {
				return err
			}
			continue
		}
		inline := v[boltBucketHeader:]
		if len(inline) < boltPageHeader || le.Uint16(inline[8:])&boltLeaf == 0 {
			return fmt.Errorf("page %d: inline bucket %d is not a leaf page", id, i)
		}
		if err := w.node(inline, 0, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// checkBoltFile refuses a damaged raft.db: the walk above, then bbolt's
// Tx.Check on a read-only open. A missing file is not checked here.
func checkBoltFile(path string) (err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		f.Close()
		return nil // created and never written: no Raft state (checkRaftFile decides if one was due)
	}
	err = walkBolt(f)
	f.Close()
	if err != nil {
		return err
	}
	// The walk leaves nothing for bbolt to fault on; a panic of its own in
	// this goroutine (opening it) is still an answer, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("bbolt: %v", p)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			if len(errs) < 5 {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}
