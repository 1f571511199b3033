// Package lazyfs is a FUSE file system, kept in memory, that loses what
// was not synced when its power is cut, as Jepsen's LazyFS does: a write
// stays in a per-file cache of dirty pages until fsync of the file; a
// create, rename, unlink, mkdir or rmdir is durable only once a later
// fsync commits it (any fsync in Ordered mode, as ext4's journal does; an
// fsync of that directory in Strict mode, as POSIX promises). Cut drops
// everything not durable, the way a machine losing power does, which a
// kill -9 never does: the page cache survives the process.
//
// A power cut of processes using the mount is Freeze (every operation
// fails with EIO from now on: the disk is gone), SIGKILL the processes,
// wait for them to exit, then Cut (drop, resume). A process cannot exit
// while the file system still owes it an answer (the kernel waits for
// requests already read by the server), so when it has exited nothing it
// sent can land after the cut. See DESIGN.md for what is modelled and what
// is not.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mode says when namespace changes become durable.
type Mode int

const (
	// Ordered: every fsync, of a file or a directory, commits all namespace
	// changes made before it (ext4 data=ordered, XFS: one journal).
	Ordered Mode = iota
	// Strict: a directory's changes are durable only once that directory
	// is fsynced (the POSIX minimum; a cross-directory rename needs both).
	Strict
)

func (m Mode) String() string {
	if m == Strict {
		return "strict"
	}
	return "ordered"
}

// Options configure a mount.
type Options struct {
	Mode Mode
	// Capacity in bytes of current file content; a write past it fails
	// with ENOSPC. 0: unlimited.
	Capacity int64
}

// Available says whether this machine can mount a lazyfs, and if not,
// what to install or change.
func Available() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse (load the fuse kernel module): %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err != nil {
			return errors.New("no fusermount (install the Debian package fuse3)")
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (allow_other, so that processes of other users reach the mount)")
	}
	return nil
}

// CutStats say what a power cut dropped.
type CutStats struct {
	Pages int // dirty pages of file content (4 KiB each)
	Dirs  int // directories whose namespace went back
}

// FS is one mounted lazyfs.
type FS struct {
	Dir  string
	opts Options

	mu       sync.Mutex
	root     *entry
	inos     uint64
	used     int64
	frozen   bool
	dirty    map[*entry]bool // directories with uncommitted namespace changes
	cuts     int
	server   *fuse.Server
	unmounts sync.Once

	syncDelay atomic.Int64 // nanoseconds every fsync and fdatasync waits first (SetSyncDelay)
}

// Mount serves a new, empty lazyfs on dir (which must exist).
func Mount(dir string, opts Options) (*FS, error) {
	f := &FS{Dir: dir, opts: opts, inos: 1, dirty: map[*entry]bool{}}
	f.root = newDir(1, 0o755, 0, 0)
	zero := time.Duration(0)
	server, err := fs.Mount(dir, &node{fsys: f, e: f.root}, &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:    true, // the nodes run as users of their own
			FsName:        "lazyfs",
			Name:          "lazyfs",
			DisableXAttrs: true,
		},
		// The kernel asks again every time, so that after a cut it sees
		// what is left, not what it cached.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		RootStableAttr:  &fs.StableAttr{Ino: 1},
	})
	if err != nil {
		return nil, fmt.Errorf("mount lazyfs on %s: %w", dir, err)
	}
	f.server = server
	return f, nil
}

// Unmount ends the mount; every file in it is gone. If a process still
// holds a file open (a test that failed halfway), the connection is
// aborted (umount -f) and the mount detached (umount -l): the process's
// next operation fails instead of waiting for a server that is leaving.
func (f *FS) Unmount() error {
	var err error
	f.unmounts.Do(func() {
		for range 10 {
			if err = f.server.Unmount(); err == nil {
				f.server.Wait()
				return
			}
			time.Sleep(100 * time.Millisecond) // busy: a process is leaving it
		}
		exec.Command("umount", "-f", f.Dir).Run() // aborts the connection; says "busy"
		if out, uerr := exec.Command("umount", "-l", f.Dir).CombinedOutput(); uerr != nil {
			err = fmt.Errorf("umount -l %s: %v: %s (after %w)", f.Dir, uerr, out, err)
			return
		}
		err = nil
	})
	return err
}

// Freeze makes every operation fail with EIO until the next Cut: the
// power is off.
func (f *FS) Freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// Cut drops everything not durable and resumes service, as a machine that
// lost power and booted again. Call Freeze first, and kill the processes
// using the mount and wait for them, for a cut at a single instant.
func (f *FS) Cut() CutStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st CutStats
	var walk func(d *entry)
	walk = func(d *entry) {
		if d.namesDiffer() {
			st.Dirs++
		}
		d.children = map[string]*entry{}
		for name, c := range d.durableChildren {
			d.children[name] = c
			if c.isDir() {
				walk(c)
			} else {
				st.Pages += c.drop()
			}
		}
	}
	walk(f.root)
	f.dirty = map[*entry]bool{}
	f.used = 0
	seen := map[*entry]bool{}
	var count func(d *entry)
	count = func(d *entry) {
		for _, c := range d.children {
			if seen[c] {
				continue
			}
			seen[c] = true
			if c.isDir() {
				count(c)
			} else {
				f.used += c.size
			}
		}
	}
	count(f.root)
	f.frozen = false
	f.cuts++
	return st
}

