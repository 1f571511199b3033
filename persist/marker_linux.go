package persist

import "golang.org/x/sys/unix"

func statMarker(path string) (markerStat, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME|unix.STATX_CTIME, &st); err != nil {
		return markerStat{}, err
	}
	m := markerStat{Ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		m.BirthNS = st.Btime.Sec*1e9 + int64(st.Btime.Nsec)
	} else {
		m.CtimeNS = st.Ctime.Sec*1e9 + int64(st.Ctime.Nsec)
	}
	return m, nil
}
