package cluster

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// removeUnfinishedSnapshots removes from dir (raft/snapshots) what a stop
// during a snapshot left: Raft writes each snapshot into a directory named
// with ".tmp" and renames it once it is whole, and never lists, opens or
// reaps one that still has the suffix. Nothing reads such a directory, and
// at 1,000,000 tags each one holds tens of megabytes; the start (the only
// writer of dir, under the data directory's lock) removes them before
// Raft opens the store.
func removeUnfinishedSnapshots(dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(path); err != nil {
			return err
		}
		log.Info("removed a Raft snapshot a stop cut short", "dir", path)
	}
	return nil
}
