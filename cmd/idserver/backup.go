package main

// idserver backup and idserver restore: the safe path for a one-node
// cluster, which has nothing outside its disk to ask what it issued after a
// copy was taken (cluster/restore.go).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/cluster"
	"idserver/persist"
)

// splitPositional takes the one positional argument, before or after the
// flags, out of args.
func splitPositional(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	if len(args) > 0 && !strings.HasPrefix(args[len(args)-1], "-") {
		return args[len(args)-1], args[:len(args)-1]
	}
	return "", args
}

// runBackup: idserver backup --from host:port DIR writes a consistent image
// of a running node (CLUSTER BACKUP) into DIR/idserver-backup.json.
func runBackup(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	dir, rest := splitPositional(args)
	fs := flag.NewFlagSet("idserver backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "127.0.0.1:6380", "RESP address of the node to back up")
	pass := fs.String("requirepass", getenv("IDSERVER_REQUIREPASS"), "the node's --requirepass")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the node")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: idserver backup --from host:port [--requirepass P] DIR")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, rest, stdout, stderr); done {
		return code
	}
	if dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		fmt.Fprintf(stderr, "idserver backup: %s is not empty\n", dir)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: *from, Password: *pass, Protocol: 2, DisableIdentity: true, ReadTimeout: *timeout})
	defer c.Close()
	img, err := c.Do(ctx, "CLUSTER", "BACKUP").Text()
	if err != nil {
		fmt.Fprintf(stderr, "idserver backup: %s: %v\n", *from, err)
		return 1
	}
	if err := persist.WriteFileSync(filepath.Join(dir, cluster.BackupFile), []byte(img)); err != nil {
		fmt.Fprintln(stderr, "idserver backup:", err)
		return 1
	}
	fmt.Fprintf(stdout, "backed up %s into %s (%d bytes); restore it with: idserver restore %s --dir NEWDIR\n", *from, dir, len(img), dir)
	return 0
}

// runRestore: idserver restore BACKUP --dir DIR writes a new data
// directory from a backup (idserver backup) or a copy of a data directory,
// with every tag and the time high-water moved past what the node could
// have issued since.
func runRestore(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	src, rest := splitPositional(args)
	fs := flag.NewFlagSet("idserver restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the new data directory (absent or empty)")
	skip := fs.Int64("skip", 1_000_000_000_000, "how far every tag skips past its high-water in the backup (and where tags it does not hold start)")
	skipTime := fs.Duration("skip-time", time.Minute, "how far past the restore's clock (plus --window and --max-borrow) the time high-water moves")
	window := fs.Duration("window", envDuration(getenv, "IDSERVER_WINDOW", 3*time.Second), "the node's --window")
	borrow := fs.Duration("max-borrow", envDuration(getenv, "IDSERVER_MAX_BORROW", time.Second), "the node's --max-borrow")
	lease := fs.Duration("worker-lease", envDuration(getenv, "IDSERVER_WORKER_LEASE", 10*time.Second), "the node's --worker-lease")
	again := fs.Bool("again", false, "restore a backup that was restored before, skipping past every earlier restore's values too "+
		"(the node restored before must be stopped for good: two nodes restored from one backup share a worker ID)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: idserver restore BACKUP --dir NEWDIR [--skip N] [--skip-time D] [--again]\n"+
			"BACKUP is a directory written by idserver backup, or a copy of a data directory (cp -a, rsync, tar)")
		fs.PrintDefaults()
	}
	if code, done := parseSubcommand(fs, rest, stdout, stderr); done {
		return code
	}
	if src == "" || *dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if *skip < 1 || *skipTime < 0 {
		fmt.Fprintln(stderr, "idserver restore: --skip must be at least 1 and --skip-time not negative")
		return 2
	}
	img, err := readImage(src)
	if err != nil {
		fmt.Fprintln(stderr, "idserver restore:", err)
		return 1
	}
	// Every restore is recorded in the backup, before it is made: a second
	// restore of one backup would hand out again what the first one's node
	// issued. One that the checks refuse is never made, nor recorded.
	if err := cluster.CheckRestore(img, *dir); err != nil {
		fmt.Fprintln(stderr, "idserver restore:", err)
		return 1
	}
	prior, err := priorRestores(src)
	if err != nil {
		fmt.Fprintln(stderr, "idserver restore:", err)
		return 1
	}
	total := *skip
	if len(prior) > 0 {
		last := prior[len(prior)-1]
		if !*again {
			fmt.Fprintf(stderr, "idserver restore: %s was restored already (%d time(s), last into %s at %s): the node restored from it may have "+
				"handed out values a second restore would hand out again. Restore from a newer backup; or, if every node restored from it is "+
				"stopped for good, add --again (this restore then also skips past what they could have issued)\n",
				src, len(prior), last.Dir, last.At.Format(time.RFC3339))
			return 1
		}
		var above int64
		for _, r := range prior {
			above = max(above, r.Above)
		}
		total = above + min(*skip, math.MaxInt64-above)
	}
	ahead := (*window + *borrow + *skipTime).Milliseconds()
	var floor int64 // past the IDs of every node restored from this backup before
	for _, r := range prior {
		if r.IDsBelowUnixMS == 0 { // a restore whose end was not recorded: bound it from its start
			r.IDsBelowUnixMS = r.At.UnixMilli() + 2*ahead
		}
		floor = max(floor, r.IDsBelowUnixMS)
	}
	abs, _ := filepath.Abs(*dir)
	rec := restoreRecord{At: time.Now().UTC(), Dir: abs, Above: total + min(*skip, math.MaxInt64-total)}
	if err := recordRestore(src, append(prior, rec)); err != nil {
		fmt.Fprintln(stderr, "idserver restore: cannot record the restore in the backup (a read-only backup? copy it first):", err)
		return 1
	}
	res, err := cluster.Restore(img, *dir, cluster.RestoreOptions{SkipValues: total, FloorUnixMS: floor,
		AheadMS: ahead, WorkerLease: *lease, Now: time.Now()})
	if err != nil {
		fmt.Fprintln(stderr, "idserver restore:", err)
		return 1
	}
	// The restored node's IDs start at StartAboveMS, ahead of the clock by
	// up to ahead; until the clock passes them they stay within another
	// ahead of it (--window, --max-borrow).
	rec.IDsBelowUnixMS = res.StartAboveMS + res.Epoch + ahead
	if err := recordRestore(src, append(prior, rec)); err != nil {
		fmt.Fprintln(stderr, "idserver restore: restored, but cannot record where its IDs start in the backup:", err)
	}
	fmt.Fprintf(stdout, "restored node %s into %s: %d tags skipped %d values (new tags start above %d), IDs start above time %d ms, new cluster ID %s\n",
		res.NodeID, *dir, res.Tags, total, res.TagBase, res.StartAboveMS, res.ClusterID)
	return 0
}

