package upgrade

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// oldCommit is the earlier build a cluster of the current code is rolled
// from and back to, member by member, with no stop of the whole cluster: a
// build that passed a 30-minute fault campaign (a release), whose log
// entries, Raft snapshots (the state machine's JSON of meta and tags) and
// Raft-port handshake are the ones the current code reads and writes. Its
// members and the current code's serve in one cluster, each version installs
// the other's snapshot sent by a leader, and each restarts on a directory
// whose snapshots the other wrote. A change that breaks any of that fails
// TestRollingUpgradeWithSnapshots; moving oldCommit forward says that
// clusters of the build it named can no longer be upgraded in place.
const oldCommit = "1fc48af2e9efd5dbcbdfe9f072c62799d3f1c16f"

// oldVersion is what the old build answers as INFO's idserver_version.
var oldVersion = "upgrade-old-" + oldCommit[:12]

// The old build takes Raft's snapshot threshold and interval from the
// environment, as the current build reads --raft-snapshot-threshold and
// --raft-snapshot-interval from IDSERVER_RAFT_SNAPSHOT_THRESHOLD and
// IDSERVER_RAFT_SNAPSHOT_INTERVAL: oldCommit has no such flag, and Raft's
// defaults (8192 entries, checked every 2 to 4 minutes) take no snapshot
// within the test. The patch changes when snapshots are taken, not what
// they hold. oldPatchFrom must occur once in oldPatchFile.
const (
	oldPatchFile = "node/node.go"
	oldPatchFrom = "SnapshotThreshold: cfg.SnapshotThreshold,"
	oldPatchTo   = "SnapshotThreshold: envSnapshotThreshold(cfg.SnapshotThreshold), SnapshotInterval: envSnapshotInterval(),"
	oldHookFile  = "node/snapshot_env_upgrade.go"
	oldHook      = `package node

import (
	"os"
	"strconv"
	"time"
)

func envSnapshotThreshold(v uint64) uint64 {
	if n, err := strconv.ParseUint(os.Getenv("IDSERVER_RAFT_SNAPSHOT_THRESHOLD"), 10, 64); err == nil {
		return n
	}
	return v
}

func envSnapshotInterval() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("IDSERVER_RAFT_SNAPSHOT_INTERVAL"))
	return d
}
`
)

// snapshotEnv makes every member, of either build, take a Raft snapshot
// once 64 entries follow the last one (checked every 200 to 400 ms) and keep
// 32 entries in its log after it, so that a member with an empty log is
// sent the leader's snapshot.
var snapshotEnv = []string{"IDSERVER_RAFT_SNAPSHOT_THRESHOLD=64", "IDSERVER_RAFT_SNAPSHOT_INTERVAL=200ms"}

// unavailable skips the test for a reason outside the code (no git, a
// shallow clone), and fails it where that must not happen (CI is set).
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set: "+format, args...)
	}
	t.Skipf(format, args...)
}

// buildOld is the binary of oldCommit, patched as oldPatch says: built once
// into a directory under os.TempDir named by the commit, the patch and the
// Go version, and taken from there by later test runs.
func buildOld(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "git not found (apt-get install git): the upgrade test builds %s from this repository's history", oldCommit)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		unavailable(t, "not in a git checkout (git rev-parse --show-toplevel: %v): the upgrade test builds %s from its history", err, oldCommit)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", oldCommit+"^{commit}").Run(); err != nil {
		unavailable(t, "commit %s is not in %s (a shallow clone? git fetch --unshallow)", oldCommit, root)
	}
	key := sha256.Sum256([]byte(oldCommit + oldPatchFrom + oldPatchTo + oldHook + runtime.Version()))
	cache := filepath.Join(os.TempDir(), "idserver-upgrade-"+hex.EncodeToString(key[:8]))
	binary := filepath.Join(cache, "idserver")
	if _, err := os.Stat(binary); err == nil {
		return binary
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", oldCommit)
	extract := exec.Command("tar", "-x", "-C", src)
	if extract.Stdin, err = archive.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	var archiveErr, extractErr strings.Builder
	archive.Stderr, extract.Stderr = &archiveErr, &extractErr
	if err := extract.Start(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v %s", oldCommit, err, archiveErr.String())
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("tar -x of %s: %v %s", oldCommit, err, extractErr.String())
	}
	patched := filepath.Join(src, oldPatchFile)
	text, err := os.ReadFile(patched)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), oldPatchFrom); n != 1 {
		t.Fatalf("%s of %s holds %q %d times, not once: the patch does not apply", oldPatchFile, oldCommit, oldPatchFrom, n)
	}
	if err := os.WriteFile(patched, []byte(strings.Replace(string(text), oldPatchFrom, oldPatchTo, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, oldHookFile), []byte(oldHook), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	partial := fmt.Sprintf("%s.%d", binary, os.Getpid())
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+oldVersion, "-o", partial, "./cmd/idserver")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", oldCommit, err, out)
	}
	if err := os.Rename(partial, binary); err != nil {
		t.Fatal(err)
	}
	return binary
}

