package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"idserver/chaos/lazyfs"
)

// BuildServer builds cmd/idserver of the module that holds this package
// into dir and returns the binary's path.
func BuildServer(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the idserver module (go env GOMOD is empty)")
	}
	bin := filepath.Join(dir, "idserver")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/idserver")
	build.Dir = filepath.Dir(mod)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/idserver: %v\n%s", err, out)
	}
	return bin, nil
}

// serverFlags lists the flags a binary knows, from its -help output, so a
// campaign uses the newer flags (--raft-advertise, --worker-lease) only
// where they exist.
func serverFlags(bin string) map[string]bool {
	out, _ := exec.Command(bin, "-help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	return flags
}

// proc is one idserver process.
type proc struct {
	gen    int // incarnation, unique in the campaign
	nodeID string
	addr   string // RESP host:port
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // from Wait, once done is closed
	logf   string
	killed atomic.Bool // ended by the campaign, not by itself
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// node is one slot of the cluster: an address, a Unix user (for
// partitions), and the process serving it now.
type node struct {
	slot     int
	host     string
	uid      int // 0: the campaign's own user
	port     int
	raftPort int
	dir      string
	nodeID   string
	layout   []string     // extra layout flags (a wrong-layout joiner)
	join     string       // --join given at every start ("" for the node that bootstraps)
	offset   atomic.Int64 // DEBUG CLOCK offset, nanoseconds
	// vacant: no node in the slot (not started yet, or scaled down): the
	// nemesis leaves it alone until a scale-up fills it.
	vacant atomic.Bool

	mu  sync.Mutex // cur, and the address and ID clients read
	cur *proc      // nil while down
}

func (n *node) clockOffset() time.Duration     { return time.Duration(n.offset.Load()) }
func (n *node) setClockOffset(d time.Duration) { n.offset.Store(int64(d)) }

// running is n's process, or nil while it is down.
func (n *node) running() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur
}

func (n *node) setRunning(p *proc) {
	n.mu.Lock()
	n.cur = p
	n.mu.Unlock()
}

func (n *node) respAddr() string { return net.JoinHostPort(n.host, strconv.Itoa(n.port)) }

// procManager starts, stops and restarts the processes of a campaign.
type procManager struct {
	bin     string
	root    string
	flags   map[string]bool
	step    int64
	hist    *History
	t0      time.Time
	logf    func(string, ...any)
	asUsers bool
	extra   []string // flags every process gets (membership: --voters, --dead-member-after, --worker-lease)

	disks map[int]string     // slot -> a small tmpfs or lazyfs its data directories live on
	lazy  map[int]*lazyfs.FS // slot -> its lazyfs, when power cuts are in the mix

	mu    sync.Mutex
	gens  int
	nodes []*node
	all   []*proc // every process ever started, for the final kill
}

// newPorts gives n new RESP and Raft ports.
func (n *node) newPorts() error {
	ports, err := freePortsOn(n.host, 2)
	if err != nil {
		return err
	}
	n.port, n.raftPort = ports[0], ports[1]
	return nil
}

// node is the slot's node now.
func (pm *procManager) node(slot int) *node {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return pm.nodes[slot]
}

// setNode puts a replacement in a slot.
func (pm *procManager) setNode(slot int, n *node) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.nodes[slot] = n
}

// slots are the nodes of the slots that are not vacant: the cluster as
// the campaign means it now (3 to MaxNodes of them).
func (pm *procManager) slots() []*node {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(pm.nodes), func(n *node) bool { return n.vacant.Load() })
}

// vacantSlots are the nodes of the vacant slots.
func (pm *procManager) vacantSlots() []*node {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(pm.nodes), func(n *node) bool { return !n.vacant.Load() })
}

