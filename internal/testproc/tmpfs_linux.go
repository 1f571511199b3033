package testproc

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size (as mount's size= option, "16m") on a
// temporary directory for the length of the test and returns it: a file
// system a test can fill. It skips the test when not root (.ci/run is root)
// or when the mount is refused.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	NeedRoot(t, "mounting a tmpfs")
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}
