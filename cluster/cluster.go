package cluster

// Opening and closing a node: Config, the Cluster type, Open (bootstrap, restart,
// the Raft stores and transport) and Close. The other subjects live in files
// of their own: leader.go, alloc.go, set.go, membership.go, lease.go,
// recover.go, status.go, rpc.go (node-to-node requests) and fsm.go.

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"idserver/engine"
	"idserver/persist"
)

// Config sets up a node.
type Config struct {
	NodeID   string
	Dir      string // data directory; Raft keeps <Dir>/raft
	RaftBind string // host:port the Raft port listens on
	// RaftAdvertise is the Raft address other members reach this node at
	// (RaftBind when empty).
	RaftAdvertise string
	RESPAddr      string // this node's advertised RESP address, for CLUSTER LEADER
	Secret        string // the cluster secret every connection to the Raft port proves it knows (rpc.go)
	Layout        engine.Layout
	Store         *persist.Store
	Logger        *slog.Logger
	// OnFence drops every value of tag this node buffers and every
	// allocation of it in flight, and returns what OnIssued returns
	// (engine.Segments.Fence): the first step of a SET.
	OnFence func(tag string) (issued int64)
	// OnIssued answers the largest value of tag this node handed out in
	// this process, dropping nothing (a SET asks it before OnFence), or 0
	// when the node vouches for nothing: every value it was allocated of
	// the tag then counts as possibly issued (engine.Segments.Issued).
	OnIssued func(tag string) (issued int64)
	// Join says the node joins an existing cluster instead of bootstrapping
	// its own when its directory is empty.
	Join bool
	// OnForgotten is told when the leader forgets this node (CLUSTER
	// FORGET) while it still runs: it must hand out no more values.
	OnForgotten func()
	// OnConflict is told, once, when this node bootstrapped a new cluster
	// but another cluster's members reach for it as their member at its
	// Raft address: it most likely replaced a member's disk without
	// --join, and must stop issuing.
	OnConflict func(error)
	// Recover restarts the cluster from this node alone, after a majority
	// of its members is lost for good (hashicorp/raft's RecoverCluster):
	// the others are forgotten, every tag skips RecoverSkip values and
	// their worker leases run 10 * WorkerLease longer, beyond what they
	// could have issued in entries this node never saw. It is refused
	// while another member answers on its Raft address, and ignored when
	// this node is alone in the cluster it recovered (recover.go).
	Recover     bool
	RecoverSkip int64
	// PublicKey is --public-key (engine.PublicKeyLen bytes), nil when not
	// given: the key this node proposes when the cluster has none yet, and
	// what a join says of itself, so that a node started with another
	// key than its cluster's is refused.
	PublicKey []byte
	// Now is the wall clock (time.Now when nil): lease ends are ID times.
	Now func() time.Time
	// WorkerLease is how far ahead of the clock a worker lease runs
	// (--worker-lease, 10s when zero).
	WorkerLease time.Duration
	// Network serves and reaches the Raft port; nil means TCP on RaftBind,
	// or TLS when TLSServer is set. Tests pass one they can partition.
	Network Network
	// TLSServer and TLSClient, when set, carry the Raft port over TLS.
	TLSServer, TLSClient *tls.Config

	// Voters is the most voters autopilot keeps (--voters; DefaultVoters
	// when zero); every other member is a non-voter.
	Voters int
	// DeadMemberAfter is how long the leader goes without hearing from a
	// member before autopilot removes it as FORGET does
	// (--dead-member-after); zero never removes.
	DeadMemberAfter time.Duration
	// Zone is this node's failure domain (--zone): autopilot spreads the
	// voters over zones.
	Zone string
	// Version and Commit are this node's build (idserver --version): the
	// leader collects every member's with its stats requests, and CLUSTER
	// INFO lists them.
	Version, Commit string
	// MaxTags bounds the number of tags in the cluster (--max-tags; 0: no
	// bound). The leader commits its own, once every member knows the
	// bound (tagbound.go); a new tag past it is ErrTagLimit.
	MaxTags int

	// TimeoutScale scales every timeout of the cluster, Raft's included
	// (--raft-timeout-scale; TimingFor); 1 when zero.
	TimeoutScale      float64
	SnapshotThreshold uint64
	// SnapshotInterval is how often Raft checks SnapshotThreshold, at a
	// random time between it and twice it; DefaultSnapshotInterval when
	// zero.
	SnapshotInterval time.Duration
}

// DefaultSnapshotInterval is how often Raft checks whether enough log
// entries follow its last snapshot to take the next one. A start reads
// every entry after the last snapshot (the check of the directory, Raft's
// scan for configurations, the first leader's apply of the entries it
// finds committed), so the log a start finds is bounded by the threshold
// plus what this interval lets pile up; the threshold bounds how often a
// busy cluster snapshots.
const DefaultSnapshotInterval = 10 * time.Second

