package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"idserver/internal/testproc"
	"idserver/internal/wait"
	"idserver/persist"
)

// TestFSMWaitsForDiskSpaceWithoutItsLock: the disk fills between an
// apply's check for room and its write, so the write is refused and the
// apply waits for space. Meanwhile the state machine's readers (a tag's
// high-water for GET, the tag count for INFO, a snapshot) answer; the
// entry is stored and published once space is freed.
func TestFSMWaitsForDiskSpaceWithoutItsLock(t *testing.T) {
	mnt := testproc.Tmpfs(t, "16m")
	store, err := persist.Open(filepath.Join(mnt, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f, err := newFSM(store, 3)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	f.stop = stop
	applyEntry(t, f, 1, newEntry(entryAlloc).uvarint(1).string("a").varint(10))

	// Leave less than the store's reserve free.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := store.Room(); !errors.Is(err, persist.ErrDiskFull) {
		t.Fatalf("room on the filled disk: %v, want ErrDiskFull", err)
	}
	// The first check for room passes (the disk is not full yet), every
	// later one sees it full.
	checks := 0
	f.room = func() error {
		if checks++; checks == 1 {
			return nil
		}
		return store.Room()
	}
	applied := make(chan any, 1)
	go func() { applied <- applyEntry(t, f, 2, newEntry(entryAlloc).uvarint(1).string("a").varint(5)) }()
	wait.For(t, 10*time.Second, "the apply waits for disk space", func() (bool, string) { return f.full.Load() != nil, "it did not" })
	read := make(chan string, 3)
	go func() {
		f.tag("a")
		read <- "tag"
		f.size()
		read <- "size"
		f.Snapshot()
		read <- "snapshot"
	}()
	for range 3 {
		select {
		case r := <-read:
			t.Logf("%s answered while the apply waits for space", r)
		case <-time.After(3 * time.Second):
			t.Fatal("a reader of the state machine waited 3s for an apply waiting for disk space")
		}
	}
	select {
	case r := <-applied:
		t.Fatalf("the apply returned %v on a full disk", r)
	default:
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-applied:
		if res := r.([]allocResult); res[0].First != 11 || res[0].Last != 15 {
			t.Fatalf("the apply once space was freed: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the apply did not finish 10s after space was freed")
	}
	if f.published != 2 {
		t.Fatalf("published index %d, want 2", f.published)
	}
	g, err := newFSM(store, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := g.tag("a"); v != 15 || g.applied() != 2 {
		t.Fatalf("stored: tag a at %d, applied %d; want 15 and 2", v, g.applied())
	}
}
