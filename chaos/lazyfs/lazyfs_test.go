package lazyfs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"idserver/internal/testproc"
)

// mount serves a lazyfs on a temporary directory for one test, or skips
// saying what to install.
func mount(t *testing.T, mode Mode, capacity int64) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip("lazyfs: " + err.Error())
	}
	f, err := Mount(t.TempDir(), Options{Mode: mode, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// write creates (or truncates) path with data; it syncs the file if sync.
func write(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.Create(path)
	must(t, err)
	defer f.Close()
	_, err = f.Write(data)
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	must(t, d.Sync())
}

func cut(f *FS) CutStats {
	f.Freeze()
	return f.Cut()
}

func content(t *testing.T, path string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	must(t, err)
	return string(b), true
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// Write, no fsync, power cut: the data is gone (the name, made durable by
// an fsync of the directory, stays, empty).
func TestUnsyncedWriteIsLost(t *testing.T) {
	for _, mode := range []Mode{Ordered, Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			f := mount(t, mode, 0)
			p := filepath.Join(f.Dir, "a")
			write(t, p, nil, false)
			syncDir(t, f.Dir)
			write(t, p, []byte("unsynced"), false)
			if got, _ := content(t, p); got != "unsynced" {
				t.Fatalf("before the cut: %q", got)
			}
			st := cut(f)
			if got, ok := content(t, p); !ok || got != "" {
				t.Errorf("after the cut: %q (exists %v), want an empty file", got, ok)
			}
			if st.Pages != 1 {
				t.Errorf("cut dropped %d pages, want 1", st.Pages)
			}
		})
	}
}

// Write, fsync, power cut: the data is kept; later unsynced writes over it
// and a truncation are undone.
func TestSyncedWriteIsKept(t *testing.T) {
	f := mount(t, Strict, 0)
	p := filepath.Join(f.Dir, "a")
	big := bytes.Repeat([]byte("0123456789"), 2000) // 5 pages
	write(t, p, big, true)
	syncDir(t, f.Dir)
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	_, err = fh.WriteAt([]byte("XXXX"), 4094) // across a page boundary
	fh.Truncate(100)
	fh.Close()
	must(t, err)
	if got, _ := content(t, p); len(got) != 100 {
		t.Fatalf("before the cut: %d bytes", len(got))
	}
	cut(f)
	if got, _ := content(t, p); got != string(big) {
		t.Errorf("after the cut: %d bytes, want the %d synced", len(got), len(big))
	}
}

// Strict: a rename is durable only once its directory is synced; until
// then a cut brings back the old name. Ordered: any later fsync commits it.
func TestRenameDurability(t *testing.T) {
	t.Run("strict", func(t *testing.T) {
		f := mount(t, Strict, 0)
		tmp, final := filepath.Join(f.Dir, "tmp"), filepath.Join(f.Dir, "final")
		write(t, tmp, []byte("v1"), true)
		syncDir(t, f.Dir)
		must(t, os.Rename(tmp, final))
		write(t, filepath.Join(f.Dir, "other"), []byte("x"), true) // a file's fsync commits no names
		cut(f)
		if got := names(t, f.Dir); !slices.Equal(got, []string{"tmp"}) {
			t.Errorf("after a cut before the directory's fsync: %v, want [tmp]", got)
		}
		must(t, os.Rename(tmp, final))
		syncDir(t, f.Dir)
		cut(f)
		if got, _ := content(t, final); got != "v1" {
			t.Errorf("after the directory's fsync and a cut: final=%q, want v1 (names %v)", got, names(t, f.Dir))
		}
	})
	t.Run("ordered", func(t *testing.T) {
		f := mount(t, Ordered, 0)
		tmp, final := filepath.Join(f.Dir, "tmp"), filepath.Join(f.Dir, "final")
		write(t, tmp, []byte("v1"), true) // commits the create
		must(t, os.Rename(tmp, final))
		cut(f)
		if got := names(t, f.Dir); !slices.Equal(got, []string{"tmp"}) {
			t.Errorf("after a cut with no fsync since the rename: %v, want [tmp]", got)
		}
		must(t, os.Rename(tmp, final))
		write(t, filepath.Join(f.Dir, "other"), nil, true) // any fsync commits the rename
		cut(f)
		if got := names(t, f.Dir); !slices.Equal(got, []string{"final", "other"}) {
			t.Errorf("after another file's fsync and a cut: %v, want [final other]", got)
		}
	})
}

// Creates, unlinks, mkdirs and rmdirs not made durable are undone; a file
// unlinked but not durably comes back with its synced data.
func TestNamespaceUndone(t *testing.T) {
	f := mount(t, Strict, 0)
	sub := filepath.Join(f.Dir, "sub")
	must(t, os.Mkdir(sub, 0o755))
	write(t, filepath.Join(sub, "kept"), []byte("k"), true)
	syncDir(t, sub)
	syncDir(t, f.Dir)
	must(t, os.Remove(filepath.Join(sub, "kept")))
	write(t, filepath.Join(sub, "new"), []byte("n"), true)
	must(t, os.Mkdir(filepath.Join(f.Dir, "newdir"), 0o755))
	st := cut(f)
	if got := names(t, f.Dir); !slices.Equal(got, []string{"sub"}) {
		t.Errorf("root after the cut: %v, want [sub]", got)
	}
	if got := names(t, sub); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("sub after the cut: %v, want [kept]", got)
	}
	if got, _ := content(t, filepath.Join(sub, "kept")); got != "k" {
		t.Errorf("kept after the cut: %q", got)
	}
	if st.Dirs != 2 {
		t.Errorf("cut undid %d directories, want 2", st.Dirs)
	}
}

