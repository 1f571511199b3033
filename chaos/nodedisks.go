package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"idserver/chaos/lazyfs"
)

// diskSize is each node's disk (tmpfs or lazyfs): room for a campaign's
// Raft log and Pebble files, small enough to fill in a moment.
const (
	diskSize      = "256m"
	diskSizeBytes = 256 << 20
)

// pidFile, in a campaign's work directory, names the process that owns it.
const pidFile = "campaign.pid"

// removeStaleDisks unmounts the tmpfs disks of earlier campaigns in the
// temporary directory whose process is gone (killed before it could clean
// up: SIGKILL, a test timeout), and removes their directories. A directory
// without a pid file, or whose process still runs, is left alone.
func removeStaleDisks() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "idserver-chaos-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, pidFile))
		if err != nil {
			continue
		}
		pid := strings.TrimSpace(string(b))
		if _, err := strconv.Atoi(pid); err != nil || pid == strconv.Itoa(os.Getpid()) {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // still running
		}
		disks, _ := filepath.Glob(filepath.Join(dir, "disk-slot*"))
		failed := false
		for _, d := range disks {
			if out, err := exec.Command("umount", "-l", d).CombinedOutput(); err != nil && !strings.Contains(string(out), "not mounted") {
				failed = true
			}
		}
		if !failed {
			os.RemoveAll(dir)
		}
	}
}

// mountDisks gives each slot a tmpfs of its own under root, so that a
// fault can fill one member's disk. It needs root; the error says why not.
func mountDisks(root string, slots int) (map[int]string, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a full disk needs root (a tmpfs per node)")
	}
	removeStaleDisks()
	if err := os.WriteFile(filepath.Join(root, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	disks := map[int]string{}
	for slot := range slots {
		dir := filepath.Join(root, fmt.Sprintf("disk-slot%d", slot))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			unmountDisks(disks)
			return nil, err
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+diskSize+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
			unmountDisks(disks)
			return nil, fmt.Errorf("mount tmpfs on %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
		disks[slot] = dir
	}
	return disks, nil
}

// mountLazyDisks gives each slot a lazyfs of its own under root (served by
// this process, in memory, diskSizeBytes each), so that a power cut can
// drop what a node did not sync. It needs root, /dev/fuse and fusermount;
// the error says which is missing.
func mountLazyDisks(root string, slots int, mode lazyfs.Mode) (map[int]string, map[int]*lazyfs.FS, error) {
	if err := lazyfs.Available(); err != nil {
		return nil, nil, err
	}
	removeStaleDisks()
	if err := os.WriteFile(filepath.Join(root, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, nil, err
	}
	disks, lazy := map[int]string{}, map[int]*lazyfs.FS{}
	for slot := range slots {
		dir := filepath.Join(root, fmt.Sprintf("disk-slot%d", slot))
		err := os.MkdirAll(dir, 0o755)
		var f *lazyfs.FS
		if err == nil {
			f, err = lazyfs.Mount(dir, lazyfs.Options{Mode: mode, Capacity: diskSizeBytes})
		}
		if err != nil {
			unmountLazyDisks(lazy)
			return nil, nil, err
		}
		disks[slot], lazy[slot] = dir, f
	}
	return disks, lazy, nil
}

func unmountLazyDisks(lazy map[int]*lazyfs.FS) error {
	var errs []error
	for _, f := range lazy {
		errs = append(errs, f.Unmount())
	}
	return errors.Join(errs...)
}

func unmountDisks(disks map[int]string) error {
	var errs []error
	for _, dir := range disks {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// fillDisk writes a file on dir's file system until it is full and returns
// its path and size.
func fillDisk(dir string) (string, int64, error) {
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		return path, 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		m, err := f.Write(chunk)
		n += int64(m)
		if err != nil {
			return path, n, nil // ENOSPC: full
		}
		if n > 1<<30 {
			return path, n, errors.New("wrote 1 GiB and the disk is not full")
		}
	}
}