// Cluster is this node's view of the Raft cluster.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	timing  Timing
	raft    *raft.Raft
	started atomic.Pointer[raft.Raft] // raft, once NewRaft returned: read by dials its goroutines make
	pilot   *pilot
	fsm     *fsm
	mux     *mux
	trans   *raft.NetworkTransport
	logs    *raftboltdb.BoltStore
	timed   timedLogs              // logs as Raft reads and writes them
	disk    *diskWatch             // this node's sync and commit latency (slowdisk.go)
	cluster atomic.Pointer[string] // this node's cluster ID, "" before bootstrap or admission

	allocs   chan *allocReq
	forwards chan *allocReq // allocations to forward to the leader (forward.go)
	stop     chan struct{}
	stopped  sync.WaitGroup
	applies  atomic.Int64 // log entries this node proposed as leader

	proposingMaxTags atomic.Bool // proposeMaxTags runs (tagbound.go)

	poolMu sync.Mutex
	pool   map[string]*streams // node-to-node streams by Raft address (streams.go)

	refusedLogged atomic.Int64
	boot          uint64        // this process: allocations record it, fences answer it
	readyTerm     atomic.Uint64 // the term in which this leader's state machine caught up (caughtUp)
	checks        leaderChecks  // reads' confirmations that this node leads (readIndex)

	holdMu       sync.Mutex
	holds        map[string]chan struct{} // tags a SET is checking on this leader: allocations wait
	bootstrapped bool                     // this start bootstrapped a new cluster
	conflict     sync.Once                // OnConflict, once
	seq          atomic.Uint64            // node-to-node request numbers

	departedMu    sync.Mutex
	confirmedGone map[string]bool // removed members that confirmed it to this leader: they hand out nothing more
}

// Open starts Raft on cfg.RaftBind. A node with no Raft state and no join
// bootstraps a one-node cluster with a new identity.
func Open(cfg Config) (*Cluster, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WorkerLease <= 0 {
		cfg.WorkerLease = 10 * time.Second
	}
	if cfg.Voters <= 0 {
		cfg.Voters = DefaultVoters
	}
	timing := TimingFor(cfg.TimeoutScale)
	rc := raftConfig(timing)
	c := &Cluster{cfg: cfg, log: cfg.Logger, timing: timing,
		allocs: make(chan *allocReq, 4096), forwards: make(chan *allocReq, 4096), stop: make(chan struct{}), pool: map[string]*streams{},
		boot: newBoot(), holds: map[string]chan struct{}{}, confirmedGone: map[string]bool{},
		disk: newDiskWatch(timing.SlowSync, time.Now)}
	cfg.Store.TimeSyncs(func() func() { return c.disk.begin("a synced write of Pebble") })
	id, err := cfg.Store.ClusterID()
	if err != nil {
		return nil, err
	}
	c.cluster.Store(&id)
	f, err := newFSM(cfg.Store, cfg.Layout.MaxWorker())
	if err != nil {
		return nil, err
	}
	f.log, f.stop, f.reserved = c.log, c.stop, cfg.Layout.ReservedWorkers()
	c.fsm = f
	took := startTimer(c.log)
	if err := checkRaftFile(cfg, f); err != nil {
		return nil, err
	}
	took("checking raft.db's pages")
	rdir := filepath.Join(cfg.Dir, "raft")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	if err := removeUnfinishedSnapshots(filepath.Join(rdir, "snapshots"), c.log); err != nil {
		return nil, err
	}
	hlog := newRaftLogger(cfg.Logger, hclog.Warn)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(rdir, 2, hlog)
	if err != nil {
		return nil, err
	}
	// A directory whose Raft state is empty holds nothing to lose: a new
	// one, a joiner that was never admitted, or a bootstrap cut short. Any
	// other must agree with the Pebble state beside it.
	existing, err := checkRaftState(cfg, f, id, snaps)
	if err != nil {
		return nil, err
	}
	took("checking the Raft log against Pebble")
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(rdir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	// bbolt syncs raft.db, never the names above it: without this a power
	// cut can take raft/, raft.db or raft/snapshots away with the log.
	if err := persist.SyncDirs(filepath.Join(rdir, "snapshots"), rdir, cfg.Dir); err != nil {
		logs.Close()
		return nil, err
	}
	network := cfg.Network
	if network == nil {
		var ln net.Listener
		if cfg.TLSServer != nil {
			ln, err = tls.Listen("tcp", cfg.RaftBind, cfg.TLSServer)
		} else {
			ln, err = net.Listen("tcp", cfg.RaftBind)
		}
		if err != nil {
			logs.Close()
			return nil, fmt.Errorf("raft port %s: %w", cfg.RaftBind, err)
		}
		network = tcpNetwork{Listener: ln, conf: cfg.TLSClient}
	}
	advertise := cfg.RaftAdvertise
	if advertise == "" {
		advertise = network.Addr().String()
	}
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil || addr.IP == nil || addr.IP.IsUnspecified() {
		network.Close()
		logs.Close()
		return nil, fmt.Errorf("raft address %q cannot be reached by other members: set --raft-advertise", advertise)
	}
	c.mux = &mux{net: network, addr: addr, nodeID: cfg.NodeID, nodeAt: c.memberAt, secret: []byte(cfg.Secret), log: c.log, clusterID: c.ClusterID, serveRPC: c.serveRPC, refused: c.logRefused,
		raftConns: make(chan net.Conn), closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	c.trans = raft.NewNetworkTransportWithLogger(raftStream{c.mux}, 3, 10*time.Second, hlog)
	c.logs = logs
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
		rc.TrailingLogs = cfg.SnapshotThreshold / 2
	}
	rc.SnapshotInterval = DefaultSnapshotInterval
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	fail := func(err error) (*Cluster, error) {
		if c.raft != nil {
			c.raft.Shutdown()
		}
		c.trans.Close()
		logs.Close()
		c.closeIdle() // streams --recover's probes left
		return nil, err
	}
	if !existing && !cfg.Join {
		id = newClusterID()
		if err := cfg.Store.SetClusterIDSync(id); err != nil {
			return fail(err)
		}
		c.cluster.Store(&id)
	}
	recovering, from := false, id
	if cfg.Recover {
		if recovering, err = c.mayRecover(existing, logs, snaps); err != nil {
			return fail(err)
		}
	}
	if recovering {
		// A new identity first: should a "lost" member come back after all,
		// its cluster and this one never exchange Raft traffic.
		id = newClusterID()
		if err := cfg.Store.SetClusterIDSync(id); err != nil {
			return fail(err)
		}
		c.cluster.Store(&id)
		alone := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: c.trans.LocalAddr()}}}
		if err := raft.RecoverCluster(rc, f, logs, logs, snaps, c.trans, alone); err != nil {
			return fail(fmt.Errorf("recover: %w", err))
		}
	}
	// Pebble holds the state machine: Raft restores no snapshot at start,
	// the state machine catches up to the newest one only when it lags it.
	rc.NoSnapshotRestoreOnStart = true
	took("opening the Raft log")
	if err := restoreOnStart(f, snaps, logs); err != nil {
		return fail(err)
	}
	took("restoring a newer snapshot")
	c.timed = timedLogs{BoltStore: logs, disk: c.disk, snaps: snaps, log: c.log}
	c.raft, err = raft.NewRaft(rc, f, c.timed, c.timed, snaps, c.trans)
	if err != nil {
		return fail(err)
	}
	took("starting Raft (it reads the log after its snapshot)")
	c.started.Store(c.raft)
	c.pilot = newPilot(c, newRaftLogger(cfg.Logger, hclog.Info))
	// The port is served only now: a node-to-node request reads c.raft.
	go c.mux.run()
	if recovering {
		if err := c.recoverAlone(from); err != nil {
			return fail(err)
		}
	}
	if !existing && !cfg.Join {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: c.trans.LocalAddr()}}}
		if err := c.raft.BootstrapCluster(boot).Error(); err != nil {
			return fail(fmt.Errorf("bootstrap: %w", err))
		}
		c.bootstrapped = true
		c.log.Info("bootstrapped a new cluster", "cluster_id", id)
	}
	c.standAtOnce()
	c.stopped.Add(4)
	go c.runGroupCommit()
	go c.runForwards()
	go c.watchRole()
	go c.watchDisk()
	return c, nil
}

