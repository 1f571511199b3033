// Package node is one idserver node: it opens persist, the cluster, the
// generator, the segment buffers and the RESP server in that order, runs
// their background loops under one context, and closes them in reverse.
// cmd/idserver adds flags, signals and metrics; tests start the same node.
package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/cluster"
	"idserver/engine"
	"idserver/persist"
	"idserver/resp"
)

// Config is what a node is started with.
type Config struct {
	Bind          string // RESP listen host
	Port          int    // RESP port; 0 picks one
	Advertise     string // RESP address others reach this node at (bound address when empty)
	RaftAddr      string // Raft listen host:port (":0" style picks one)
	RaftAdvertise string // Raft address other members reach this node at
	Dir           string
	NodeID        string // "" generates one on first start
	// Join is the RESP address of a member to join, or a comma-separated
	// list of them (a headless Service's pods, this node's own among them).
	Join        string
	Layout      engine.Layout
	Window      time.Duration
	MaxBorrow   time.Duration
	WorkerLease time.Duration
	Recover     bool  // restart the cluster from this member alone (cluster.Config.Recover)
	RecoverSkip int64 // with Recover: how far every tag skips
	SegmentStep int64
	RequirePass string // the password clients AUTH with
	// ClusterSecret is what every connection to the Raft port proves it
	// knows (cluster.Config.Secret); RequirePass when empty.
	ClusterSecret string
	Limits        resp.Limits
	MaxClients    int
	Version       string
	Commit        string // the commit this binary was built from, "" when unknown
	Logger        *slog.Logger
	// TLSServer and TLSClient serve RESP and the Raft port over TLS and
	// reach other nodes with it. The Raft port requires and verifies a
	// client certificate against TLSServer.ClientCAs (mutual TLS): only
	// nodes reach it. RESP requires none.
	TLSServer, TLSClient *tls.Config
	// Now is the wall clock the generator and leases read (time.Now when
	// nil): the machine's clock, or an offset of it (DEBUG CLOCK). The
	// generator reads it at most once a millisecond (engine.Config.Monotonic),
	// so a fake clock that a test steps would show its steps late.
	Now func() time.Time
	// Debug, when set, lets DEBUG CLOCK step Now (--enable-debug-command).
	Debug resp.DebugClock
	// Network carries the Raft port (tests that cut it); nil means TCP/TLS.
	Network cluster.Network
	// RaftTimeoutScale scales every Raft timing and the timeouts derived
	// from them (cluster.TimingFor); 1 when zero.
	RaftTimeoutScale float64
	// SnapshotThreshold and SnapshotInterval are Raft's (tests set them
	// low); zero means the cluster's default (cluster.Config).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// MaxTags bounds the number of tags (--max-tags; cluster.Config).
	MaxTags int
	// Voters, DeadMemberAfter and Zone are autopilot's (cluster.Config).
	Voters          int
	DeadMemberAfter time.Duration
	Zone            string

	// ClientOutputLimit and ClientOutputTimeout bound a client's unread
	// replies (resp.Config); zero means resp's defaults.
	ClientOutputLimit   int
	ClientOutputTimeout time.Duration

	// PublicKey is --public-key: nil lets the cluster make one at bootstrap;
	// set, it must be the cluster's.
	PublicKey []byte

	// EmulateCluster and SentinelMasters are resp.Config's (--cluster-mode
	// emulated, --sentinel-masters).
	EmulateCluster  bool
	SentinelMasters []string

	// BeforeServe, when set, runs once the node is up and before it
	// serves its first command, so that what it sets up (the metrics'
	// sources) is there for every client the node answers.
	BeforeServe func(*Node)
}

// Node is a running node.
type Node struct {
	cfg      Config
	log      *slog.Logger
	Store    *persist.Store
	Cluster  *cluster.Cluster
	Gen      *engine.Generator
	Segments *engine.Segments
	Server   *resp.Server
	ID       string
	Worker   int64  // at start; Gen.Status().Worker after a fresh one (freshworker.go)
	Addr     string // advertised RESP address

	ids          *idSource
	ln           net.Listener
	plan         startPlan // how this start begins (decide.go)
	checkInLater bool      // the start could not reach the cluster
	startAbove   int64     // the ID time the generator starts above (check-in)
	leaseEnd     int64     // the lease end the generator starts with (check-in)
	ready        atomic.Bool
	conflicted   atomic.Pointer[error]
	incarnation  atomic.Uint64 // this start's number (lease.go)
	leaseChecked atomic.Bool   // a renewal of this start was committed
	notMember    atomic.Bool   // the cluster removed this node while it runs
	served       chan error
	stops        []func() error // what each phase started, stopped in reverse (start.go)
	background   sync.WaitGroup
	closeOnce    sync.Once
	closeErr     error
}

