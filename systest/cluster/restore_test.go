package cluster

// Restores that cannot repeat: a data directory
// restored from an older copy, on one node and on a member of three.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/wait"
)

// ledger holds every ID and tag value any reply carried, and counts repeats.
type ledger struct {
	mu      sync.Mutex
	ids     map[int64]string
	vals    map[string]map[int64]string
	repeats int
	first   []string // the first few repeats, for the failure message
}

func newLedger() *ledger {
	return &ledger{ids: map[int64]string{}, vals: map[string]map[int64]string{}}
}

func (l *ledger) repeat(what string) {
	l.repeats++
	if len(l.first) < 5 {
		l.first = append(l.first, what)
	}
}

func (l *ledger) addIDs(who string, ids []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if by, dup := l.ids[id]; dup {
			l.repeat(fmt.Sprintf("ID %d from %s and %s", id, by, who))
		}
		l.ids[id] = who
	}
}

func (l *ledger) addValues(who, tag string, first, last int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.vals[tag]
	if m == nil {
		m = map[int64]string{}
		l.vals[tag] = m
	}
	for v := first; v <= last; v++ {
		if by, dup := m[v]; dup {
			l.repeat(fmt.Sprintf("%s value %d from %s and %s", tag, v, by, who))
		}
		m[v] = who
	}
}

func (l *ledger) values() (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.vals {
		n += len(m)
	}
	return n
}

// issued is how many IDs and values the ledger holds.
func (l *ledger) issued() int {
	l.mu.Lock()
	n := len(l.ids)
	l.mu.Unlock()
	return n + l.values()
}

// midLoad waits until the ledger holds more than it did at from and fails
// the test if loading closed first: what follows happens mid-load.
func (l *ledger) midLoad(t *testing.T, from int, loading chan struct{}) {
	t.Helper()
	wait.For(t, 20*time.Second, "values issued by the load", func() (bool, string) {
		n := l.issued()
		return n > from, fmt.Sprintf("%d in the ledger", n)
	})
	select {
	case <-loading:
		t.Fatal("the load ended before the step meant to happen mid-load")
	default:
	}
}

func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.repeats > 0 {
		t.Fatalf("%d repeated IDs or values (of %d IDs and the values of %d tags), first: %v", l.repeats, len(l.ids), len(l.vals), l.first)
	}
}

