package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/anishathalye/porcupine"

	"idserver/chaos/lazyfs"
)

// Config sets up a campaign.
type Config struct {
	Seed           uint64
	Duration       time.Duration // of the fault schedule; setup, heal and check come on top
	Nodes          int           // 3 when 0: the cluster at the start, and the fewest it is scaled down to
	MaxNodes       int           // the most it is scaled up to (5 when 0; Nodes without scale faults)
	ClientsPerNode int           // 2 when 0
	// DeadMemberAfter is every node's --dead-member-after (12 s when 0);
	// --worker-lease is a third of it.
	DeadMemberAfter time.Duration
	SegmentStep     int64    // --segment-step, 1000 when 0
	Faults          []string // kinds to inject; AllFaults when nil
	// Script, when set, is the schedule instead of one drawn from Seed
	// (a test that must see given faults); Faults is then ignored.
	Script []Fault
	Binary string // idserver binary; built from this module when empty
	Dir    string // work directory (kept); a temporary one (removed unless anomalies) when empty
	Logf   func(format string, args ...any)
	// PorcupineTimeout bounds the linearizability check of each tag (30s when 0).
	PorcupineTimeout time.Duration
	// StrictDirs puts the nodes' disks (lazyfs, with power cuts in the
	// mix) in Strict mode: a name is durable only once its directory is
	// fsynced, not at the next fsync of anything (Ordered, as ext4).
	StrictDirs bool
	// ManyTags is how many cold tags (at most 200,000) the clients touch
	// besides the few every campaign uses: sweepers INCR each once, then
	// the clients' mix draws among them. A seventh have names of random
	// bytes.
	ManyTags int
	// Cover are kinds the schedule starts with, one fault of each (those
	// among Faults), so that a short campaign injects them.
	Cover []string
}

// Result is what a campaign did and found.
type Result struct {
	Seed      uint64
	Schedule  []Fault
	Faults    map[string]int // injected, by kind
	Skipped   []string       // fault kinds this machine cannot inject, and why
	Verdict   *Verdict
	History   *History
	Dir       string
	Elapsed   time.Duration
	BinaryRev string
	// PowerCutPages counts the unsynced pages (4 KiB) power cuts dropped.
	PowerCutPages int
	// SkippedKinds are the kinds asked for that this machine cannot inject.
	SkippedKinds []string
}

// campaign is one run in progress.
type campaign struct {
	cfg     Config
	pm      *procManager
	hist    *History
	fw      *firewall
	t0      time.Time
	uidBase int
	logf    func(string, ...any)
}

func (c *campaign) since() time.Duration { return time.Since(c.t0) }

// hostFor is slot's loopback address: 127.0.0.2 upwards (127.0.0.1 is the
// source address of every loopback connection, see firewall).
func (c *campaign) hostFor(slot int) string { return "127.0.0." + strconv.Itoa(2+slot) }

// uidFor is the Unix user slot's processes run as (0: the campaign's own).
func (c *campaign) uidFor(slot int) int {
	if c.uidBase == 0 {
		return 0
	}
	return c.uidBase + slot
}

// setClock sets n's DEBUG CLOCK offset and records the change.
func (c *campaign) setClock(n *node, d time.Duration) error {
	p := n.running()
	if p == nil {
		return errors.New("not running")
	}
	// The step takes effect somewhere between the send and the answer: it
	// counts from the send (a request answered CLOCKBACK just before the
	// answer arrived saw it).
	sent := c.since()
	r, err := admin(p.addr, 2*time.Second, "DEBUG", "CLOCK", strconv.FormatInt(d.Milliseconds(), 10))
	if err == nil && r.isError() {
		err = errors.New(r.str)
	}
	if err != nil {
		return err
	}
	c.hist.addClock(clockChange{Slot: n.slot, At: sent, From: n.clockOffset(), To: d})
	n.setClockOffset(d)
	return nil
}

