package cluster

// Process tests of the data directory checks (docs/operations.md, "A
// damaged directory is refused"): a node whose
// directory was damaged after a real run (files removed, pages zeroed, one
// half replaced by another copy) refuses to start, exit 1, with a message
// naming the file and the remedy; no panic, no hang, no fresh bootstrap,
// and nothing of the directory deleted.

import (
	"context"
	"crypto/sha256"
	bbin "encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idserver/internal/systest"
)

// crashedNode runs a node on a new directory, has it hand out values 1..3
// of tag orders and the first value of 60 other tags (a Raft log of a few
// pages), and kills it with SIGKILL.
func crashedNode(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	p := systest.StartProc(t, dir)
	c := p.Client()
	for want := int64(1); want <= 3; want++ {
		if v, err := c.Do(context.Background(), "INCR", "orders").Int64(); err != nil || v != want {
			t.Fatalf("INCR: %d %v", v, err)
		}
	}
	for i := range 60 {
		if err := c.Do(context.Background(), "INCR", fmt.Sprintf("tag%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p.Kill()
	return dir
}

// refusal starts the binary on dir, which must refuse: exit 1 within a
// minute, no panic. It returns the output.
func refusal(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, systest.Binary(t), append([]string{"--port", systest.FreePort(t), "--dir", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the node neither served nor exited within a minute:\n%s", out)
	}
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 1 || strings.Contains(string(out), "panic") || strings.Contains(string(out), "SIGSEGV") {
		t.Fatalf("exit %d, want a refusal (exit 1, no panic):\n%s", code, out)
	}
	return string(out)
}

// mustSay fails unless out contains every one of want.
func mustSay(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the refusal does not say %q:\n%s", w, out)
		}
	}
}

// files is every file under dir with a hash of its content.
func files(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out[strings.TrimPrefix(path, dir)] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unchanged fails if a file of before is gone or changed in dir.
func unchanged(t *testing.T, dir string, before map[string][32]byte) {
	t.Helper()
	after := files(t, dir)
	for path, sum := range before {
		if got, ok := after[path]; !ok {
			t.Errorf("%s was deleted", path)
		} else if got != sum {
			t.Errorf("%s was changed", path)
		}
	}
}

const remedy = "idserver restore BACKUP --dir NEWDIR"

// TestLostPebbleWALIsRefused: after a kill
// -9, pebble/*.log removed. Pebble itself would open with its last flushed
// state; the node refuses, and leaves raft/ and pebble/ as they were.
func TestLostPebbleWALIsRefused(t *testing.T) {
	dir := crashedNode(t)
	logs, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.log"))
	if len(logs) == 0 {
		t.Fatal("no write-ahead log in pebble/")
	}
	for _, l := range logs {
		os.Remove(l)
	}
	before := files(t, dir)
	out := refusal(t, dir)
	mustSay(t, out, filepath.Join(dir, "pebble", "MANIFEST-"), "write-ahead log", "lost", remedy, "CLUSTER FORGET")
	unchanged(t, dir, before)
}

// TestDeletedPebbleIsRefused: all of pebble/ removed under an intact raft/.
func TestDeletedPebbleIsRefused(t *testing.T) {
	dir := crashedNode(t)
	os.RemoveAll(filepath.Join(dir, "pebble"))
	before := files(t, dir)
	out := refusal(t, dir)
	mustSay(t, out, filepath.Join(dir, "pebble")+" holds no Pebble database", remedy)
	unchanged(t, dir, before)
	if _, err := os.Stat(filepath.Join(dir, "pebble")); err == nil {
		t.Error("the refused start created pebble/")
	}
}

// TestDeletedRaftDBIsRefused: a start with raft.db removed under a Pebble
// state that says the node is a member is refused, not bootstrapped afresh.
func TestDeletedRaftDBIsRefused(t *testing.T) {
	dir := crashedNode(t)
	db := filepath.Join(dir, "raft", "raft.db")
	os.Remove(db)
	before := files(t, filepath.Join(dir, "raft"))
	out := refusal(t, dir)
	mustSay(t, out, db+" is missing", "was a member", "worker ID 0", remedy, "CLUSTER FORGET")
	unchanged(t, filepath.Join(dir, "raft"), before)
	if _, err := os.Stat(db); err == nil {
		t.Error("the refused start created raft.db")
	}
}

// TestEmptyRaftDBIsRefused: raft.db truncated to 0 bytes under a member's
// Pebble state is refused as lost, by name (it said "bad file descriptor":
// bbolt tried to initialize the empty file it had opened read-only).
func TestEmptyRaftDBIsRefused(t *testing.T) {
	dir := crashedNode(t)
	db := filepath.Join(dir, "raft", "raft.db")
	if err := os.Truncate(db, 0); err != nil {
		t.Fatal(err)
	}
	before := files(t, filepath.Join(dir, "raft"))
	out := refusal(t, dir)
	mustSay(t, out, db+" is empty (0 bytes)", "was a member", remedy, "CLUSTER FORGET")
	unchanged(t, filepath.Join(dir, "raft"), before)
}

// TestEmptyManifestIsRefused: Pebble's current MANIFEST truncated to 0
// bytes is refused by name (Pebble's own "malformed manifest" said neither
// that the directory is damaged nor what to do).
func TestEmptyManifestIsRefused(t *testing.T) {
	dir := crashedNode(t)
	manifests, _ := filepath.Glob(filepath.Join(dir, "pebble", "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST in the node's pebble/")
	}
	for _, m := range manifests {
		if err := os.Truncate(m, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := files(t, dir)
	out := refusal(t, dir)
	mustSay(t, out, "data directory is damaged", "MANIFEST-", "holds no readable version edit (0 bytes)", remedy)
	unchanged(t, dir, before)
}

// neverAdmitted makes the directory of a joiner whose join was refused
// (another layout): Pebble with a node ID and no cluster identity, and an
// empty Raft log.
func neverAdmitted(t *testing.T, join string) string {
	t.Helper()
	dir := t.TempDir()
	p, err := systest.Launch(t, dir, nil, "--join", join, "--worker-bits", "9", "--seq-bits", "13")
	systest.WaitExit(t, p, err)
	if _, err := os.Stat(filepath.Join(dir, "raft", "raft.db")); err != nil {
		t.Fatalf("the refused joiner left no raft.db: %v", err)
	}
	return dir
}

// TestRaftLogWithoutClusterIdentityIsRefused: a Raft log that is not empty
// beside a Pebble state with no cluster identity (here another node's
// raft/ under a never-admitted joiner's pebble/): the start is refused,
// raft/ is kept, and no new cluster is bootstrapped.
func TestRaftLogWithoutClusterIdentityIsRefused(t *testing.T) {
	a := systest.StartProc(t, t.TempDir())
	dir := neverAdmitted(t, a.Addr)
	a.Shutdown()
	member := crashedNode(t)
	os.RemoveAll(filepath.Join(dir, "raft"))
	if out, err := exec.Command("cp", "-a", filepath.Join(member, "raft"), filepath.Join(dir, "raft")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	before := files(t, filepath.Join(dir, "raft"))
	out := refusal(t, dir, "--worker-bits", "9", "--seq-bits", "13")
	mustSay(t, out, filepath.Join(dir, "raft", "raft.db")+" holds Raft state", "no cluster identity", remedy)
	unchanged(t, filepath.Join(dir, "raft"), before)
}

// TestNeverAdmittedJoinerJoinsLater: the directory of a joiner that was
// never admitted (empty Raft log, no cluster identity) is not deleted nor
// refused: started again with --join to a cluster of its layout, it joins.
func TestNeverAdmittedJoinerJoinsLater(t *testing.T) {
	a := systest.StartProc(t, t.TempDir())
	dir := neverAdmitted(t, a.Addr)
	b := systest.StartProc(t, t.TempDir(), "--worker-bits", "9", "--seq-bits", "13")
	j := systest.StartProc(t, dir, "--join", b.Addr, "--worker-bits", "9", "--seq-bits", "13")
	want := systest.ClusterInfo(t, b.Client())["cluster_id"]
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info := systest.ClusterInfo(t, j.Client())
		if info["cluster_id"] == want && info["members"] == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the joiner: %v, want a member of cluster %s", info, want)
		}
	}
	if n := systest.CollectIDs(t, time.Second, b.Client(), j.Client()); n == 0 {
		t.Fatal("no IDs")
	}
}

// TestRaftLogOlderThanStateIsRefused: raft/ put back from a copy taken
// before more entries were applied (a half-restored directory): Pebble's
// applied index is past the end of the log.
func TestRaftLogOlderThanStateIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := systest.StartProc(t, dir)
	p.Shutdown()
	old := filepath.Join(t.TempDir(), "raft")
	if out, err := exec.Command("cp", "-a", filepath.Join(dir, "raft"), old).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	p = systest.StartProc(t, dir)
	for i := range 20 {
		if err := p.Client().Do(context.Background(), "INCR", fmt.Sprintf("tag%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p.Shutdown()
	os.RemoveAll(filepath.Join(dir, "raft"))
	if out, err := exec.Command("cp", "-a", old, filepath.Join(dir, "raft")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	before := files(t, filepath.Join(dir, "raft"))
	out := refusal(t, dir)
	mustSay(t, out, filepath.Join(dir, "pebble")+" applied Raft index", "but "+filepath.Join(dir, "raft", "raft.db")+" ends at index",
		"older than the state machine", remedy)
	unchanged(t, filepath.Join(dir, "raft"), before)
}

const boltPage = 4096

// boltLive reads a bbolt file and returns it with the pages of its live
// tree that a damage must hit: the live meta page (the higher transaction
// ID), the other one, the root bucket's page, the freelist's, and the root
// page of the logs bucket.
func boltLive(t *testing.T, path string) (b []byte, live, other, root, freelist, logs int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := bbin.LittleEndian
	meta := func(i int) []byte { return b[i*boltPage+16:] }
	live, other = 0, 1
	if le.Uint64(meta(1)[48:]) > le.Uint64(meta(0)[48:]) {
		live, other = 1, 0
	}
	root, freelist = int(le.Uint64(meta(live)[16:])), int(le.Uint64(meta(live)[32:]))
	page := b[root*boltPage:]
	for e := range int(le.Uint16(page[10:])) {
		el := page[16+16*e:]
		pos, ksize := int(le.Uint32(el[4:])), int(le.Uint32(el[8:]))
		if k := el[pos : pos+ksize]; string(k) == "logs" {
			logs = int(le.Uint64(el[pos+ksize:]))
		}
	}
	if logs == 0 {
		t.Fatalf("the logs bucket is inline: the log is too short for this test")
	}
	return b, live, other, root, freelist, logs
}

// TestDamagedRaftDBIsRefused: raft.db of a real run with one page of its
// live tree damaged as a failing disk does (zeroed, or garbled): each is a
// refusal naming raft.db, where bbolt panicked ("invalid page type",
// "invalid freelist page"), faulted (SIGSEGV) or hung, and a damaged meta
// page, where bbolt quietly used the transaction before it (INCR answered
// 1 again).
func TestDamagedRaftDBIsRefused(t *testing.T) {
	dir := crashedNode(t)
	db := filepath.Join(dir, "raft", "raft.db")
	orig, live, other, root, freelist, logs := boltLive(t, db)
	zero := func(page int) func([]byte) {
		return func(b []byte) { clear(b[page*boltPage : (page+1)*boltPage]) }
	}
	garble := func(page int) func([]byte) { // the element table: positions and sizes point anywhere
		return func(b []byte) {
			for j := page*boltPage + 16; j < page*boltPage+16+64; j++ {
				b[j] = byte(j*131 + 7)
			}
		}
	}
	cases := map[string]func(b []byte){
		"live meta page zeroed":  zero(live),
		"other meta page zeroed": zero(other),
		"root page zeroed":       zero(root),
		"root elements garbled":  garble(root),
		"freelist page zeroed":   zero(freelist),
		"logs root page zeroed":  zero(logs),
		"logs root page garbled": garble(logs),
		"live meta checksum off": func(b []byte) { b[live*boltPage+16+60]++ },
		"file cut to two pages":  func(b []byte) { clear(b[2*boltPage:]) },
		"page type flipped":      func(b []byte) { b[logs*boltPage+8] ^= 0x03 }, // branch <-> leaf
	}
	for name, damage := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			b := append([]byte(nil), orig...)
			damage(b)
			if err := os.WriteFile(db, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out := refusal(t, dir)
			mustSay(t, out, db+" is damaged", remedy)
			if got, _ := os.ReadFile(db); string(got) != string(b) {
				t.Error("raft.db was changed by the refused start")
			}
		})
	}
	if err := os.WriteFile(db, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	p := systest.StartProc(t, dir)
	if v, err := p.Client().Do(context.Background(), "INCR", "orders").Int64(); err != nil || v <= 3 {
		t.Fatalf("INCR on the undamaged file: %d %v", v, err)
	}
}

// TestUndecodableRaftEntryIsRefused: a Raft log entry whose bytes no longer
// decode (Raft panicked reading it at start).
func TestUndecodableRaftEntryIsRefused(t *testing.T) {
	dir := crashedNode(t)
	db := filepath.Join(dir, "raft", "raft.db")
	b, _, _, _, _, logs := boltLive(t, db)
	// The logs bucket's pages: follow its root down the first branch
	// elements to a leaf, whose elements have 8-byte keys (the index) and
	// a msgpack value; turn one value's first byte into one msgpack never
	// uses.
	le := bbin.LittleEndian
	page := b[logs*boltPage : (logs+1)*boltPage]
	for le.Uint16(page[8:]) == 0x01 {
		child := int(le.Uint64(page[16+8:]))
		page = b[child*boltPage : (child+1)*boltPage]
	}
	damaged := false
	for e := range int(le.Uint16(page[10:])) {
		el := page[16+16*e:]
		pos, ksize, vsize := le.Uint32(el[4:]), le.Uint32(el[8:]), le.Uint32(el[12:])
		if ksize == 8 && vsize > 16 && e == 2 {
			page[16+16*e+int(pos+ksize)] = 0xc1
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("no log entry found in raft.db")
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := refusal(t, dir)
	mustSay(t, out, db+": Raft log entry", "cannot be read", remedy)
}
