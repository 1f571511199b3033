package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"idserver/internal/testproc"
)

// TestFullDiskRefusesWritesAndRecovers: a store on a 16 MiB tmpfs, the
// file system then filled to the last byte by another file (as the fault
// campaign's disk-full does). Every write (Set, SetSync, a batch) is
// refused with ErrDiskFull instead of reaching Pebble, whose log write
// would panic; once the file is removed writes succeed again, and after a
// reopen every write acknowledged before is there.
func TestFullDiskRefusesWritesAndRecovers(t *testing.T) {
	mnt, dir, s := storeOnTmpfs(t)
	filler := fillUp(t, mnt)
	b := s.NewBatch()
	b.Set("batch", []byte("v"))
	for name, err := range map[string]error{
		"Set": s.Set("k", []byte("v")), "SetSync": s.SetSync("k", []byte("v")),
		"Commit": b.Commit(), "CommitSync": b.CommitSync(), "SetHighWaterSync": s.SetHighWaterSync(12345),
		"SetHighWaterWallSync": s.SetHighWaterWallSync(12345, 12000),
	} {
		if !errors.Is(err, ErrDiskFull) {
			t.Errorf("%s on a full disk: %v, want ErrDiskFull", name, err)
		}
	}
	t.Logf("on the full disk: %v", s.Room())
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSync("after", []byte("v")); err != nil {
		t.Fatalf("SetSync once space is freed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"before/0", "before/99", "after"} {
		if _, ok, err := s.Get(k); !ok || err != nil {
			t.Errorf("%s after the reopen: %v %v", k, ok, err)
		}
	}
	if _, ok, _ := s.Get("k"); ok {
		t.Error("a write refused on the full disk is there after the reopen")
	}
}

// TestOpenOnAFullDiskIsRefused: a store whose log holds writes not yet in
// a table (every store Close leaves so), reopened on a file system filled
// to the last byte, is refused with ErrDiskFull at once. Pebble would
// replay the log into a table, fail to write it and retry for ever,
// spinning a core and logging an error per try (the node never listening,
// SIGTERM unanswered). Once space is freed the
// store opens with every write.
func TestOpenOnAFullDiskIsRefused(t *testing.T) {
	mnt, dir, s := storeOnTmpfs(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := fillUp(t, mnt)
	opened := make(chan error, 1)
	go func() {
		s, err := Open(dir)
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if !errors.Is(err, ErrDiskFull) {
			t.Fatalf("Open on a full disk: %v, want ErrDiskFull", err)
		}
		t.Logf("Open on the full disk: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Open on a full disk has not returned in 10s")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open once space is freed: %v", err)
	}
	defer s.Close()
	for _, k := range []string{"before/0", "before/99"} {
		if _, ok, err := s.Get(k); !ok || err != nil {
			t.Errorf("%s after the reopen: %v %v", k, ok, err)
		}
	}
}

// storeOnTmpfs opens a store in data/ on a 16 MiB tmpfs and writes 100
// keys, before/0 to before/99, durably; it returns the mount, the store's
// directory and the store.
func storeOnTmpfs(t *testing.T) (mnt, dir string, s *Store) {
	t.Helper()
	mnt = testproc.Tmpfs(t, "16m")
	dir = filepath.Join(mnt, "data")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := s.SetSync(fmt.Sprintf("before/%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	return mnt, dir, s
}

// fillUp fills the file system of dir to the last byte with one file, as
// the fault campaign's disk-full does, and returns that file's path.
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			return filler // ENOSPC: the file system is full
		}
	}
}