// slot is one member's place: its ports stay while the process on them is
// restarted on another build, or replaced by a new member with an empty
// directory (a pod rescheduled without its volume).
type slot struct {
	name       string
	port, raft int
	dir        string
	old        bool // runs the old build
	srv        *testproc.Server
	admin      *redis.Client
}

func (s *slot) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *slot) build() string {
	if s.old {
		return "old " + oldCommit[:12]
	}
	return "current"
}

// rollingCluster is three slots and the two builds.
type rollingCluster struct {
	t              *testing.T
	oldBin, newBin string
	slots          []*slot
}

// start runs s's build on s.dir, joining the other slots (none for the
// first start of the first slot), and waits until it issues an ID and runs
// the build it should.
func (c *rollingCluster) start(s *slot, join bool) {
	c.t.Helper()
	args := []string{"--port", strconv.Itoa(s.port), "--raft-addr", "127.0.0.1:" + strconv.Itoa(s.raft)}
	if join {
		var others []string
		for _, o := range c.slots {
			if o != s {
				others = append(others, o.addr())
			}
		}
		args = append(args, "--join", strings.Join(others, ","))
	}
	binary := c.newBin
	if s.old {
		binary = c.oldBin
	}
	srv, err := testproc.Start(c.t, testproc.Config{Binary: binary, Dir: s.dir, Args: args, Env: snapshotEnv, Ready: []any{"NEXTID"}})
	if err != nil {
		c.t.Fatalf("slot %s on the %s build: %v", s.name, s.build(), err)
	}
	s.srv = srv
	c.t.Logf("%s slot %s ready on the %s build (pid %d, dir %s)", time.Now().Format(stamp), s.name, s.build(), srv.Cmd.Process.Pid, s.dir)
	version := parseInfo(s.admin.Info(context.Background(), "server").Val())["idserver_version"]
	if (version == oldVersion) != s.old {
		c.t.Fatalf("slot %s should run the %s build, INFO says version %q", s.name, s.build(), version)
	}
}

// stop ends s with SIGTERM, as a rolling update does.
func (c *rollingCluster) stop(s *slot) {
	c.t.Helper()
	c.t.Logf("%s slot %s stops (%s build)", time.Now().Format(stamp), s.name, s.build())
	if err := s.srv.Stop(15 * time.Second); err != nil {
		c.t.Fatalf("slot %s (%s build): %v", s.name, s.build(), err)
	}
}

func parseInfo(text string) map[string]string {
	info := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info
}

func clusterInfo(s *slot) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	text, err := s.admin.Do(ctx, "CLUSTER", "INFO").Text()
	if err != nil {
		return nil
	}
	return parseInfo(text)
}

