//go:build !linux

package persist

import (
	"os"
	"syscall"
)

// statMarker off Linux (a developer's machine) records the inode number
// only: a copy still makes a new file, but a copy put back where its inode
// number was free again is not seen.
func statMarker(path string) (markerStat, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return markerStat{}, err
	}
	m := markerStat{}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		m.Ino = uint64(st.Ino)
	}
	return m, nil
}