// restoredFile, in a backup (or a copied data directory), records every
// restore made from it.
const restoredFile = "RESTORED.json"

// restoreRecord is one restore of a backup. Above bounds the tag values
// the restored node may hand out, as the skip bounds the original's: the
// values it started above plus its skip.
type restoreRecord struct {
	At    time.Time `json:"at"`
	Dir   string    `json:"dir"`
	Above int64     `json:"above"`
	// IDsBelowUnixMS bounds the times of the IDs the restored node issued
	// while its clock was behind its start (after that, the clock leads).
	IDsBelowUnixMS int64 `json:"ids_below_unix_ms,omitempty"`
}

func priorRestores(src string) ([]restoreRecord, error) {
	var recs []restoreRecord
	data, err := os.ReadFile(filepath.Join(src, restoredFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &recs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v (it records the restores made from this backup; remove it only if none was)", filepath.Join(src, restoredFile), err)
	}
	return recs, nil
}

func recordRestore(src string, recs []restoreRecord) error {
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	return persist.WriteFileSync(filepath.Join(src, restoredFile), data)
}

// readImage reads a backup directory's image, or the image of a copy of
// a data directory.
func readImage(src string) (cluster.Image, error) {
	var img cluster.Image
	data, err := os.ReadFile(filepath.Join(src, cluster.BackupFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &img); err != nil {
			return img, fmt.Errorf("%s: %v", filepath.Join(src, cluster.BackupFile), err)
		}
		return img, nil
	case !errors.Is(err, os.ErrNotExist):
		return img, err
	}
	if _, err := os.Stat(filepath.Join(src, "pebble")); err != nil {
		return img, fmt.Errorf("%s holds neither %s (idserver backup) nor a data directory (pebble/)", src, cluster.BackupFile)
	}
	return cluster.ImageOf(src)
}

func envDuration(getenv func(string) string, name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(getenv(name)); err == nil {
		return d
	}
	return def
}

// parseSubcommand parses a subcommand's flags: --help prints the usage on
// stdout and exits 0, a bad flag prints the error and the usage on stderr
// and exits 2, each once.
func parseSubcommand(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard) // the flag package's own messages; printed below
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		fs.Usage()
		return 2, true
	}
	fs.SetOutput(stderr)
	return 0, false
}