// settled waits until one slot leads three voters and every slot is a
// voter whose state machine has applied what the leader had applied when
// the wait began, and returns the leader.
func (c *rollingCluster) settled(what string) *slot {
	c.t.Helper()
	var leader *slot
	var target int64 = -1
	wait.For(c.t, 30*time.Second, what+": three voters caught up with a leader", func() (bool, string) {
		leader = nil
		infos := map[*slot]map[string]string{}
		for _, s := range c.slots {
			infos[s] = clusterInfo(s)
			if infos[s]["role"] == "Leader" {
				leader = s
			}
		}
		if leader == nil {
			return false, "no leader"
		}
		li := infos[leader]
		if li["members"] != "3" || li["raft_voters"] != "3" {
			return false, fmt.Sprintf("leader %s: members %s, voters %s", leader.name, li["members"], li["raft_voters"])
		}
		if target < 0 {
			target, _ = strconv.ParseInt(li["applied_index"], 10, 64)
		}
		for _, s := range c.slots {
			applied, _ := strconv.ParseInt(infos[s]["applied_index"], 10, 64)
			if infos[s]["raft_suffrage"] != "voter" || infos[s]["members"] != "3" || applied < target {
				return false, fmt.Sprintf("slot %s: suffrage %q, members %s, applied %d of %d", s.name, infos[s]["raft_suffrage"], infos[s]["members"], applied, target)
			}
		}
		return true, ""
	})
	return leader
}

// snapshot is a Raft snapshot's name in a data directory.
type snapshot struct {
	Index, Term uint64
}

// snapshotsIn lists the Raft snapshots in dir (a snapshot being written or
// removed as it is read is left out).
func snapshotsIn(dir string) []snapshot {
	entries, _ := os.ReadDir(filepath.Join(dir, "raft", "snapshots"))
	var list []snapshot
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "raft", "snapshots", e.Name(), "meta.json"))
		var m snapshot
		if err == nil && json.Unmarshal(b, &m) == nil {
			list = append(list, m)
		}
	}
	return list
}

// snapshotAbove waits until s's directory holds a Raft snapshot past
// index, one its process wrote.
func (c *rollingCluster) snapshotAbove(s *slot, index uint64) snapshot {
	c.t.Helper()
	var found snapshot
	wait.For(c.t, 20*time.Second, fmt.Sprintf("a snapshot past index %d on slot %s (%s build)", index, s.name, s.build()), func() (bool, string) {
		for _, sn := range snapshotsIn(s.dir) {
			if sn.Index > index {
				found = sn
				return true, ""
			}
		}
		return false, fmt.Sprint(snapshotsIn(s.dir))
	})
	return found
}

// replace stops s, and starts in its place, on an empty directory, a new
// member of the other build, joining the others. It returns the first
// snapshot the new member holds, after checking that it is one the others
// hold at an index past minIndex: the leader's, sent because the leader's
// log no longer starts at index 1, and written by the others' build.
func (c *rollingCluster) replace(s *slot, minIndex uint64) snapshot {
	c.t.Helper()
	c.stop(s)
	s.dir, s.old = c.t.TempDir(), !s.old
	sent := map[snapshot]bool{}
	var first []snapshot
	var mu sync.Mutex
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			mu.Lock()
			for _, o := range c.slots {
				if o != s {
					for _, sn := range snapshotsIn(o.dir) {
						sent[sn] = true
					}
				}
			}
			if first == nil {
				first = snapshotsIn(s.dir)
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	c.start(s, true)
	wait.For(c.t, 20*time.Second, "the new member in slot "+s.name+" holds a snapshot", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return first != nil, "none yet"
	})
	close(done)
	<-watched
	slices.SortFunc(first, func(a, b snapshot) int { return cmp.Compare(a.Index, b.Index) })
	got := first[0]
	if !sent[got] || got.Index <= minIndex {
		c.t.Fatalf("slot %s, a new member on the %s build, holds snapshot %+v first: not one the others (%s build) wrote past index %d (they held %v)",
			s.name, s.build(), got, map[bool]string{true: "old", false: "current"}[!s.old], minIndex, sent)
	}
	return got
}