// load issues NEXTID 100, INCR and NEXTSEG 100 on each tag from c until
// stop is closed, or for d when stop is nil, and records every reply.
// Errors (a node starting, TRYAGAIN) are retried; they carry nothing.
func load(l *ledger, who string, c *redis.Client, d time.Duration, tags ...string) {
	ctx := context.Background()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for time.Now().Before(end) {
			if ids, err := c.Do(ctx, "NEXTID", 100).Int64Slice(); err == nil {
				l.addIDs(who, ids)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; time.Now().Before(end); i++ {
			tag := tags[i%len(tags)]
			if i%2 == 0 {
				if v, err := c.Do(ctx, "INCR", tag).Int64(); err == nil {
					l.addValues(who, tag, v, v)
					continue
				}
			} else if r, err := c.Do(ctx, "NEXTSEG", tag, 100).Int64Slice(); err == nil && len(r) == 2 {
				l.addValues(who, tag, r[0], r[1])
				continue
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
}

// copyDir copies a data directory as an operator's backup does: cp -a.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
	}
}

// restoreInPlace puts a copy back where the data directory was.
func restoreInPlace(t *testing.T, backup, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, dir)
}

// TestRawCopyRestoredInPlaceIsRefused: one node; a kill -9 and a plain mv
// of the data directory restart as before; a cp -a backup taken under load,
// put back in place after more load, is refused at start (exit 1) naming
// the marker file and the restore command.
func TestRawCopyRestoredInPlaceIsRefused(t *testing.T) {
	l := newLedger()
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	p := systest.StartProc(t, dir)
	load(l, "first", p.Client(), 300*time.Millisecond, "orders")
	p.Kill()
	p = systest.StartProc(t, dir) // kill -9: not a copy
	load(l, "after kill -9", p.Client(), 300*time.Millisecond, "orders")
	p.Shutdown()
	moved := filepath.Join(root, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	p = systest.StartProc(t, moved) // mv: not a copy
	c := p.Client()
	var wg sync.WaitGroup
	wg.Add(1)
	loading, from := make(chan struct{}), l.issued()
	go func() { defer wg.Done(); load(l, "before the copy", c, time.Second, "orders", "users"); close(loading) }()
	l.midLoad(t, from, loading)
	backup := filepath.Join(root, "backup")
	copyDir(t, moved, backup)
	wg.Wait()
	load(l, "after the copy", c, time.Second, "orders", "users")
	p.Kill()
	restoreInPlace(t, backup, moved)
	p, err := systest.Launch(t, moved, nil)
	if err == nil {
		load(l, "on the copy", p.Client(), 1500*time.Millisecond, "orders", "users")
		t.Fatalf("the node started on the copy put back in place; it must refuse. It then repeated %d IDs or values (of %d IDs, %d values), first: %v",
			l.repeats, len(l.ids), l.values(), l.first)
	}
	log := systest.WaitExit(t, p, err)
	for _, want := range []string{"refusing to start", "DIRECTORY-MARKER", "is a copy", "idserver restore"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, log)
		}
	}
	t.Logf("kill -9 and mv restart; the cp -a copy put back is refused: %s", lastLine(log))
	// The remedy it names, followed.
	if err := os.Rename(moved, moved+".copy"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", strings.TrimSpace(restoreRun(t, moved+".copy", "--dir", moved)))
	p = systest.StartProc(t, moved)
	load(l, "restored", p.Client(), time.Second, "orders", "users")
	l.check(t)
	t.Logf("the remedy followed: %d IDs and %d values in all, no repeat", len(l.ids), l.values())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// restoreRun runs idserver restore and fails the test unless it succeeds.
func restoreRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out := systest.RunToExit(t, append([]string{"restore"}, args...)...)
	if code != 0 {
		t.Fatalf("idserver restore %v: exit %d\n%s", args, code, out)
	}
	return out
}

// TestRestoreFromACopyNeverRepeats: one node under load; a cp -a copy taken
// mid-load; more load, a tag created after the copy; kill -9; idserver
// restore of the copy into a new directory; the restored node under load.
// No ID and no value of any tag repeats, the new tag included.
func TestRestoreFromACopyNeverRepeats(t *testing.T) {
	restoreNeverRepeats(t, func(t *testing.T, p *systest.Proc, dir, backup string) {
		copyDir(t, dir, backup)
	})
}

// TestOnlineBackupRestoredNeverRepeats: the same with idserver backup
// --from, taken from the running node mid-load.
func TestOnlineBackupRestoredNeverRepeats(t *testing.T) {
	restoreNeverRepeats(t, func(t *testing.T, p *systest.Proc, dir, backup string) {
		code, out := systest.RunToExit(t, "backup", "--from", p.Addr, backup)
		if code != 0 {
			t.Fatalf("idserver backup: exit %d\n%s", code, out)
		}
		t.Logf("%s", strings.TrimSpace(out))
	})
}

func restoreNeverRepeats(t *testing.T, backUp func(t *testing.T, p *systest.Proc, dir, backup string)) {
	l := newLedger()
	root := t.TempDir()
	dir, backup, restored := filepath.Join(root, "data"), filepath.Join(root, "backup"), filepath.Join(root, "restored")
	p := systest.StartProc(t, dir)
	c := p.Client()
	var wg sync.WaitGroup
	wg.Add(1)
	loading, from := make(chan struct{}), l.issued()
	go func() {
		defer wg.Done()
		load(l, "before the backup", c, 1500*time.Millisecond, "orders", "users")
		close(loading)
	}()
	l.midLoad(t, from, loading)
	backUp(t, p, dir, backup)
	wg.Wait()
	load(l, "after the backup", c, 1500*time.Millisecond, "orders", "users", "late")
	p.Kill()
	out := restoreRun(t, backup, "--dir", restored)
	t.Logf("%s", strings.TrimSpace(out))
	before := len(l.ids) + l.values()
	p = systest.StartProc(t, restored)
	load(l, "restored", p.Client(), 1500*time.Millisecond, "orders", "users", "late")
	if len(l.ids)+l.values() == before {
		t.Fatal("the restored node issued nothing")
	}
	p.Kill()
	p = systest.StartProc(t, restored) // and a plain restart of the restored directory is not a copy
	load(l, "restored, restarted", p.Client(), 300*time.Millisecond, "orders", "late")
	l.check(t)
	t.Logf("%d IDs and %d tag values, no repeat", len(l.ids), l.values())
}

// TestRestoredMemberNeverRepeats: three nodes under load. A member, just
// restarted (its clock a window ahead), has its data directory copied
// (cp -a) mid-load, put back in place after more load; later another copy is put back after the member restarted in
// between, with its marker re-recorded as a file-system snapshot would keep
// it (the incarnation catches that one). Every ID and value from all three
// nodes is unique.
func TestRestoredMemberNeverRepeats(t *testing.T) {
	l := newLedger()
	ms := systest.StartMembers(t, 3)
	tags := []string{"orders", "users"}
	all := func(d time.Duration, phase string) {
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() { defer wg.Done(); load(l, fmt.Sprintf("node %d %s", i, phase), m.P.Client(), d, tags...) }()
		}
		wg.Wait()
	}
	restored := ms[2]
	var unsaid []int
	for round, snapshotLike := range []bool{false, true} {
		backup := filepath.Join(t.TempDir(), "backup")
		// Restarted a moment before: its clock runs up to a window ahead.
		restored.P.Kill()
		restored.Start(t)
		var wg sync.WaitGroup
		wg.Add(1)
		loading, from := make(chan struct{}), l.issued()
		go func() {
			defer wg.Done()
			all(1500*time.Millisecond, fmt.Sprintf("round %d before the copy", round))
			close(loading)
		}()
		l.midLoad(t, from, loading)
		copyDir(t, restored.Dir, backup)
		wg.Wait()
		if snapshotLike {
			restored.P.Kill()
			restored.Start(t)
		}
		all(1500*time.Millisecond, fmt.Sprintf("round %d after the copy", round))
		restored.P.Kill()
		restoreInPlace(t, backup, restored.Dir)
		if snapshotLike {
			keepMarker(t, restored.Dir)
		}
		restored.Start(t)
		all(1500*time.Millisecond, fmt.Sprintf("round %d restored", round))
		if !strings.Contains(restored.P.Log(), "older than what the cluster committed") {
			unsaid = append(unsaid, round)
		}
	}
	l.check(t)
	if len(unsaid) > 0 {
		t.Fatalf("rounds %v: the restored member did not say it took the rollback path", unsaid)
	}
	t.Logf("%d IDs and %d tag values from three nodes, a member restored twice from older copies, no repeat", len(l.ids), l.values())
}