// newBoot names this process: a random non-zero number.
func newBoot() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}

func newClusterID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ClusterID is this node's cluster identity, "" before it belongs to one.
func (c *Cluster) ClusterID() string { return *c.cluster.Load() }

// Timing is the cluster's timeout budget.
func (c *Cluster) Timing() Timing { return c.timing }

// RaftAddr is the advertised Raft address.
func (c *Cluster) RaftAddr() string { return string(c.trans.LocalAddr()) }

// Close leaves Raft running no more. It stops autopilot, shuts Raft down,
// then waits for every goroutine the cluster started (autopilot's removals
// of dead members included) before it closes the Raft log and the port:
// none of them reads the store once it returns.
func (c *Cluster) Close() error {
	close(c.stop)
	c.pilot.stop()
	err := c.raft.Shutdown().Error()
	c.pilot.removals.Wait()
	c.stopped.Wait()
	c.trans.Close()
	c.mux.Close()
	c.logs.Close()
	c.closeIdle()
	return err
}

func (c *Cluster) logRefused(from, theirs string) {
	if n := c.refusedLogged.Add(1); n == 1 || n%100 == 0 {
		c.log.Warn("refused a Raft connection from another cluster (or before this node was admitted)",
			"from", from, "their_cluster", theirs, "this_cluster", c.ClusterID(), "refused_so_far", n)
	}
	if c.bootstrapped && theirs != "" && c.cfg.OnConflict != nil && len(c.PeerAddrs()) == 0 {
		c.conflict.Do(func() {
			c.cfg.OnConflict(fmt.Errorf("this node bootstrapped a new cluster %s, but members of cluster %s reach for it at its Raft address %s "+
				"as one of theirs: it probably replaced a member's data directory without --join. Stop it; if it replaced a member, "+
				"CLUSTER FORGET that member in %s and start this node on an empty --dir with --join", c.ClusterID(), theirs, c.RaftAddr(), theirs))
		})
	}
}

// Snapshot takes a Raft snapshot now and compacts the log.
func (c *Cluster) Snapshot() error { return c.raft.Snapshot().Error() }