// roll restarts each slot not on the wanted build on it, on its own
// directory, followers first and the leader last, waiting after each for
// the cluster to settle.
func (c *rollingCluster) roll(toOld bool, l *load) {
	c.t.Helper()
	for {
		leader := c.settled("before a restart")
		var next *slot
		for _, s := range c.slots {
			if s.old != toOld && (next == nil || next == leader) {
				next = s
			}
		}
		if next == nil {
			return
		}
		c.stop(next)
		held := snapshotsIn(next.dir)
		if len(held) == 0 {
			c.t.Fatalf("slot %s (%s build) holds no snapshot for the other build to restore at its restart", next.name, next.build())
		}
		next.old = toOld
		c.start(next, true)
		c.t.Logf("slot %s restarted on the %s build from the other build's snapshots %+v", next.name, next.build(), held)
		l.progress(c.t, fmt.Sprintf("slot %s restarted on the %s build", next.name, next.build()))
	}
}

// TestRollingUpgradeWithSnapshots rolls a three-member cluster from
// oldCommit's build to the current code and back under load, with Raft
// snapshots crossing versions both ways:
//
//  1. three old members; the old leader takes snapshots and compacts its
//     log; a follower is replaced by a current member with an empty
//     directory, which must install the old leader's snapshot;
//  2. the two old members restart on the current build, on their
//     directories (snapshots the old build wrote), followers first;
//  3. the current leader snapshots; a follower is replaced by an old member
//     with an empty directory, which must install the current leader's
//     snapshot;
//  4. the two current members restart on the old build, on directories
//     whose snapshots the current build wrote.
//
// Clients on every slot issue NEXTID, and INCR and NEXTSEG on four tags,
// two of which SET raises, throughout; every ID and value is unique, and
// every value asked for after a SET was acknowledged lies above it (or above
// an earlier SET with no reply that may have landed after it).
func TestRollingUpgradeWithSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("rolls a cluster through two builds for a minute; not in -short")
	}
	begin := time.Now()
	oldBin := buildOld(t)
	newBin, remove, err := testproc.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	t.Logf("builds ready in %v", time.Since(begin).Round(time.Millisecond))

	c := &rollingCluster{t: t, oldBin: oldBin, newBin: newBin}
	for _, name := range []string{"a", "b", "c"} {
		s := &slot{name: name, port: testproc.FreePort(t), raft: testproc.FreePort(t), dir: t.TempDir(), old: true}
		s.admin = redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { s.admin.Close() })
		c.slots = append(c.slots, s)
	}
	c.start(c.slots[0], false)
	c.start(c.slots[1], true)
	c.start(c.slots[2], true)
	leader := c.settled("three old members")

	l := startLoad(c.slots)
	defer l.stop()
	l.progress(t, "load on three old members")

	// 1. The old leader's snapshot, installed by a current member.
	taken := c.snapshotAbove(leader, 200)
	follower := c.slots[0]
	if follower == leader {
		follower = c.slots[1]
	}
	got := c.replace(follower, 0)
	t.Logf("old leader %s took snapshot %+v; slot %s, replaced by a current member, installed %+v", leader.name, taken, follower.name, got)
	l.progress(t, "a current member installed the old leader's snapshot")

	// 2. The old members restart on the current build.
	c.roll(false, l)

	// 3. The current leader's snapshot, installed by an old member.
	leader = c.settled("three current members")
	applied, _ := strconv.ParseUint(clusterInfo(leader)["applied_index"], 10, 64)
	taken = c.snapshotAbove(leader, applied)
	follower = c.slots[0]
	if follower == leader {
		follower = c.slots[1]
	}
	got = c.replace(follower, applied)
	t.Logf("current leader %s took snapshot %+v; slot %s, replaced by an old member, installed %+v", leader.name, taken, follower.name, got)
	l.progress(t, "an old member installed the current leader's snapshot")

	// 4. The current members restart on the old build.
	c.roll(true, l)
	c.settled("three old members again")
	l.progress(t, "load on three old members again")

	l.stop()
	l.check(t)
	t.Logf("rolled old -> current -> old in %v", time.Since(begin).Round(time.Millisecond))
}

// stamp is how the test writes times, as the servers' logs do.
const stamp = "15:04:05.000000"

// tags are the tags the load counts on; SET raises the first two. The
// others live on only in the state machine, so a snapshot that loses or
// lowers a tag shows as values given twice.
var tags = []string{"orders", "invoices", "users", "events"}