// idSource is the generator once there is one: the RESP server answers
// -LOADING before that, and INFO reads the layout and a zero status.
type idSource struct {
	layout engine.Layout
	gen    atomic.Pointer[engine.Generator]
}

func (s *idSource) NextIDs(dst []int64, n int) ([]int64, error) {
	if g := s.gen.Load(); g != nil {
		return g.NextIDs(dst, n)
	}
	return dst, &engine.LeaseError{Reason: "the node is still starting"}
}

func (s *idSource) GeneIDs(dst []int64, gene uint32, n int) ([]int64, error) {
	if g := s.gen.Load(); g != nil {
		return g.GeneIDs(dst, gene, n)
	}
	return dst, &engine.LeaseError{Reason: "the node is still starting"}
}

// NextIDRuns and GeneIDRuns let the RESP server answer NEXTIDRUNS and
// GENEIDRUNS from the generator's runs, a step per run, rather than cut an
// ID list into runs.
func (s *idSource) NextIDRuns(dst []engine.IDRun, n int) ([]engine.IDRun, error) {
	if g := s.gen.Load(); g != nil {
		return g.NextIDRuns(dst, n)
	}
	return dst, &engine.LeaseError{Reason: "the node is still starting"}
}

func (s *idSource) GeneIDRuns(dst []engine.IDRun, gene uint32, n int) ([]engine.IDRun, error) {
	if g := s.gen.Load(); g != nil {
		return g.GeneIDRuns(dst, gene, n)
	}
	return dst, &engine.LeaseError{Reason: "the node is still starting"}
}

func (s *idSource) UUIDv7s(dst [][16]byte, n int) ([][16]byte, error) {
	if g := s.gen.Load(); g != nil {
		return g.UUIDv7s(dst, n)
	}
	return dst, &engine.LeaseError{Reason: "the node is still starting"}
}

func (s *idSource) Layout() engine.Layout { return s.layout }

func (s *idSource) Status() engine.Status {
	if g := s.gen.Load(); g != nil {
		return g.Status()
	}
	return engine.Status{}
}

// joinWait bounds how long a start waits for the cluster to take the node.
const joinWait = 60 * time.Second

// Rejoin reports whether err is a start refused because the cluster
// removed this node while it was down (a pod back with its volume after
// --dead-member-after, or a CLUSTER FORGET meanwhile), asked twice a second
// apart, and gives the configuration that joins it again as a new member
// under the same node ID, through cfg.Join or, without one, the members it
// knew. Its directory's contents, which no member may use again, must be
// moved aside first (MoveAside). Nothing it held can repeat: its worker ID
// passes on only above its lease's end, and every tag is allocated above
// what it was given.
func Rejoin(cfg Config, err error) (Config, bool) {
	var removed *removedError
	if !errors.As(err, &removed) || cfg.Join == "" && len(removed.members) == 0 {
		return cfg, false
	}
	cfg.NodeID = removed.node
	if cfg.Join == "" {
		cfg.Join = strings.Join(removed.members, ",")
	}
	return cfg, true
}

// removedError is a start refused because the cluster removed the node.
type removedError struct {
	node    string
	members []string // the RESP addresses of the members it knew
	err     error
}

func (e *removedError) Error() string { return e.err.Error() }
func (e *removedError) Unwrap() error { return e.err }