// While frozen, every operation fails with EIO; Cut resumes service.
func TestFrozenRefusesEverything(t *testing.T) {
	f := mount(t, Ordered, 0)
	p := filepath.Join(f.Dir, "a")
	write(t, p, []byte("x"), true)
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer fh.Close()
	f.Freeze()
	if _, err := fh.WriteAt([]byte("y"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("write while frozen: %v, want EIO", err)
	}
	if err := fh.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync while frozen: %v, want EIO", err)
	}
	if _, err := os.Create(filepath.Join(f.Dir, "b")); !errors.Is(err, syscall.EIO) {
		t.Errorf("create while frozen: %v, want EIO", err)
	}
	f.Cut()
	if got, _ := content(t, p); got != "x" {
		t.Errorf("after the cut: %q, want x", got)
	}
	if f.Cuts() != 1 {
		t.Errorf("Cuts = %d", f.Cuts())
	}
}

// Writes past the capacity fail with ENOSPC; removing the file frees it.
func TestCapacity(t *testing.T) {
	f := mount(t, Ordered, 1<<20)
	p := filepath.Join(f.Dir, "filler")
	fh, err := os.Create(p)
	must(t, err)
	var n int
	for ; n < 2<<20; n += 64 << 10 {
		if _, err = fh.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	fh.Close()
	if !errors.Is(err, syscall.ENOSPC) || n != 1<<20 {
		t.Fatalf("wrote %d bytes, then %v; want ENOSPC at 1 MiB", n, err)
	}
	var st syscall.Statfs_t
	must(t, syscall.Statfs(f.Dir, &st))
	if st.Bfree != 0 {
		t.Errorf("statfs: %d blocks free on a full disk", st.Bfree)
	}
	must(t, os.Remove(p))
	write(t, filepath.Join(f.Dir, "small"), make([]byte, 1000), true)
}

// Writes inside a file (a B+tree's pages, as raft.db's) take no more room:
// rewriting the first 4 KiB of a 64 KiB file a hundred times leaves room
// for what is left, not for more (the count once went down by 60 KiB at
// each, and a full disk was never full).
func TestCapacityRewrites(t *testing.T) {
	f := mount(t, Ordered, 1<<20)
	fh, err := os.Create(filepath.Join(f.Dir, "pages"))
	must(t, err)
	defer fh.Close()
	_, err = fh.Write(make([]byte, 64<<10))
	must(t, err)
	for range 100 {
		_, err := fh.WriteAt(make([]byte, 4<<10), 0)
		must(t, err)
	}
	filler, err := os.Create(filepath.Join(f.Dir, "filler"))
	must(t, err)
	defer filler.Close()
	var n int
	for ; n < 2<<20; n += 64 << 10 {
		if _, err = filler.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) || n != 1<<20-64<<10 {
		t.Fatalf("after 100 rewrites of 64 KiB, wrote %d bytes more, then %v; want ENOSPC at 960 KiB", n, err)
	}
}

// Random writes, truncations, fsyncs and cuts on one file read back as a
// model of the two contents (current, durable) says.
func TestRandomFileAgainstModel(t *testing.T) {
	testproc.Long(t)
	f := mount(t, Ordered, 0)
	p := filepath.Join(f.Dir, "f")
	write(t, p, nil, true)
	var cur, durable []byte
	rng := rand.New(rand.NewPCG(1, 2))
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	// Closed before the unmount (cleanups run last first), even if the
	// test fails: an open file of this process would keep it busy.
	t.Cleanup(func() { fh.Close() })
	for i := range 2000 {
		switch r := rng.IntN(100); {
		case r < 60:
			off := rng.IntN(40000)
			data := make([]byte, 1+rng.IntN(9000))
			for j := range data {
				data[j] = byte(1 + rng.IntN(255))
			}
			_, err := fh.WriteAt(data, int64(off))
			must(t, err)
			if off+len(data) > len(cur) {
				cur = append(cur, make([]byte, off+len(data)-len(cur))...)
			}
			copy(cur[off:], data)
		case r < 75:
			size := rng.IntN(45000)
			must(t, fh.Truncate(int64(size)))
			if size < len(cur) {
				cur = cur[:size]
			} else {
				cur = append(cur, make([]byte, size-len(cur))...)
			}
		case r < 90:
			must(t, fh.Sync())
			durable = slices.Clone(cur)
		default:
			fh.Close()
			cut(f)
			cur = slices.Clone(durable)
			if fh, err = os.OpenFile(p, os.O_RDWR, 0); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(p)
		must(t, err)
		if !bytes.Equal(got, cur) {
			t.Fatalf("step %d: read %d bytes, model has %d (first difference at %d)", i, len(got), len(cur), firstDiff(got, cur))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSyncDelay checks that SetSyncDelay slows fsync and fdatasync, and
// nothing else, until it is set back to 0.
func TestSyncDelay(t *testing.T) {
	f := mount(t, Ordered, 0)
	const delay = 300 * time.Millisecond
	file, err := os.Create(filepath.Join(f.Dir, "wal"))
	must(t, err)
	defer file.Close()
	f.SetSyncDelay(delay)
	start := time.Now()
	_, err = file.Write([]byte("entry"))
	must(t, err)
	if took := time.Since(start); took >= delay {
		t.Errorf("a write took %v with a sync delay of %v: only syncs wait", took, delay)
	}
	for _, sync := range []struct {
		name string
		call func() error
	}{{"fsync", file.Sync}, {"fdatasync", func() error { return syscall.Fdatasync(int(file.Fd())) }}} {
		start := time.Now()
		must(t, sync.call())
		if took := time.Since(start); took < delay {
			t.Errorf("%s took %v with a sync delay of %v", sync.name, took, delay)
		}
	}
	f.SetSyncDelay(0)
	start = time.Now()
	must(t, file.Sync())
	if took := time.Since(start); took >= delay {
		t.Errorf("fsync took %v after the delay was set back to 0", took)
	}
}