const raisedTags = 2

// issued is the values of one INCR or NEXTSEG reply, first..last, asked
// of slot at asked and answered at got.
type issued struct {
	tag         string
	first, last int64
	asked, got  time.Time
	slot        string
}

// raised is one SET tag v sent to slot at asked.
type raised struct {
	tag   string
	v     int64
	asked time.Time
	slot  string
	// acked: the SET answered OK at until. Otherwise until is the last
	// moment it may take effect: its error reply, or, with no reply (a
	// timeout, a connection closed), unansweredReach after it was sent.
	acked bool
	until time.Time
}

// unansweredReach is how long after it was sent a SET with no reply may
// still take effect: the server works on it for its request timeout (it may
// wait out a removed member's lease), past the client's 5 s. A SET answered
// with an error takes effect before its reply or never.
const unansweredReach = 15 * time.Second

// load is clients on every slot issuing IDs and values and raising tags,
// and what they were given.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	ids    []int64
	values []issued
	sets   []raised
	high   map[string]int64  // per tag, the highest value given or set
	errs   map[string]int    // by the error's first word
	sample map[string]string // the first error of each first word
	count  int64             // values given, counted one by one
}

// startLoad runs two clients per slot issuing NEXTID, INCR and NEXTSEG,
// and one client per raised tag issuing SET on the slots in turn, each SET
// of a tag after the one before it ended and 1,000,000 above the highest
// value the load has seen of it or sent a SET of: the SETs of a tag only
// raise it, so every value asked for after one was acknowledged lies above
// it.
func startLoad(slots []*slot) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, high: map[string]int64{}, errs: map[string]int{}, sample: map[string]string{}}
	clients := make([]*redis.Client, len(slots))
	for i, s := range slots {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, ContextTimeoutEnabled: true, PoolSize: 4})
		for w := range 2 {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.issue(ctx, clients[i], s.name, i*2+w)
			}()
		}
	}
	var raisers sync.WaitGroup
	for i, tag := range tags[:raisedTags] {
		raisers.Add(1)
		go func() {
			defer raisers.Done()
			l.raise(ctx, clients, slots, tag, i)
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		raisers.Wait()
		for _, rdb := range clients {
			rdb.Close()
		}
	}()
	return l
}

func (l *load) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	word := strings.SplitN(err.Error(), " ", 2)[0]
	l.mu.Lock()
	if l.errs[word]++; l.errs[word] == 1 {
		l.sample[word] = err.Error()
	}
	l.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
}

func (l *load) issue(ctx context.Context, rdb *redis.Client, name string, worker int) {
	for k := worker; ctx.Err() == nil; k++ {
		tag := tags[k%len(tags)]
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		asked := time.Now()
		switch k % 3 {
		case 0:
			ids, err := rdb.Do(rctx, "NEXTID", 20).Int64Slice()
			if err != nil {
				l.failed(ctx, err)
				break
			}
			l.mu.Lock()
			l.ids = append(l.ids, ids...)
			l.mu.Unlock()
		case 1:
			v, err := rdb.Do(rctx, "INCR", tag).Int64()
			if err != nil {
				l.failed(ctx, err)
				break
			}
			l.got(issued{tag, v, v, asked, time.Now(), name})
		case 2:
			r, err := rdb.Do(rctx, "NEXTSEG", tag, 25).Int64Slice()
			if err != nil {
				l.failed(ctx, err)
				break
			}
			l.got(issued{tag, r[0], r[1], asked, time.Now(), name})
		}
		cancel()
	}
}

func (l *load) got(v issued) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.values = append(l.values, v)
	l.count += v.last - v.first + 1
	l.high[v.tag] = max(l.high[v.tag], v.last)
}