// ghostClient issues NEXTID, GENEID and INCR on one process (a forgotten
// node, or a joiner that should have been refused) until ctx ends.
func (c *campaign) ghostClient(ctx context.Context, slot int, p *proc, ghost string) {
	w := &workload{pm: c.pm, hist: c.hist, t0: c.t0, step: c.pm.step}
	rc, err := dialRESP(p.addr, 1_000_000+int64(p.gen), time.Second)
	if err != nil {
		return
	}
	defer func() { rc.close() }()
	specs := []opSpec{{kind: KNextID, n: 100}, {kind: KGeneID, key: hotBuyer, n: 16}, {kind: KIncr, key: tags[0]}, {kind: KNextID}}
	for i := 0; ctx.Err() == nil; i++ {
		op := w.do(rc, p, 1000+slot, slot, specs[i%len(specs)])
		op.Ghost = ghost
		if op.Outcome == Unknown && !strings.HasPrefix(op.Err, "-") {
			rc.close()
			if rc, err = dialRESP(p.addr, 1_000_000+int64(p.gen), time.Second); err != nil {
				return
			}
		}
		if op.Outcome != OK {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Run runs one campaign: start the cluster, drive the clients, inject the
// schedule, heal, check that every node answers, and check the history.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.MaxNodes == 0 {
		cfg.MaxNodes = 5
	}
	cfg.MaxNodes = max(cfg.MaxNodes, cfg.Nodes)
	if cfg.DeadMemberAfter == 0 {
		cfg.DeadMemberAfter = defaultDeadMemberAfter
	}
	if cfg.ClientsPerNode == 0 {
		cfg.ClientsPerNode = 2
	}
	if cfg.SegmentStep == 0 {
		cfg.SegmentStep = 1000
	}
	if cfg.Script != nil {
		cfg.Faults = nil
		for _, f := range cfg.Script {
			if !slices.Contains(cfg.Faults, f.Kind) {
				cfg.Faults = append(cfg.Faults, f.Kind)
			}
		}
	}
	if cfg.Faults == nil {
		cfg.Faults = AllFaults
	}
	for _, k := range cfg.Faults {
		if !slices.Contains(AllFaults, k) {
			return nil, fmt.Errorf("unknown fault kind %q (known: %s)", k, strings.Join(AllFaults, ","))
		}
	}
	if cfg.PorcupineTimeout == 0 {
		cfg.PorcupineTimeout = 30 * time.Second
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	res := &Result{Seed: cfg.Seed, Faults: map[string]int{}}
	start := time.Now()
	logf("chaos: seed %d, %v of faults on %d nodes, %d clients each (replay: -seed %d)", cfg.Seed, cfg.Duration, cfg.Nodes, cfg.ClientsPerNode, cfg.Seed)

	root := cfg.Dir
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "idserver-chaos-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	os.Chmod(root, 0o755) // the nodes' users reach their directories and the binary
	res.Dir = root
	if cfg.Dir == "" {
		// Runs last, after the processes are gone and the disks unmounted.
		defer func() {
			if res.Verdict != nil && len(res.Verdict.Anomalies) == 0 {
				os.RemoveAll(root)
			}
		}()
	}
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = BuildServer(ctx, root); err != nil {
			return nil, err
		}
	}
	flags := serverFlags(bin)
	kinds := slices.Clone(cfg.Faults)
	if !flags["enable-debug-command"] {
		res.Skipped = append(res.Skipped, "clock faults: the binary has no --enable-debug-command")
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return slices.Contains(clockFaults, k) })
	}
	if !flags["dead-member-after"] {
		res.Skipped = append(res.Skipped, "scale-down and partition-removed: the binary's cluster removes no dead member (no --dead-member-after)")
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return slices.Contains(autopilotFaults, k) })
	}
	if !slices.ContainsFunc(kinds, func(k string) bool { return slices.Contains(scaleFaults, k) }) {
		cfg.MaxNodes = cfg.Nodes
	}
	c := &campaign{cfg: cfg, hist: &History{}, logf: logf}
	if slices.ContainsFunc(kinds, func(k string) bool { return slices.Contains(partitionFaults, k) }) {
		fw, err := newFirewall()
		if err != nil {
			res.Skipped = append(res.Skipped, "partitions: "+err.Error())
			kinds = slices.DeleteFunc(kinds, func(k string) bool { return slices.Contains(partitionFaults, k) })
		} else {
			c.fw = fw
			c.uidBase = 200_000 + os.Getpid()%10_000*16
			defer func() {
				if err := fw.close(); err != nil {
					logf("chaos: removing iptables chain %s: %v", fw.chain, err)
				}
			}()
		}
	}
	for _, s := range res.Skipped {
		logf("chaos: skipped %s", s)
	}
	if c.uidBase != 0 && filepath.Dir(bin) != root {
		// The nodes' users must reach the binary: a copy in the work directory.
		if err := copyExecutable(bin, filepath.Join(root, "idserver")); err != nil {
			return nil, err
		}
		bin = filepath.Join(root, "idserver")
	}
	var disks map[int]string
	var lazy map[int]*lazyfs.FS
	if slices.ContainsFunc(kinds, func(k string) bool { return slices.Contains(powerFaults, k) }) {
		mode := lazyfs.Ordered
		if cfg.StrictDirs {
			mode = lazyfs.Strict
		}
		var err error
		if disks, lazy, err = mountLazyDisks(root, cfg.MaxNodes, mode); err != nil {
			res.Skipped = append(res.Skipped, "power cuts: "+err.Error())
			logf("chaos: skipped power cuts: %v", err)
			kinds = slices.DeleteFunc(kinds, func(k string) bool { return slices.Contains(powerFaults, k) })
		} else {
			logf("chaos: data directories on lazyfs (%s mode), %s each", mode, diskSize)
			defer func() {
				if err := unmountLazyDisks(lazy); err != nil {
					logf("chaos: %v", err)
				} else {
					// Unmounted: nothing stale for the next campaign to clean up,
					// which would remove the directory with its history and logs.
					os.Remove(filepath.Join(root, pidFile))
				}
			}()
		}
	}
	if slices.Contains(kinds, FDiskFull) && disks == nil {
		var err error
		if disks, err = mountDisks(root, cfg.MaxNodes); err != nil {
			res.Skipped = append(res.Skipped, "disk-full: "+err.Error())
			logf("chaos: skipped disk-full: %v", err)
			kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == FDiskFull })
		} else {
			defer func() {
				if err := unmountDisks(disks); err != nil {
					logf("chaos: %v", err)
				} else {
					// Unmounted: nothing stale for the next campaign to clean up,
					// which would remove the directory with its history and logs.
					os.Remove(filepath.Join(root, pidFile))
				}
			}()
		}
	}
	res.SkippedKinds = slices.DeleteFunc(slices.Clone(cfg.Faults), func(k string) bool { return slices.Contains(kinds, k) })
	res.Schedule = ScheduleCovering(cfg.Seed, cfg.Duration, kinds, cfg.Cover, cfg.MaxNodes)
	if cfg.Script != nil {
		res.Schedule = slices.DeleteFunc(slices.Clone(cfg.Script), func(f Fault) bool { return !slices.Contains(kinds, f.Kind) })
	}
	c.t0 = time.Now()
	c.pm = &procManager{bin: bin, root: root, flags: flags, step: cfg.SegmentStep, hist: c.hist, t0: c.t0, logf: logf, disks: disks, lazy: lazy,
		extra: membershipFlags(flags, cfg.DeadMemberAfter)}
	defer c.pm.killAll()

	// The cluster: the first node bootstraps, the others join it; the
	// slots beyond Nodes are vacant until a scale-up fills one.
	for slot := range cfg.MaxNodes {
		if slot >= cfg.Nodes {
			n := &node{slot: slot, host: c.hostFor(slot), uid: c.uidFor(slot)}
			if err := n.newPorts(); err != nil {
				return nil, err
			}
			n.vacant.Store(true)
			c.pm.nodes = append(c.pm.nodes, n)
			continue
		}
		n, err := c.pm.newNode(slot, c.hostFor(slot), c.uidFor(slot))
		if err != nil {
			return nil, err
		}
		c.pm.nodes = append(c.pm.nodes, n)
		if slot > 0 {
			n.join = c.pm.nodes[0].respAddr()
		}
		if _, err := c.pm.start(n, n.join, 60*time.Second); err != nil {
			return nil, fmt.Errorf("starting the cluster: %w", err)
		}
	}
	if err := c.waitMembers(cfg.Nodes, 30*time.Second); err != nil {
		return nil, err
	}
	logf("chaos: %d nodes up in %v (binary %s, dir %s, %s; up to %d nodes)", cfg.Nodes, time.Since(start).Round(time.Millisecond), bin, root,
		strings.Join(c.pm.extra, " "), cfg.MaxNodes)

	w := &workload{seed: cfg.Seed, pm: c.pm, hist: c.hist, t0: c.t0, step: cfg.SegmentStep, tags: newTagSet(cfg.Seed, cfg.ManyTags)}
	cctx, stopClients := context.WithCancel(ctx)
	var clients sync.WaitGroup
	for slot := range cfg.MaxNodes {
		for k := range sweepersPerNode {
			if len(w.tags.many) > 0 {
				clients.Go(func() { w.sweep(cctx, 10_000+slot*sweepersPerNode+k, slot) })
			}
		}
		for k := range cfg.ClientsPerNode {
			clients.Add(1)
			go func() {
				defer clients.Done()
				w.client(cctx, slot*cfg.ClientsPerNode+k, slot)
			}()
		}
	}
	nm := &nemesis{c: c, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	nctx, stopNemesis := context.WithTimeout(ctx, cfg.Duration+30*time.Second)
	nm.run(nctx, res.Schedule)
	stopNemesis()
	// Faults often take less than their planned hold (a refused join, a
	// quick restart): the load runs on to the campaign's length.
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Duration - c.since()):
	}
	for _, ev := range c.hist.Faults {
		res.Faults[ev.Kind]++
	}
	res.PowerCutPages = c.hist.PowerCutPages
	healed := c.since()
	problems := nm.heal()
	logf("chaos: healed at %s after %d faults %v", fmtDur(healed), nm.done, problems)
	// Load carries on over the healed cluster for a moment.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}
	stopClients()
	clients.Wait()
	c.checkAnswering(40 * time.Second)
	if len(w.tags.many) > 0 {
		logf("chaos: sweepers took %d of the %d many tags", min(int(w.swept.Load()), len(w.tags.many)), len(w.tags.many))
	}
	c.readBack(w.tags, 10*time.Second)
	c.pm.killAll()
	logf("chaos: %d operations recorded; checking", len(c.hist.Ops))
	res.History = c.hist
	checkStart := time.Now()
	res.Verdict = Check(c.hist, 8, cfg.PorcupineTimeout)
	logf("chaos: checked in %v", time.Since(checkStart).Round(time.Millisecond))
	res.Elapsed = time.Since(start)
	return res, ctx.Err()
}