// Cuts is how many power cuts the mount has had.
func (f *FS) Cuts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cuts
}

// begin takes the file system's lock for one operation, or says EIO while
// the power is off.
func (f *FS) begin() syscall.Errno {
	f.mu.Lock()
	if f.frozen {
		f.mu.Unlock()
		return syscall.EIO
	}
	return 0
}

// changed records a namespace change of directory d.
func (f *FS) changed(d *entry) {
	d.mtime = time.Now()
	f.dirty[d] = true
}

// commit makes namespace changes durable after an fsync of e.
func (f *FS) commit(e *entry) {
	if f.opts.Mode == Strict {
		if e.isDir() {
			e.commitNames()
			delete(f.dirty, e)
		}
		return
	}
	for d := range f.dirty {
		d.commitNames()
	}
	clear(f.dirty)
}

// grow checks that n more bytes fit.
func (f *FS) grow(n int64) syscall.Errno {
	if n > 0 && f.opts.Capacity > 0 && f.used+n > f.opts.Capacity {
		return syscall.ENOSPC
	}
	f.used += n
	return 0
}

// node is the FUSE inode showing an entry.
type node struct {
	fs.Inode
	fsys *FS
	e    *entry
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.NodeOpendirer = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
	_ fs.NodeWriter    = (*node)(nil)
	_ fs.NodeFsyncer   = (*node)(nil)
	_ fs.NodeFlusher   = (*node)(nil)
	_ fs.NodeReleaser  = (*node)(nil)
	_ fs.NodeAllocater = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
)

func fill(e *entry, a *fuse.Attr) {
	a.Ino = e.ino
	a.Mode = e.mode
	a.Uid, a.Gid = e.uid, e.gid
	a.Nlink = 1
	if e.isDir() {
		a.Nlink = 2
		a.Size = 4096
	} else {
		a.Size = uint64(e.size)
	}
	a.Blksize = pageSize
	a.Blocks = (a.Size + 511) / 512
	a.SetTimes(nil, &e.mtime, &e.mtime)
}

func (n *node) child(ctx context.Context, c *entry, out *fuse.EntryOut) *fs.Inode {
	fill(c, &out.Attr)
	return n.NewInode(ctx, &node{fsys: n.fsys, e: c}, fs.StableAttr{Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
}

func caller(ctx context.Context) (uint32, uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return nil, errno
	}
	defer n.fsys.mu.Unlock()
	c, ok := n.e.children[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	return n.child(ctx, c, out), 0
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	fill(n.e, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	e := n.e
	if size, ok := in.GetSize(); ok {
		if e.isDir() {
			return syscall.EISDIR
		}
		if errno := n.fsys.grow(int64(size) - e.size); errno != 0 {
			return errno
		}
		e.truncate(int64(size))
		e.mtime = time.Now()
	}
	if mode, ok := in.GetMode(); ok {
		e.mode = e.mode&syscall.S_IFMT | mode&0o7777
	}
	if uid, ok := in.GetUID(); ok {
		e.uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		e.gid = gid
	}
	if mtime, ok := in.GetMTime(); ok {
		e.mtime = mtime
	}
	fill(e, &out.Attr)
	return 0
}

func (n *node) add(name string, c *entry) {
	n.e.children[name] = c
	n.fsys.changed(n.e)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return nil, nil, 0, errno
	}
	defer n.fsys.mu.Unlock()
	c, ok := n.e.children[name]
	switch {
	case ok && flags&syscall.O_EXCL != 0:
		return nil, nil, 0, syscall.EEXIST
	case ok && c.isDir():
		return nil, nil, 0, syscall.EISDIR
	case ok:
		if flags&syscall.O_TRUNC != 0 {
			n.fsys.grow(-c.size)
			c.truncate(0)
		}
	default:
		n.fsys.inos++
		uid, gid := caller(ctx)
		c = newFile(n.fsys.inos, mode, uid, gid)
		n.add(name, c)
	}
	return n.child(ctx, c, out), nil, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return nil, errno
	}
	defer n.fsys.mu.Unlock()
	if _, ok := n.e.children[name]; ok {
		return nil, syscall.EEXIST
	}
	n.fsys.inos++
	uid, gid := caller(ctx)
	c := newDir(n.fsys.inos, mode, uid, gid)
	n.add(name, c)
	return n.child(ctx, c, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	c, ok := n.e.children[name]
	if !ok {
		return syscall.ENOENT
	}
	if c.isDir() {
		return syscall.EISDIR
	}
	delete(n.e.children, name)
	n.fsys.changed(n.e)
	n.fsys.used -= c.size
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	c, ok := n.e.children[name]
	if !ok {
		return syscall.ENOENT
	}
	if !c.isDir() {
		return syscall.ENOTDIR
	}
	if len(c.children) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(n.e.children, name)
	n.fsys.changed(n.e)
	return 0
}

// renameNoReplace is RENAME_NOREPLACE of renameat2.
const renameNoReplace = 1

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT: not modelled
	}
	to, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	c, ok := n.e.children[name]
	if !ok {
		return syscall.ENOENT
	}
	if old, ok := to.e.children[newName]; ok {
		switch {
		case old == c:
			return 0
		case flags&renameNoReplace != 0:
			return syscall.EEXIST
		case old.isDir() && !c.isDir():
			return syscall.EISDIR
		case !old.isDir() && c.isDir():
			return syscall.ENOTDIR
		case old.isDir() && len(old.children) > 0:
			return syscall.ENOTEMPTY
		case !old.isDir():
			n.fsys.used -= old.size
		}
	}
	delete(n.e.children, name)
	n.fsys.changed(n.e)
	to.add(newName, c)
	return 0
}