func (l *load) raise(ctx context.Context, clients []*redis.Client, slots []*slot, tag string, first int) {
	for k := first; ctx.Err() == nil; k++ {
		rdb, name := clients[k%len(clients)], slots[k%len(slots)].name
		l.mu.Lock()
		v := l.high[tag] + 1_000_000
		l.high[tag] = v // a SET that fails may still take effect
		l.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		asked := time.Now()
		err := rdb.Do(rctx, "SET", tag, v).Err()
		cancel()
		set := raised{tag: tag, v: v, asked: asked, slot: name, acked: err == nil, until: time.Now()}
		var reply redis.Error
		var op *net.OpError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.As(err, &op) && op.Op == "dial":
			continue // never sent
		case !errors.As(err, &reply):
			set.until = asked.Add(unansweredReach)
		}
		l.mu.Lock()
		l.sets = append(l.sets, set)
		l.mu.Unlock()
		if err != nil {
			l.failed(ctx, err)
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the clients and waits for them.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) counts() (ids int, values int64, sets int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sets {
		if s.acked {
			sets++
		}
	}
	return len(l.ids), l.count, sets
}

// progress waits until the load has been given more IDs and values, and
// acknowledged another SET, since the call.
func (l *load) progress(t *testing.T, what string) {
	t.Helper()
	ids0, values0, sets0 := l.counts()
	wait.For(t, 20*time.Second, what+": IDs, values and a SET given", func() (bool, string) {
		ids, values, sets := l.counts()
		return ids >= ids0+200 && values >= values0+200 && sets > sets0,
			fmt.Sprintf("%d IDs, %d values and %d SETs since", ids-ids0, values-values0, sets-sets0)
	})
	ids, values, sets := l.counts()
	t.Logf("%s: %d IDs, %d values, %d SETs so far", what, ids, values, sets)
}

// check finds every ID or value given twice, and every value asked for
// after a SET of its tag was acknowledged that does not lie above it.
func (l *load) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := slices.Clone(l.ids)
	slices.Sort(ids)
	repeated := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			repeated++
			if repeated <= 10 {
				t.Errorf("ID %d issued twice", ids[i])
			}
		}
	}
	var twice, below, checked, afterLate int64
	sets, reported := 0, 0
	for _, tag := range tags {
		var given []issued
		for _, v := range l.values {
			if v.tag == tag {
				given = append(given, v)
			}
		}
		// Values given twice: ranges sorted by their first value overlap.
		byFirst := slices.Clone(given)
		slices.SortFunc(byFirst, func(a, b issued) int { return cmp.Compare(a.first, b.first) })
		end := int64(-1)
		for _, v := range byFirst {
			if v.first <= end {
				twice += min(end, v.last) - v.first + 1
				if reported++; reported <= 10 {
					t.Errorf("tag %s: values %d..%d given twice", tag, v.first, min(end, v.last))
				}
			}
			end = max(end, v.last)
		}
		// A tag's SETs run one after the other, each above the ones before:
		// a value asked for after one was acknowledged lies above it, unless
		// an earlier SET with no reply, lower than the value, took effect
		// after the acknowledged one began (as a late SET does).
		var acked, open []raised
		for _, s := range l.sets {
			switch {
			case s.tag != tag:
			case s.acked:
				acked = append(acked, s)
			default:
				open = append(open, s)
			}
		}
		slices.SortFunc(acked, func(a, b raised) int { return a.until.Compare(b.until) })
		for _, v := range given {
			n, _ := slices.BinarySearchFunc(acked, v.asked, func(s raised, at time.Time) int { return s.until.Compare(at) })
			if n == 0 {
				continue
			}
			floor := acked[n-1]
			checked += v.last - v.first + 1
			if v.first > floor.v {
				continue
			}
			late := slices.IndexFunc(open, func(s raised) bool {
				return s.v < v.first && s.until.After(floor.asked) && s.asked.Before(v.got)
			})
			if late >= 0 {
				afterLate += v.last - v.first + 1
				continue
			}
			below += v.last - v.first + 1
			if reported++; reported <= 10 {
				t.Errorf("tag %s: %d..%d asked of slot %s at %s, answered at %s, not above SET %d asked of slot %s at %s, acknowledged at %s",
					tag, v.first, v.last, v.slot, v.asked.Format(stamp), v.got.Format(stamp), floor.v, floor.slot, floor.asked.Format(stamp), floor.until.Format(stamp))
			}
		}
		sets += len(acked)
	}
	t.Logf("%d IDs (%d repeated); %d values of %d tags (%d given twice), %d of them asked for after an acknowledged SET "+
		"(%d not above it, %d above a SET with no reply that may have landed after it); %d SETs acknowledged of %d sent; errors %v, the first of each %q",
		len(ids), repeated, l.count, len(tags), twice, checked, below, afterLate, sets, len(l.sets), l.errs, l.sample)
}

