package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// starveRun is how long a starved process runs in each cycle.
const starveRun = 2 * time.Millisecond

// starve holds the CPU of n's process (of every node's when f.Other is 0)
// for the hold: each cycle stops it for f.Amount (SIGSTOP) and lets it run
// for starveRun (SIGCONT), so its timers fire late, its heartbeats and
// lease renewals lag and its replies wait, as on a machine whose CPU
// others hold. It burns no CPU itself.
func (nm *nemesis) starve(ctx context.Context, n *node, f Fault, ev *FaultEvent) {
	c := nm.c
	victims := []*node{n}
	if f.Other == 0 {
		victims = c.pm.slots()
	}
	var procs []*proc
	var ids []string
	ev.Slots = nil
	for _, m := range victims {
		if p := m.running(); p != nil && !p.exited() {
			procs = append(procs, p)
			ids = append(ids, m.nodeID)
			ev.Slots = append(ev.Slots, m.slot)
		}
	}
	if len(procs) == 0 {
		ev.Detail = "no target running"
		return
	}
	cycles := 0
	for end := time.Now().Add(f.Hold); time.Now().Before(end) && ctx.Err() == nil; cycles++ {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGSTOP)
		}
		time.Sleep(f.Amount)
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGCONT)
		}
		time.Sleep(starveRun)
	}
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	ev.Detail = fmt.Sprintf("CPU of %s held: stopped %v of every %v, %d cycles", strings.Join(ids, ","), f.Amount, f.Amount+starveRun, cycles)
}

// island cuts the leader off from every other node, both ways, and asks
// it (CLUSTER FORGET over RESP, all at once) to remove every other member,
// as Jepsen's island nemesis does; after the hold it heals. Cut off, the
// leader cannot commit the removals, so each FORGET must fail: one
// answered OK is an anomaly (island-forget), and so is any value issued
// twice after it. The repair before the next fault replaces a node the
// cluster no longer lists.
func (nm *nemesis) island(ctx context.Context, f Fault, ev *FaultEvent) {
	c := nm.c
	if c.fw == nil {
		return
	}
	info, n := nm.leaderNow()
	if n == nil {
		ev.Detail = "no leader"
		return
	}
	ev.Slots = []int{n.slot}
	var others []string
	for _, m := range membersOf(info) {
		if m.id != n.nodeID {
			others = append(others, m.id)
		}
	}
	if !nm.cut(nm.isolation(n), ev) {
		return
	}
	began := time.Now()
	ev.Detail = "leader " + n.nodeID + " " + ev.Detail
	answers := make([]string, len(others))
	var wg sync.WaitGroup
	for i, id := range others {
		wg.Go(func() {
			r, err := admin(n.respAddr(), 5*time.Second, "CLUSTER", "FORGET", id)
			switch {
			case err != nil:
				answers[i] = fmt.Sprintf("FORGET %s: %v", id, err)
			case r.isError():
				answers[i] = fmt.Sprintf("FORGET %s: -%s", id, firstLine(r.str))
			default:
				answers[i] = fmt.Sprintf("FORGET %s: %s", id, r)
				c.hist.addMembership(Anomaly{At: c.since(), Kind: "island-forget", Msg: fmt.Sprintf("%s, cut off from every other member, answered %s to CLUSTER FORGET %s: no majority can have agreed", n.nodeID, r, id)})
			}
		})
	}
	wg.Wait()
	ev.Detail += "; " + strings.Join(answers, "; ")
	nm.sleep(ctx, f.Hold-time.Since(began))
	if err := c.fw.heal(); err != nil {
		ev.Detail += "; heal: " + err.Error()
	}
}

// leaderNow is the leader's CLUSTER INFO and node, asked of the node the
// others name; nil when no running node leads.
func (nm *nemesis) leaderNow() (map[string]string, *node) {
	for _, n := range nm.c.pm.slots() {
		if p := n.running(); p != nil {
			if info, err := clusterInfo(p.addr); err == nil && info["role"] == "Leader" {
				return info, n
			}
		}
	}
	return nil, nil
}