// MoveAside moves everything in cfg.Dir but its lock file into
// cfg.Dir/removed, replacing what an earlier move left there, and syncs
// cfg.Dir; it returns cfg.Dir/removed. cfg is Rejoin's: the move goes
// through cfg.Dir/removed.tmp, which first records cfg's node ID and join
// addresses, so that a start after a move cut short (a kill, a power cut)
// finishes it and joins again the same way (Interrupted). It holds
// cfg.Dir's lock meanwhile.
func MoveAside(cfg Config) (string, error) {
	dir := cfg.Dir
	lock, err := persist.Lock(dir)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	aside, tmp := filepath.Join(dir, "removed"), filepath.Join(dir, "removed.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	note, err := json.Marshal(rejoinNote{Node: cfg.NodeID, Join: cfg.Join})
	if err != nil {
		return "", err
	}
	if err := persist.WriteFileSync(filepath.Join(tmp, rejoinFile), note); err != nil {
		return "", err
	}
	if err := persist.SyncDirs(dir); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		switch e.Name() {
		case "LOCK", "removed", "removed.tmp":
			continue
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			return "", err
		}
	}
	if err := os.RemoveAll(aside); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, aside); err != nil {
		return "", err
	}
	return aside, persist.SyncDirs(dir)
}

// wasMovedAside reports whether dir holds what MoveAside moved there (or
// began to): the directory of a member its cluster removed.
func wasMovedAside(dir string) bool {
	for _, name := range []string{"removed", "removed.tmp"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// rejoinFile, in removed.tmp, is how a cut-short move joins again.
const rejoinFile = "REJOIN.json"

type rejoinNote struct {
	Node string `json:"node"`
	Join string `json:"join"`
}

// Interrupted reports whether a MoveAside of cfg.Dir was cut short, and
// gives the configuration it was joining again with, for MoveAside to
// finish the move and Open to join.
func Interrupted(cfg Config) (Config, bool) {
	note, ok := readRejoinNote(filepath.Join(cfg.Dir, "removed.tmp"))
	if !ok {
		return cfg, false
	}
	cfg.NodeID = note.Node
	if cfg.Join == "" {
		cfg.Join = note.Join
	}
	return cfg, true
}

// readRejoinNote reads the note MoveAside left in dir.
func readRejoinNote(dir string) (rejoinNote, bool) {
	b, err := os.ReadFile(filepath.Join(dir, rejoinFile))
	var note rejoinNote
	if err != nil || json.Unmarshal(b, &note) != nil || note.Node == "" {
		return rejoinNote{}, false
	}
	return note, true
}

// publicIDs hands the cluster's public-ID key to the RESP server if this
// node has applied it; known false when it has not. A --public-key that is
// not the cluster's is an error naming both fingerprints.
func (n *Node) publicIDs() (known bool, err error) {
	if key := n.Cluster.PublicKey(); key != nil {
		return true, n.usePublicKey(key)
	}
	return false, nil
}

func (n *Node) usePublicKey(key []byte) error {
	if n.cfg.PublicKey != nil && !bytes.Equal(n.cfg.PublicKey, key) {
		return fmt.Errorf("--public-key (fingerprint %s) differs from the public-ID key of cluster %s (fingerprint %s): "+
			"start this node with the cluster's key, or without --public-key", engine.PublicKeyFingerprint(n.cfg.PublicKey),
			n.Cluster.ClusterID(), engine.PublicKeyFingerprint(key))
	}
	p, err := engine.NewPublicIDs(key, n.cfg.Layout)
	if err != nil {
		return err
	}
	n.Server.SetPublicIDs(p)
	n.log.Info("public IDs ready", "public_key_fingerprint", engine.PublicKeyFingerprint(key))
	return nil
}

// awaitPublicKey looks for the public-ID key after a start that did not
// see it (PUBLICID answers TRYAGAIN until then); a key that is not
// --public-key ends the node.
func (n *Node) awaitPublicKey(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		if known, err := n.publicIDs(); err != nil {
			n.conflict(err)
			return
		} else if known {
			return
		}
	}
}

// settleWait bounds how long a start waits for autopilot to settle this
// node (cluster.Settled): a few of autopilot's rounds.
func (n *Node) settleWait() time.Duration { return 8 * n.Cluster.Timing().Autopilot }

// waitSettled waits, bounded, until autopilot has made this node a voter or
// has the voters it wants: a node starting in a rolling replacement serves
// (and a readiness probe passes) once the next node may be taken away.
func (n *Node) waitSettled(ctx context.Context) {
	deadline := time.Now().Add(n.settleWait())
	for !n.Cluster.Settled() {
		if time.Now().After(deadline) {
			n.log.Warn("serving before autopilot settled this node (a voter, or the voters it wants)", "waited", n.settleWait().String())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Settled reports whether autopilot has nothing left to do for this node
// (cluster.Settled): what /healthz's readiness asks.
func (n *Node) Settled() bool { return n.Cluster.Settled() }

// mutualTLS is the Raft port's TLS: server's, requiring and verifying a
// client certificate (nil without TLS). Both sides must name whom they
// trust: with no CA pool Go would verify against the system's roots, and
// any publicly signed certificate would reach the Raft port.
func mutualTLS(server, client *tls.Config) (*tls.Config, error) {
	if server == nil {
		return nil, nil
	}
	if server.ClientCAs == nil || client == nil || client.RootCAs == nil || len(client.Certificates) == 0 && client.GetClientCertificate == nil {
		return nil, errors.New("TLS on the Raft port needs the CAs that sign the nodes' certificates (TLSServer.ClientCAs, TLSClient.RootCAs) and a certificate to present (TLSClient.Certificates or GetClientCertificate)")
	}
	raft := server.Clone()
	raft.ClientAuth = tls.RequireAndVerifyClientCert
	return raft, nil
}

// conflict stops issuing at once and ends the node: its cluster identity
// is in doubt (cluster.Config.OnConflict).
func (n *Node) conflict(err error) {
	n.log.Error("stopping: another cluster claims this node", "err", err)
	n.conflicted.Store(&err)
	if g := n.ids.gen.Load(); g != nil {
		g.Close()
	}
	select {
	case n.served <- err:
	default:
	}
}

// NotMember reports whether the cluster removed this node while it runs
// (a CLUSTER FORGET, or cut off for --dead-member-after): it hands out
// nothing any more, and restarted it joins again as a new member. The
// liveness probe (/healthz) fails on it, so that Kubernetes restarts it.
func (n *Node) NotMember() bool { return n.notMember.Load() }

// Served delivers the RESP server's error if it stops on its own, or a
// conflict that ends the node.
func (n *Node) Served() <-chan error { return n.served }

// workerID checks in with the cluster and returns the node's worker ID,
// the ID time its generator starts above, and its lease end. A new node is
// given a worker ID (joining through cfg.Join, or as the bootstrapped single
// node) and keeps it. A restarted node keeps the one in its directory; the
// cluster checks it is still that member (a forgotten node is refused) and
// learns its addresses. If the cluster cannot be reached in time the node
// serves from its own state (its lease bounds how long) and keeps trying in
// the background, except when its directory holds a one-node cluster of its
// own and --join names another: the "--join forgotten on first start"
// mistake, which must be confirmed or refused before any ID leaves.
func (n *Node) workerID(ctx context.Context) (worker, startAbove, lease int64, err error) {
	w, above, stored, err := n.Store.Worker()
	if err != nil {
		return 0, 0, 0, err
	}
	ownCluster := stored && len(n.joinAddrs()) > 0 && !n.firstOfJoin() && n.Cluster.Alone()
	mustConfirm := !stored || ownCluster
	wait := 10 * time.Second
	if mustConfirm {
		wait = joinWait
	}
	if !stored && n.plan.joins {
		n.log.Info("joining the cluster", "join", n.cfg.Join, "node_id", n.ID, "kind", n.plan.kind.String())
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	jw, jabove, jlease, err := n.checkIn(ctx, !ownCluster)
	if stored && errors.Is(err, cluster.ErrRemoved) {
		// Removed while it was down. Asked again a second later, so that
		// the directory is moved aside only on two answers.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		if jw, jabove, jlease, err = n.checkIn(ctx, !ownCluster); errors.Is(err, cluster.ErrRemoved) {
			err = &removedError{node: n.ID, members: n.Cluster.PeerAddrs(), err: err}
		}
	}
	cancel()
	switch {
	case err == nil && !stored:
		n.log.Info("worker ID assigned", "worker_id", jw, "start_above_ms", jabove, "lease_end_ms", jlease)
		return jw, jabove, jlease, n.Store.SetWorkerSync(jw, jabove)
	case err == nil && jw != w && n.retiredHere(w):
		// The cluster gave this node a fresh worker ID (freshworker.go) and the
		// node stopped before storing it, so it never issued on it: it
		// takes it, above its committed lease end.
		end := max(jlease, n.Cluster.Lease())
		n.log.Warn("taking the fresh worker ID the cluster gave this node before it stopped", "worker_id", jw, "retired_worker_id", w, "start_above_ms", end)
		return jw, end, end, n.Store.SetWorkerSync(jw, end)
	case err == nil && jw != w:
		return 0, 0, 0, fmt.Errorf("the cluster holds node %s as worker %d, its directory %s says %d: start it on an empty --dir", n.ID, jw, n.cfg.Dir, w)
	case err == nil:
		return w, above, max(jlease, n.Cluster.Lease()), nil
	case ownCluster:
		return 0, 0, 0, fmt.Errorf("this directory holds a one-node cluster of its own (%s) and --join %s cannot confirm it is the same cluster: %w",
			n.Cluster.ClusterID(), n.cfg.Join, err)
	case mustConfirm || errors.Is(err, cluster.ErrRefused):
		return 0, 0, 0, err
	}
	n.log.Warn("cannot reach the cluster yet: serving from this directory's state (for at most the worker lease) and retrying",
		"err", err)
	n.checkInLater = true
	return w, above, n.Cluster.Lease(), nil
}

// checkIn asks the cluster to take this node as a member: through its own
// Raft view when viaCluster (this node leads, or knows the leader), else
// or then through the other members and cfg.Join (joinThrough). It
// retries while there is no answer, until ctx ends; a refusal ends it at
// once.
func (n *Node) checkIn(ctx context.Context, viaCluster bool) (worker, startAbove, lease int64, err error) {
	for attempt := 1; ; attempt++ {
		if viaCluster {
			actx, cancel := context.WithTimeout(ctx, n.Cluster.Timing().Call)
			worker, startAbove, lease, err = n.Cluster.Join(actx, n.ID, n.Cluster.RaftAddr(), n.Addr)
			cancel()
		} else {
			err = cluster.ErrNoLeader
		}
		if err != nil && !errors.Is(err, cluster.ErrRefused) {
			for _, member := range append(n.Cluster.PeerAddrs(), n.joinAddrs()...) {
				if member == "" || member == n.Addr {
					continue
				}
				if worker, startAbove, lease, err = n.joinThrough(ctx, member); err == nil || errors.Is(err, cluster.ErrRefused) {
					break
				}
			}
		}
		if err == nil || errors.Is(err, cluster.ErrRefused) {
			return worker, startAbove, lease, err
		}
		if attempt%8 == 0 {
			n.log.Info("waiting for the cluster to take this node", "via", n.cfg.Join, "err", err)
		}
		select {
		case <-ctx.Done():
			return 0, 0, 0, fmt.Errorf("no answer from the cluster: %w", err)
		case <-time.After(retryDelay(attempt)):
		}
	}
}

// retryDelay is the wait before check-in attempt+1: soon at first (a
// restarting one-node cluster leads itself within milliseconds, and a start
// should not wait 250 ms more), then 250 ms. The wait is never zero, however
// many attempts, so a joiner that keeps failing logs a few lines a second.
func retryDelay(attempt int) time.Duration {
	if attempt >= 5 {
		return 250 * time.Millisecond
	}
	return 10 * time.Millisecond << attempt
}

// joinThrough asks the member whose RESP address is member to make this
// node a member. It reads the member's INFO cluster: a member that says
// join_via:raft takes the join on its Raft port (raft_addr), where this
// node proves the cluster secret before anything is sent; an older one
// takes CLUSTER JOIN on its RESP port. A refusal is ErrRefused (a wrong
// cluster secret, or an error reply other than TRYAGAIN or LOADING, the
// member starting, among them); other errors are worth a retry.
func (n *Node) joinThrough(ctx context.Context, member string) (worker, startAbove, lease int64, err error) {
	ictx, icancel := context.WithTimeout(ctx, n.Cluster.Timing().Call)
	info, err := n.clusterInfo(ictx, member)
	icancel()
	var re redis.Error
	switch {
	case errors.As(err, &re) && !strings.HasPrefix(re.Error(), "TRYAGAIN") && !strings.HasPrefix(re.Error(), "LOADING"):
		return 0, 0, 0, fmt.Errorf("%w: %s answered INFO cluster: %v%s", cluster.ErrRefused, member, err, joinHint(re.Error()))
	case err != nil:
		return 0, 0, 0, err
	case info["join_via"] != "raft" || info["raft_addr"] == "":
		return n.joinThroughRESP(ctx, member)
	}
	// The answer may take a client request's budget (a join that first
	// removes a dead member at this address, then adds this node): a call
	// that gave up sooner would retry, and the retry would be refused as a
	// member with an empty directory.
	jctx, jcancel := context.WithTimeout(ctx, n.Cluster.Timing().Request+time.Second)
	defer jcancel()
	raftAddr := info["raft_addr"]
	worker, startAbove, lease, err = n.Cluster.JoinThrough(jctx, raftAddr, n.ID, n.Cluster.RaftAddr(), n.Addr)
	if errors.Is(err, cluster.ErrAuth) {
		return 0, 0, 0, fmt.Errorf("%w: %s (Raft port %s): %w (start this node with the cluster's --cluster-secret, or --requirepass)",
			cluster.ErrRefused, member, raftAddr, err)
	}
	return worker, startAbove, lease, err
}

// joinThroughRESP sends CLUSTER JOIN to a member's RESP port, for a member
// that does not take the join on its Raft port. An error reply other than
// TRYAGAIN or LOADING (the member is starting) is a refusal.
func (n *Node) joinThroughRESP(ctx context.Context, member string) (worker, startAbove, lease int64, err error) {
	// The answer may take a client request's budget, as in joinThrough.
	c := redis.NewClient(&redis.Options{Addr: member, Password: n.cfg.RequirePass, TLSConfig: n.cfg.TLSClient,
		Protocol: 2, MaxRetries: -1, DisableIdentity: true, ReadTimeout: n.Cluster.Timing().Request + time.Second})
	defer c.Close()
	// go-redis ends a read at the context's deadline, not at its
	// cancellation: closing the client ends it then.
	defer context.AfterFunc(ctx, func() { c.Close() })()
	v, err := c.Do(ctx, "CLUSTER", "JOIN", n.ID, n.Cluster.RaftAddr(), n.Addr).Int64Slice()
	var re redis.Error
	switch {
	case errors.As(err, &re) && !strings.HasPrefix(re.Error(), "TRYAGAIN") && !strings.HasPrefix(re.Error(), "LOADING"):
		return 0, 0, 0, fmt.Errorf("%w: %s answered: %v%s", cluster.ErrRefused, member, err, joinHint(re.Error()))
	case err != nil:
		return 0, 0, 0, err
	case len(v) != 3:
		return 0, 0, 0, fmt.Errorf("%s answered CLUSTER JOIN with %v", member, v)
	}
	return v[0], v[1], v[2], nil
}

// joinHint says what a refusal of INFO or CLUSTER JOIN by a member's RESP
// port most likely means, for the two an operator meets first.
func joinHint(reply string) string {
	switch {
	case strings.HasPrefix(reply, "NOAUTH"), strings.HasPrefix(reply, "WRONGPASS"):
		return " (start this node with the cluster's --requirepass)"
	case strings.Contains(reply, "unknown subcommand") || strings.Contains(reply, "unknown command"):
		return " (is it an idserver? --join names the RESP addresses of idserver members)"
	}
	return ""
}

// checkInLoop keeps checking in, in the background, after a start that
// could not reach the cluster.
func (n *Node) checkInLoop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, _, _, err := n.checkIn(ctx, true)
	switch {
	case errors.Is(err, cluster.ErrRefused):
		n.log.Error("the cluster refuses this node: it stops issuing IDs when its worker lease ends", "err", err)
	case err != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		n.log.Warn("could not reach the cluster to announce this node's addresses", "err", err)
	}
}

// renewLease keeps the worker lease about WorkerLease ahead, renewing when
// a quarter of it is used; the hot path never waits for it. While renewals
// fail it retries often and tells the generator why, for the TRYAGAIN it
// answers once the lease ends. When the clock went back past the borrow it
// takes a fresh worker ID first (freshworker.go): in this loop, so that no
// renewal of the old worker ID is in flight when the generator moves.
// The generator's Trouble (CLOCKBACK, an ended lease) wakes it at once.
func (n *Node) renewLease(ctx context.Context) {
	lease := n.cfg.WorkerLease
	epoch := n.cfg.Layout.Epoch.UnixMilli()
	var freshFailed time.Time
	unit := n.cfg.Layout.UnitMS()
	for {
		failed := false // a renewal or a fresh worker ID failed: no hurrying on Trouble
		if n.clockWentBack() {
			if failed = time.Since(freshFailed) < freshRetry; !failed && n.freshWorker(ctx) != nil {
				freshFailed, failed = time.Now(), true
			}
		}
		st := n.Gen.Status()
		wall := n.cfg.Now().UnixMilli() - epoch
		// The last ID's time unit ends a unit after its start (LastTimeMS):
		// the lease must cover that end, and the lease runs on from there,
		// so that a coarse unit (1s) keeps the margin a millisecond has.
		from := max(wall, st.LastTimeMS+unit)
		wait := lease / 4
		if st.LeaseEndMS-from < lease.Milliseconds()*3/4 {
			rctx, cancel := context.WithTimeout(ctx, min(n.Cluster.Timing().Call, lease/2))
			inc := n.incarnation.Load()
			g, err := n.Cluster.RenewLeaseAs(rctx, st.Worker, from+lease.Milliseconds(), inc)
			cancel()
			if err == nil && !n.leaseChecked.Swap(true) && g.RolledBack(inc) {
				n.log.Error("this data directory is older than what the cluster committed for this node (restored from a copy?), "+
					"and the node could not tell at start: IDs it issued since the start may repeat earlier ones",
					"incarnation", inc, "incarnation_in_cluster", g.PrevIncarnation)
			}
			failed = failed || err != nil
			switch {
			case err == nil:
				n.Gen.SetLease(g.EndMS)
				n.Segments.SetLeaseEnd(n.wallOf(g.EndMS))
				n.Gen.SetLeaseProblem("")
				n.notMember.Store(false)
			case errors.Is(err, cluster.ErrNotMember):
				n.notMember.Store(true)
				n.Gen.SetLeaseProblem("this node is no longer a member of the cluster (removed as dead by the cluster, or by CLUSTER FORGET); restarted, it joins again as a new member")
				wait = lease / 8
			case errors.Is(err, cluster.ErrNoLeader):
				n.Gen.SetLeaseProblem("cannot reach the cluster's quorum to renew it")
				wait = min(lease/8, 500*time.Millisecond)
			default:
				n.Gen.SetLeaseProblem("cannot renew it: " + err.Error())
				wait = min(lease/8, 500*time.Millisecond)
			}
		} else {
			wait = min(wait, time.Duration(st.LeaseEndMS-from-lease.Milliseconds()*3/4+1)*time.Millisecond)
		}
		trouble := n.Gen.Trouble()
		if failed {
			trouble = nil
		}
		if n.clockWentBack() {
			wait = min(wait, freshRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-trouble:
		case <-time.After(max(wait, 10*time.Millisecond)):
		}
	}
}

// wallOf is the wall clock time of an ID time (ms since the epoch).
func (n *Node) wallOf(idMS int64) time.Time {
	return time.UnixMilli(n.cfg.Layout.Epoch.UnixMilli() + idMS)
}

// joinAddrs is --join as a list, without this node's own address.
func (n *Node) joinAddrs() []string {
	var out []string
	for _, a := range strings.Split(n.cfg.Join, ",") {
		if a = strings.TrimSpace(a); a != "" && a != n.Addr {
			out = append(out, a)
		}
	}
	return out
}

// firstOfJoin reports whether --join is a list that starts with this node's
// own address: the pod that bootstraps the cluster when nobody else is up.
func (n *Node) firstOfJoin() bool {
	first, _, _ := strings.Cut(n.cfg.Join, ",")
	return strings.TrimSpace(first) == n.Addr
}

// layoutWarnEvery is how often a node whose layout has fewer than
// engine.WarnTimeLeft left says so in its log.
const layoutWarnEvery = 24 * time.Hour

// warnLayoutEnd logs a warning at start and once a day while the layout's
// time bits have fewer than engine.WarnTimeLeft left (a start with less
// than engine.MinTimeLeft is refused).
func (n *Node) warnLayoutEnd(ctx context.Context) {
	l := n.cfg.Layout
	for {
		if left := l.TimeLeft(n.cfg.Now()); left < engine.WarnTimeLeft {
			n.log.Warn("the ID layout's time bits run out in fewer than two years: plan a new layout (a new cluster with a later --epoch, or more --time-bits or a coarser --time-unit)",
				"time_bits_end", l.End().Format(time.RFC3339), "days_left", int64(left.Hours()/24), "layout", l.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(layoutWarnEvery):
		}
	}
}

// freeIfZero turns host:0 into host:port with a port free right now.
func freeIfZero(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--raft-addr %q: %v", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