func (n *node) Opendir(ctx context.Context) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	n.fsys.mu.Unlock()
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return nil, errno
	}
	defer n.fsys.mu.Unlock()
	list := make([]fuse.DirEntry, 0, len(n.e.children))
	for name, c := range n.e.children {
		list = append(list, fuse.DirEntry{Name: name, Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return fs.NewListDirStream(list), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return nil, 0, errno
	}
	defer n.fsys.mu.Unlock()
	if flags&syscall.O_TRUNC != 0 && !n.e.isDir() {
		n.fsys.grow(-n.e.size)
		n.e.truncate(0)
	}
	// No FOPEN_KEEP_CACHE: the kernel drops its cached pages of the file
	// at every open, so a process started after a cut reads what is left.
	return nil, 0, 0
}

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return nil, errno
	}
	defer n.fsys.mu.Unlock()
	k := n.e.readAt(dest, off)
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := n.fsys.begin(); errno != 0 {
		return 0, errno
	}
	defer n.fsys.mu.Unlock()
	// A write inside the file takes no more room (and frees none).
	if errno := n.fsys.grow(max(0, off+int64(len(data))-n.e.size)); errno != 0 {
		return 0, errno
	}
	n.e.writeAt(data, off)
	n.e.mtime = time.Now()
	return uint32(len(data)), 0
}

// SetSyncDelay makes every fsync and fdatasync, of a file or a directory,
// wait d before it syncs, as a slow or failing disk does; 0 ends the delay.
// Other operations are not delayed, and a sync that waits holds no lock.
func (f *FS) SetSyncDelay(d time.Duration) { f.syncDelay.Store(int64(max(d, 0))) }

// Fsync of a file (fsync, fdatasync) or of a directory (FUSE's FSYNCDIR
// comes here too).
func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, flags uint32) syscall.Errno {
	if d := time.Duration(n.fsys.syncDelay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done(): // the caller was interrupted
			t.Stop()
			return syscall.EINTR
		}
	}
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	if !n.e.isDir() {
		n.e.sync()
	}
	n.fsys.commit(n.e)
	return 0
}

func (n *node) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno { return 0 }

func (n *node) Release(ctx context.Context, _ fs.FileHandle) syscall.Errno { return 0 }

// fallocKeepSize is FALLOC_FL_KEEP_SIZE.
const fallocKeepSize = 1

// Allocate: mode 0 extends the file with zeros (not durable until fsync);
// FALLOC_FL_KEEP_SIZE (Pebble preallocates its WAL so) is accepted and
// changes nothing; other modes are not modelled.
func (n *node) Allocate(ctx context.Context, _ fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	switch mode {
	case fallocKeepSize:
		return 0
	case 0:
		if end := int64(off + size); end > n.e.size {
			if errno := n.fsys.grow(end - n.e.size); errno != 0 {
				return errno
			}
			n.e.truncate(end)
		}
		return 0
	}
	return syscall.EOPNOTSUPP
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.fsys.begin(); errno != 0 {
		return errno
	}
	defer n.fsys.mu.Unlock()
	capacity := n.fsys.opts.Capacity
	if capacity == 0 {
		capacity = 1 << 40
	}
	out.Bsize, out.Frsize, out.NameLen = pageSize, pageSize, 255
	out.Blocks = uint64(capacity / pageSize)
	out.Bfree = uint64(max(0, capacity-n.fsys.used) / pageSize)
	out.Bavail = out.Bfree
	out.Files, out.Ffree = 1<<20, 1<<20-n.fsys.inos
	return 0
}