// TestOldBuildIsRefusedByANewCluster: a cluster this build created writes
// compact tag records the old build cannot read. A node of the old build
// that asks to join it is refused before it is admitted: it exits saying
// why, and the cluster keeps its one member, its worker IDs and its SETs
// (an admitted node that stops at the first entry it cannot read would
// hold every SET until it is removed).
func TestOldBuildIsRefusedByANewCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the old commit and starts two processes; not in -short")
	}
	oldBin, newBin := buildOld(t), buildNew(t)
	srv, err := testproc.Start(t, testproc.Config{Binary: newBin, Dir: t.TempDir(), Args: []string{"--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}})
	if err != nil {
		t.Fatal(err)
	}
	oldJoinIsRefused(t, oldBin, srv.Addr)
}

// TestOldBuildIsRefusedOnceTheLogHeldAnMSET: a cluster the old build
// created and this build runs admits a node of the old build (see
// TestRollingUpgradeWithSnapshots) until its log holds an entry the old
// build cannot read: after an MSET, the old node's join is refused.
func TestOldBuildIsRefusedOnceTheLogHeldAnMSET(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the old commit and starts three processes; not in -short")
	}
	oldBin, newBin := buildOld(t), buildNew(t)
	dir, args := t.TempDir(), []string{"--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}
	old, err := testproc.Start(t, testproc.Config{Binary: oldBin, Dir: dir, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	oc := redis.NewClient(&redis.Options{Addr: old.Addr, MaxRetries: -1})
	err = oc.Do(context.Background(), "INCR", "orders").Err()
	oc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	srv, err := testproc.Start(t, testproc.Config{Binary: newBin, Dir: dir, Args: append(args, "--port", old.Port)})
	if err != nil {
		t.Fatal(err)
	}
	sc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	err = sc.Do(context.Background(), "MSET", "x", 100, "y", 200).Err()
	sc.Close()
	if err != nil {
		t.Fatal(err)
	}
	oldJoinIsRefused(t, oldBin, srv.Addr)
}

// buildNew is the current build, removed when the test ends.
func buildNew(t *testing.T) string {
	t.Helper()
	bin, remove, err := testproc.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	return bin
}

// oldJoinIsRefused starts a node of the old build joining through addr,
// the cluster's one member, and fails the test unless the node is refused
// saying its build is older than the cluster's log, the cluster keeps one
// member, and a SET lands.
func oldJoinIsRefused(t *testing.T, oldBin, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if err := rdb.Do(ctx, "INCR", "orders").Err(); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(octx, oldBin, "--port", strconv.Itoa(testproc.FreePort(t)), "--raft-addr", "127.0.0.1:"+strconv.Itoa(testproc.FreePort(t)),
		"--dir", t.TempDir(), "--join", addr)
	out, err := cmd.CombinedOutput()
	if octx.Err() != nil || err == nil {
		t.Fatalf("the old build's join did not end in a refusal within a minute (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "older than this cluster's log") {
		t.Fatalf("the old build's refusal does not say its build is older than the cluster's log:\n%s", out)
	}
	info, err := rdb.Do(ctx, "CLUSTER", "INFO").Text()
	if err != nil {
		t.Fatal(err)
	}
	if members := parseInfo(info)["members"]; members != "1" {
		t.Fatalf("CLUSTER INFO members: %q after the refused join, want 1:\n%s", members, info)
	}
	if err := rdb.Set(ctx, "orders", 1_000_000_000, 0).Err(); err != nil {
		t.Fatalf("SET after the refused join: %v", err)
	}
}