// damage stops n (one node: the others keep their majority), damages its
// Raft and Pebble files (raft.db, *.sst, MANIFEST, snapshots): bits flipped
// in some, others truncated, and restarts it after the hold. It must refuse
// to start with a message that names the directory or a file in it (then,
// as an operator would, it is given an empty directory and a new node ID at
// its address), or start and stay correct; a panic (damaged-panic), an
// unclear refusal (damaged-unclear) or a start that never answers
// (damaged-hung) is an anomaly, and so is any value issued twice after it.
func (nm *nemesis) damage(ctx context.Context, n *node, f Fault, ev *FaultEvent) {
	c := nm.c
	if nm.liveOther(n.slot) < 0 {
		ev.Detail = "no other member running"
		return
	}
	n.kill()
	if nm.damaged == nil {
		nm.damaged = map[string]bool{}
	}
	nm.damaged[n.dir] = true
	var files []string
	filepath.WalkDir(n.dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && damageable(d.Name()) {
			files = append(files, path)
		}
		return nil
	})
	slices.Sort(files)
	nm.rng.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	files = files[:min(len(files), 1+nm.rng.IntN(3))]
	var did []string
	for _, path := range files {
		rel, _ := filepath.Rel(n.dir, path)
		what, err := nm.damageFile(path)
		if err != nil {
			what = err.Error()
		}
		did = append(did, rel+": "+what)
	}
	ev.Detail = fmt.Sprintf("%s stopped; %s", n.nodeID, strings.Join(did, "; "))
	if len(files) == 0 {
		ev.Detail += "no Raft or Pebble file to damage"
	}
	nm.sleep(ctx, f.Hold)
	p, err := nm.restart(n, 40*time.Second)
	if err == nil {
		ev.Detail += "; restarted and answers"
		return
	}
	if p != nil && !p.exited() {
		n.kill()
		c.hist.addMembership(Anomaly{At: c.since(), Kind: "damaged-hung", Msg: fmt.Sprintf("%s, restarted on its damaged directory (%s), neither refused nor answered: %v", n.nodeID, strings.Join(did, "; "), err)})
		ev.Detail += "; restart neither refused nor answered"
	} else if p != nil {
		tail := tailLog(p.logf, 80)
		last := tailLog(p.logf, 4)
		switch {
		case strings.Contains(tail, "\npanic: ") || strings.Contains(tail, "\ngoroutine "):
			c.hist.addMembership(Anomaly{At: c.since(), Kind: "damaged-panic", Msg: fmt.Sprintf("%s panicked on its damaged directory (%s); log %s\n%s", n.nodeID, strings.Join(did, "; "), p.logf, indent(last))})
		case !strings.Contains(last, n.dir):
			c.hist.addMembership(Anomaly{At: c.since(), Kind: "damaged-unclear", Msg: fmt.Sprintf("%s refused its damaged directory (%s) without naming it or a file in it; log %s\n%s", n.nodeID, strings.Join(did, "; "), p.logf, indent(last))})
		}
		ev.Detail += "; refused (" + firstLine(err.Error()) + ")"
	}
	what, err := nm.replaceAtAddress(n)
	if err != nil {
		ev.Detail += "; " + err.Error()
		return
	}
	ev.Detail += "; " + what
}

// damageable says whether a file in a data directory is one the damage
// fault aims at: the Raft log and stable store, Raft snapshots, Pebble
// tables and manifests.
func damageable(name string) bool {
	return name == "raft.db" || name == "state.bin" || name == "meta.json" ||
		strings.HasSuffix(name, ".sst") || strings.HasPrefix(name, "MANIFEST-")
}

// damageFile flips 1 to 8 bits of path at random offsets, or (one time in
// three) truncates it to a random shorter length, and says what it did.
func (nm *nemesis) damageFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	size := st.Size()
	if size == 0 {
		return "empty, left alone", nil
	}
	if nm.rng.IntN(3) == 0 {
		to := nm.rng.Int64N(size)
		return fmt.Sprintf("truncated %d -> %d bytes", size, to), os.Truncate(path, to)
	}
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	var at []string
	for range 1 + nm.rng.IntN(8) {
		off := nm.rng.Int64N(size)
		b := make([]byte, 1)
		if _, err := fh.ReadAt(b, off); err != nil {
			return "", err
		}
		b[0] ^= 1 << nm.rng.IntN(8)
		if _, err := fh.WriteAt(b, off); err != nil {
			return "", err
		}
		at = append(at, fmt.Sprintf("%#x", off))
	}
	return fmt.Sprintf("bits flipped at %s of %d bytes", strings.Join(at, ","), size), fh.Sync()
}