func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// waitMembers waits until every slot's node counts n members.
func (c *campaign) waitMembers(n int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for _, node := range c.pm.slots() {
		for {
			info, err := clusterInfo(node.respAddr())
			if err == nil && info["members"] == strconv.Itoa(n) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s never counted %d members: %v %v", node.nodeID, n, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// checkAnswering: after the last fault heals, every node answers PING,
// NEXTID and INCR within wait. A node that does not is an anomaly.
func (c *campaign) checkAnswering(wait time.Duration) {
	for _, n := range c.pm.slots() {
		c.pm.reap(n)
		p := n.running()
		if p == nil {
			c.hist.addMembership(Anomaly{At: c.since(), Kind: "unavailable", Msg: fmt.Sprintf("slot %d (%s) is not running after the heal", n.slot, n.nodeID)})
			continue
		}
		var last string
		answered := false
		for deadline := time.Now().Add(wait); !answered && time.Now().Before(deadline); {
			answered = true
			for _, args := range [][]string{{"PING"}, {"NEXTID"}, {"INCR", tags[0]}} {
				r, err := admin(p.addr, 3*time.Second, args...)
				switch {
				case err != nil:
					last = fmt.Sprintf("%s: %v", args[0], err)
				case r.isError() && !strings.HasPrefix(r.str, "CLOCKBACK"):
					last = fmt.Sprintf("%s: %s", args[0], r.str)
				default:
					continue
				}
				answered = false
				time.Sleep(200 * time.Millisecond)
				break
			}
		}
		if !answered {
			dump := goroutineDump(p)
			kind := "unavailable"
			if strings.Contains(dump, "cluster.(*fsm)") {
				kind = "unavailable-fsm-lock" // waits on the state machine's lock
			}
			c.hist.addMembership(Anomaly{At: c.since(), Kind: kind, Msg: fmt.Sprintf("%s did not answer within %v of the heal (last: %s); %s",
				n.nodeID, wait, last, dump)})
		}
	}
}

// readBack pages through SCAN on a running node after the heal and checks
// that it lists, byte for byte, every tag a client saw a value of (and no
// name the clients never sent), and that GET of each byte tag answers at
// least the largest value issued on it. A node may still be applying the
// last entries: it is asked again for 2 s, or until wait runs out while
// SCAN fails.
func (c *campaign) readBack(ts *tagSet, wait time.Duration) {
	sent, issued := map[string]bool{}, map[string]int64{}
	c.hist.mu.Lock()
	for _, op := range c.hist.Ops {
		if op.Kind == KNextID || op.Kind == KGeneID || op.Kind == KExec || op.Kind == KDiscard {
			continue
		}
		sent[op.Key] = true
		if op.Outcome == OK && (op.Kind == KIncr || op.Kind == KIncrBy || op.Kind == KNextSeg) {
			issued[op.Key] = max(issued[op.Key], op.Last)
		}
	}
	c.hist.mu.Unlock()
	// By kind: names that are not valid UTF-8, and the names with U+FFFD
	// that stand for them, apart from the rest.
	var missing, strangers map[string][]string
	var last string
	for deadline := time.Now().Add(wait); ; time.Sleep(500 * time.Millisecond) {
		missing, strangers, last = map[string][]string{}, map[string][]string{}, ""
		listed, err := c.scanTags()
		if err != nil {
			last = err.Error()
		} else {
			for tag := range issued {
				if !listed[tag] {
					k := readBackKind(tag)
					missing[k] = append(missing[k], showTag(tag))
				}
			}
			for tag := range listed {
				if !sent[tag] {
					k := readBackKind(tag)
					strangers[k] = append(strangers[k], showTag(tag))
				}
			}
			if len(missing)+len(strangers) == 0 {
				c.logf("chaos: SCAN lists all %d tags issued on, byte for byte (%d tags listed)", len(issued), len(listed))
				break
			}
		}
		// A node that answers SCAN has applied what the load left within
		// a second or two: past that, a difference stays.
		if time.Now().After(deadline) || last == "" && time.Now().Add(wait-2*time.Second).After(deadline) {
			break
		}
	}
	for _, k := range []string{"tag-read-back", "tag-read-back" + invalidUTF8Tag} {
		if len(missing[k])+len(strangers[k]) == 0 && (last == "" || k != "tag-read-back") {
			continue
		}
		sort.Strings(missing[k])
		sort.Strings(strangers[k])
		c.hist.addMembership(Anomaly{At: c.since(), Kind: k, Msg: fmt.Sprintf("after the heal, SCAN did not list %d tags values were issued on (%s) and listed %d names no client sent (%s) %s",
			len(missing[k]), strings.Join(first(missing[k], 5), " "), len(strangers[k]), strings.Join(first(strangers[k], 5), " "), last)})
	}
	for _, tag := range ts.bytes {
		if issued[tag] == 0 {
			continue
		}
		for _, n := range c.pm.slots() {
			p := n.running()
			if p == nil {
				continue
			}
			r, err := admin(p.addr, 3*time.Second, "GET", tag)
			if err != nil || r.isError() {
				continue // an unavailable node is checkAnswering's to report
			}
			if v, perr := strconv.ParseInt(r.str, 10, 64); r.null || perr != nil || v < issued[tag] {
				c.hist.addMembership(Anomaly{At: c.since(), Kind: readBackKind(tag), Msg: fmt.Sprintf("after the heal, GET %s on %s answered %s, below %d issued on it", showTag(tag), n.nodeID, r, issued[tag])})
			}
		}
	}
}

// scanTags lists every tag SCAN pages through on the first running node.
func (c *campaign) scanTags() (map[string]bool, error) {
	for _, n := range c.pm.slots() {
		p := n.running()
		if p == nil {
			continue
		}
		rc, err := dialRESP(p.addr, 0, time.Second)
		if err != nil {
			return nil, err
		}
		defer rc.close()
		listed := map[string]bool{}
		for cursor := "0"; ; {
			r, err := rc.do(time.Now().Add(5*time.Second), "SCAN", cursor, "COUNT", "1000")
			if err != nil {
				return nil, err
			}
			if r.isError() || r.kind != '*' || len(r.arr) != 2 || r.arr[1].kind != '*' {
				return nil, fmt.Errorf("SCAN %s on %s answered %s", cursor, n.nodeID, r)
			}
			for _, e := range r.arr[1].arr {
				listed[e.str] = true
			}
			if cursor = r.arr[0].str; cursor == "0" {
				return listed, nil
			}
		}
	}
	return nil, errors.New("no node runs")
}

// readBackKind is tag-read-back, with invalidUTF8Tag for a name that is
// not valid UTF-8 or holds U+FFFD (what JSON makes of such a name).
func readBackKind(tag string) string {
	if !utf8.ValidString(tag) || strings.ContainsRune(tag, utf8.RuneError) {
		return "tag-read-back" + invalidUTF8Tag
	}
	return "tag-read-back"
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// goroutineDump asks a stuck process for its goroutines (SIGQUIT: the Go
// runtime prints them and exits) and summarizes where they wait.
func goroutineDump(p *proc) string {
	p.killed.Store(true)
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		return "no goroutine dump within 5s of SIGQUIT; log " + p.logf
	}
	b, _ := os.ReadFile(p.logf)
	waits := map[string]int{}
	for _, g := range strings.Split(string(b), "\n\n") {
		if !strings.HasPrefix(g, "goroutine ") || !strings.Contains(g, "sync.(*") {
			continue
		}
		// The first idserver frame says who waits.
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "idserver/") {
				fn, _, _ := strings.Cut(line, "(0x")
				waits[fn]++
				break
			}
		}
	}
	var out []string
	for f, k := range waits {
		out = append(out, fmt.Sprintf("%d goroutines wait on a lock in %s", k, f))
	}
	sort.Strings(out)
	return fmt.Sprintf("goroutine dump in %s:\n%s", p.logf, indent(strings.Join(out, "\n")))
}

func indent(s string) string { return "      " + strings.ReplaceAll(s, "\n", "\n      ") }

// Table prints what a campaign did: faults by kind, operations by kind and
// outcome, values checked, anomalies by kind, and each anomaly in full.
func (r *Result) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "seed %d, %v, %d faults scheduled\n", r.Seed, r.Elapsed.Round(time.Second), len(r.Schedule))
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	fmt.Fprintln(tw, "fault\tinjected\t")
	total := 0
	for _, k := range sortedKinds(r.Faults) {
		if k == KRepair {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t\n", k, r.Faults[k])
		total += r.Faults[k]
	}
	fmt.Fprintf(tw, "total\t%d\t\n", total)
	tw.Flush()
	if r.Faults[FPowerCut]+r.Faults[FPowerCutAll] > 0 {
		fmt.Fprintf(w, "power cuts dropped %d unsynced pages of 4 KiB (%.1f MiB)\n", r.PowerCutPages, float64(r.PowerCutPages)/256)
	}
	if n := r.Faults[KRepair]; n > 0 {
		fmt.Fprintf(w, "(and %d repairs before a fault or at the heal, as a StatefulSet makes them: a node restarted, a refused restart or a node no longer a member replaced at its address, the voters waited for; no FORGET)\n", n)
	}
	if r.History != nil && len(r.History.Removals) > 0 {
		fmt.Fprintf(w, "%d live nodes removed by the cluster while cut off (every value one handed out after its removal is an anomaly)\n", len(r.History.Removals))
	}
	fmt.Fprintln(w)
	v := r.Verdict
	if v == nil {
		return
	}
	// Latency of acknowledged operations, by kind (a transaction's
	// commands are the transaction's: counted under EXEC only).
	lat := map[Kind][]time.Duration{}
	if r.History != nil {
		for _, op := range r.History.Ops {
			if op.Outcome == OK && (op.Tx == 0 || op.Kind == KExec) {
				lat[op.Kind] = append(lat[op.Kind], op.End-op.Start)
			}
		}
	}
	pct := func(k Kind, p int) string {
		ds := lat[k]
		if len(ds) == 0 {
			return "-"
		}
		slices.Sort(ds)
		return fmt.Sprintf("%.1f", float64(ds[(len(ds)-1)*p/100])/1e6)
	}
	fmt.Fprintln(tw, "operation\tok\trefused\tunknown\tp50 ms\tp99 ms\t")
	var sum [3]int
	for k := range numKinds {
		c := v.OpsByKind[k.String()]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t\n", k, c[0], c[1], c[2], pct(k, 50), pct(k, 99))
		for i := range sum {
			sum[i] += c[i]
		}
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t\t\t\n", sum[0], sum[1], sum[2])
	tw.Flush()
	r.errorTable(w)
	fmt.Fprintf(w, "\nvalues checked (IDs and segment values acknowledged): %d\n", v.ValuesChecked)
	// The campaign's fixed tags by name; every other tag counted by result,
	// those that did not pass named.
	var tagsChecked, others []string
	byResult := map[string]int{}
	for tag, res := range v.Porcupine {
		switch {
		case slices.Contains(tags, tag):
			tagsChecked = append(tagsChecked, tag+"="+string(res))
		case res != porcupine.Ok:
			others = append(others, showTag(tag)+"="+string(res))
			fallthrough
		default:
			byResult[string(res)]++
		}
	}
	sort.Strings(tagsChecked)
	sort.Strings(others)
	for _, res := range sortedKeys(byResult) {
		tagsChecked = append(tagsChecked, fmt.Sprintf("(%d other tags %s)", byResult[res], res))
	}
	if len(others) > 10 {
		others = append(others[:10], "...")
	}
	fmt.Fprintf(w, "linearizability (porcupine) per tag: %s\n", strings.Join(tagsChecked, " "))
	if len(others) > 0 {
		fmt.Fprintf(w, "  not Ok: %s\n", strings.Join(others, " "))
	}
	fmt.Fprintln(w)
	kinds := make([]string, 0, len(v.Counts))
	for k := range v.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintln(tw, "anomaly\tcount\tfirst seen\t")
	n := 0
	for _, k := range kinds {
		first := "-"
		if at, ok := v.FirstAt[k]; ok {
			first = fmtDur(at)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", k, v.Counts[k], first)
		n += v.Counts[k]
	}
	fmt.Fprintf(tw, "total\t%d\t\t\n", n)
	tw.Flush()
	for _, a := range v.Anomalies {
		fmt.Fprintln(w)
		fmt.Fprint(w, a.Report(r.Seed))
	}
}

var numbers = regexp.MustCompile(`[0-9]+`)

// errorTable prints the commonest reasons operations were refused or left
// unknown, by kind, the numbers in them blanked so that alike errors count
// together.
func (r *Result) errorTable(w io.Writer) {
	if r.History == nil {
		return
	}
	type reason struct {
		kind    Kind
		outcome Outcome
		text    string
	}
	counts := map[reason]int{}
	for _, op := range r.History.Ops {
		if op.Outcome == OK || op.Err == "" {
			continue
		}
		text := numbers.ReplaceAllString(op.Err, "#")
		if len(text) > 70 {
			text = text[:70] + "..."
		}
		counts[reason{op.Kind, op.Outcome, text}]++
	}
	reasons := make([]reason, 0, len(counts))
	for k := range counts {
		reasons = append(reasons, k)
	}
	sort.Slice(reasons, func(i, j int) bool { return counts[reasons[i]] > counts[reasons[j]] })
	if len(reasons) > 12 {
		reasons = reasons[:12]
	}
	if len(reasons) == 0 {
		return
	}
	fmt.Fprintln(w, "\ncommonest reasons for refused and unknown operations:")
	for _, k := range reasons {
		fmt.Fprintf(w, "  %7d  %-7s %-8s %s\n", counts[k], k.kind, k.outcome, k.text)
	}
}