// freePortsOn finds n ports free on host now, distinct: every listener is
// held open until all are found.
func freePortsOn(host string, n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// newNode makes a slot with fresh ports and an empty directory.
func (pm *procManager) newNode(slot int, host string, uid int) (*node, error) {
	n := &node{slot: slot, host: host, uid: uid}
	return n, pm.freshDir(n, fmt.Sprintf("n%d", slot))
}

// freshDir gives n a new empty data directory and a node ID, at the
// addresses it has (new ports when it has none yet): a pod rescheduled
// with an empty volume keeps its name and address.
func (pm *procManager) freshDir(n *node, nodeID string) error {
	if n.port == 0 {
		if err := n.newPorts(); err != nil {
			return err
		}
	}
	pm.mu.Lock()
	pm.gens++
	g := pm.gens
	pm.mu.Unlock()
	if n.dir != "" && n.running() == nil {
		os.RemoveAll(n.dir) // wiped: a new disk
	}
	base := pm.root
	if d, ok := pm.disks[n.slot]; ok {
		base = d
	}
	n.dir = filepath.Join(base, fmt.Sprintf("data-%s-%d", nodeID, g))
	n.nodeID = nodeID
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	if n.uid != 0 {
		if err := os.Chown(n.dir, n.uid, n.uid); err != nil {
			return err
		}
	}
	// As an operator's setup would, the new directory is made durable
	// (on a lazyfs in Strict mode, a power cut would undo it otherwise).
	return syncDir(base)
}

var listeningLine = regexp.MustCompile(`msg=listening addr=(\S+)`)

// start runs n's process with join (a member's RESP address, or "" for a
// node that bootstraps or restarts on its own directory) and waits until it
// answers PING, or until wait runs out.
func (pm *procManager) start(n *node, join string, wait time.Duration) (*proc, error) {
	p, err := pm.startOnce(n, join, wait)
	if err != nil && p != nil && p.exited() && strings.Contains(tailLog(p.logf, 5), "address already in use") {
		// Someone took a port between our look and the bind: other ports.
		if err := n.newPorts(); err != nil {
			return p, err
		}
		return pm.startOnce(n, join, wait)
	}
	return p, err
}

func (pm *procManager) startOnce(n *node, join string, wait time.Duration) (*proc, error) {
	args := []string{"--bind", n.host, "--port", strconv.Itoa(n.port),
		"--raft-addr", net.JoinHostPort(n.host, strconv.Itoa(n.raftPort)),
		"--dir", n.dir, "--node-id", n.nodeID, "--segment-step", strconv.FormatInt(pm.step, 10)}
	if pm.flags["enable-debug-command"] {
		args = append(args, "--enable-debug-command")
	}
	args = append(args, pm.extra...)
	if join != "" {
		args = append(args, "--join", join)
	}
	args = append(args, n.layout...)
	pm.mu.Lock()
	pm.gens++
	p := &proc{gen: pm.gens, nodeID: n.nodeID, addr: n.respAddr(), done: make(chan struct{})}
	pm.mu.Unlock()
	p.logf = filepath.Join(pm.root, fmt.Sprintf("log-slot%d-%s-proc%d.txt", n.slot, n.nodeID, p.gen))
	logFile, err := os.Create(p.logf)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "# %s %s\n", pm.bin, strings.Join(args, " "))
	cmd := exec.Command(pm.bin, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if n.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(n.uid), Gid: uint32(n.uid)}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	pm.mu.Lock()
	pm.all = append(pm.all, p)
	pm.mu.Unlock()
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			logFile.Write(append(sc.Bytes(), '\n'))
			if !seen && listeningLine.Match(sc.Bytes()) {
				seen = true
				close(listening)
			}
		}
		p.err = cmd.Wait()
		fmt.Fprintf(logFile, "# exit: %v\n", p.err)
		logFile.Close()
		close(p.done)
	}()
	// A start resets the debug clock offset to zero.
	pm.hist.addClock(clockChange{Slot: n.slot, At: time.Since(pm.t0), From: n.clockOffset(), To: 0})
	n.setClockOffset(0)
	n.setRunning(p)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-listening:
	case <-p.done:
		n.setRunning(nil)
		return p, fmt.Errorf("%s exited before listening: %v (log %s)", n.nodeID, p.err, p.logf)
	case <-timer.C:
		return p, fmt.Errorf("%s did not listen within %v (log %s)", n.nodeID, wait, p.logf)
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if rc, err := dialRESP(p.addr, 0, time.Second); err == nil {
			r, err := rc.do(time.Now().Add(time.Second), "PING")
			rc.close()
			// PING answers -LOADING until the node can issue, which a node
			// started inside a partition may not for a while: it answers.
			if err == nil && (r.str == "PONG" || strings.HasPrefix(r.str, "LOADING")) {
				return p, nil
			}
		}
		if time.Now().After(deadline) || p.exited() {
			return p, fmt.Errorf("%s answers no PING (log %s)", n.nodeID, p.logf)
		}
	}
}

// signal sends sig to n's process, if it runs.
func (n *node) signal(sig syscall.Signal) error {
	p := n.running()
	if p == nil || p.exited() {
		return errors.New("not running")
	}
	return p.cmd.Process.Signal(sig)
}

// kill ends n's process with SIGKILL (continuing it first is not needed:
// SIGKILL ends a stopped process) and waits for it.
func (n *node) kill() {
	p := n.running()
	if p == nil {
		return
	}
	p.killed.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	n.setRunning(nil)
}

// reap notices a process of n that exited by itself: a crash, recorded as
// an anomaly (exit-on-full-disk when its log says the disk was full).
func (pm *procManager) reap(n *node) {
	p := n.running()
	if p == nil || !p.exited() || p.killed.Load() {
		return
	}
	n.setRunning(nil)
	// A panic's message is above its goroutine's stack: look that far.
	long := tailLog(p.logf, 80)
	tail := tailLog(p.logf, 6)
	if i := strings.LastIndex(long, "\npanic: "); i >= 0 {
		tail = firstLine(long[i+1:]) + "\n...\n" + tail
	}
	kind := "crashed"
	if strings.Contains(tail, "no space left on device") { // the panic's message or the last lines
		kind = "exit-on-full-disk"
	}
	pm.hist.addMembership(Anomaly{At: time.Since(pm.t0), Kind: kind, Msg: fmt.Sprintf("%s (proc %d) exited by itself: %v; log %s\n%s", n.nodeID, p.gen, p.err, p.logf, indent(tail))})
}

// killAll ends every process the manager started.
func (pm *procManager) killAll() {
	pm.mu.Lock()
	all := append([]*proc(nil), pm.all...)
	pm.mu.Unlock()
	for _, p := range all {
		if !p.exited() {
			p.killed.Store(true)
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// tailLog is the end of a process's log.
func tailLog(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}

// admin sends one command to addr on a fresh connection.
func admin(addr string, timeout time.Duration, args ...string) (reply, error) {
	rc, err := dialRESP(addr, 0, timeout)
	if err != nil {
		return reply{}, err
	}
	defer rc.close()
	return rc.do(time.Now().Add(timeout), args...)
}

// clusterInfo reads CLUSTER INFO from addr.
func clusterInfo(addr string) (map[string]string, error) {
	r, err := admin(addr, 2*time.Second, "CLUSTER", "INFO")
	if err != nil {
		return nil, err
	}
	if r.isError() {
		return nil, errors.New(r.str)
	}
	info := map[string]string{}
	for _, line := range strings.Split(r.str, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