// TestOneBackupRestoredTwice: a backup restored, the restored node under
// load and stopped; a second restore of the same backup is refused, naming
// the first; with --again it skips past what the first restored node could
// have issued: no ID and no value repeats across the original node and
// both restored ones (before, the second restore handed out the first
// one's values again).
func TestOneBackupRestoredTwice(t *testing.T) {
	l := newLedger()
	root := t.TempDir()
	dir, backup := filepath.Join(root, "data"), filepath.Join(root, "backup")
	first, second := filepath.Join(root, "first"), filepath.Join(root, "second")
	p := systest.StartProc(t, dir)
	load(l, "before the backup", p.Client(), 500*time.Millisecond, "orders")
	if code, out := systest.RunToExit(t, "backup", "--from", p.Addr, backup); code != 0 {
		t.Fatalf("idserver backup: exit %d\n%s", code, out)
	}
	load(l, "after the backup", p.Client(), 500*time.Millisecond, "orders")
	p.Kill()
	// A restore refused by its checks (into the live directory, not empty)
	// is not recorded: the next one needs no --again.
	if code, out := systest.RunToExit(t, "restore", backup, "--dir", dir); code != 1 || !strings.Contains(out, "is not empty") {
		t.Fatalf("a restore into a directory that is not empty: exit %d\n%s", code, out)
	}
	restoreRun(t, backup, "--dir", first)
	p = systest.StartProc(t, first)
	load(l, "first restore", p.Client(), time.Second, "orders", "late")
	p.Kill()
	code, out := systest.RunToExit(t, "restore", backup, "--dir", second)
	if code != 1 || !strings.Contains(out, "was restored already") || !strings.Contains(out, first) || !strings.Contains(out, "--again") {
		t.Fatalf("a second restore of one backup: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(second); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused restore left %s behind: %v", second, err)
	}
	t.Logf("%s", strings.TrimSpace(restoreRun(t, backup, "--dir", second, "--again")))
	p = systest.StartProc(t, second)
	load(l, "second restore", p.Client(), time.Second, "orders", "late")
	l.check(t)
	t.Logf("%d IDs and %d tag values, no repeat", len(l.ids), l.values())
}
