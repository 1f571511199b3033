package persist

import "golang.org/x/sys/unix"

// freeBytes is the space on dir's file system that an unprivileged write
// may use.
func freeBytes(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}

// reserveFor is the reserve of a store in dir: a tenth of its file system,
// at most maxReserve.
func reserveFor(dir string) uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return min(st.Blocks*uint64(st.Bsize)/10, maxReserve)
}
