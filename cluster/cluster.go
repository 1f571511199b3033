package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/persist"
)

// The cluster's errors are the engine's: engine.ErrNoLeader (TRYAGAIN),
// engine.ErrWouldGoBack and engine.ErrOverflow come back from Allocate and
// Set; an error reply from another node comes back as a RemoteError.

// Config sets up a node.
type Config struct {
	NodeID    string
	Dir       string // data directory; Raft keeps <Dir>/raft
	RaftBind  string // host:port for the Raft transport
	RESPAddr  string // this node's RESP address, as other nodes reach it
	Password  string // for forwarding to other nodes' RESP ports
	MaxWorker int64
	Store     *persist.Store
	Logger    *slog.Logger
	OnFloor   func(tag string, v int64) // a SET raised a tag
	// Stream carries Raft traffic; nil means TCP on RaftBind, or TLS when
	// TLSServer is set. Tests pass one they can partition.
	Stream raft.StreamLayer
	// TLSServer and TLSClient, when set, carry Raft over TLS and make
	// forwarding to other nodes' RESP ports use TLS.
	TLSServer, TLSClient *tls.Config

	// Raft timing; zero means the defaults below.
	HeartbeatTimeout  time.Duration
	ElectionTimeout   time.Duration
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
}

// Cluster is this node's view of the Raft cluster.
type Cluster struct {
	cfg   Config
	log   *slog.Logger
	raft  *raft.Raft
	fsm   *fsm
	trans *raft.NetworkTransport
	logs  *raftboltdb.BoltStore

	allocs  chan *allocReq
	stop    chan struct{}
	stopped sync.WaitGroup
	applies atomic.Int64 // log entries this node proposed as leader

	peersMu sync.Mutex
	peers   map[string]*redis.Client // RESP address -> client, for forwarding
}

// allocReq is one Allocate waiting for the group commit.
type allocReq struct {
	item allocItem
	done chan allocResult
}

// Open starts Raft on cfg.RaftBind. A node with no Raft state and no join
// address bootstraps a one-node cluster.
func Open(cfg Config, join bool) (*Cluster, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f, err := newFSM(cfg.Store, cfg.MaxWorker, cfg.OnFloor)
	if err != nil {
		return nil, err
	}
	rdir := filepath.Join(cfg.Dir, "raft")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Output: slogWriter{cfg.Logger}, Level: hclog.Warn, DisableTime: true})
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(rdir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(rdir, 2, hlog)
	if err != nil {
		logs.Close()
		return nil, err
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.RaftBind)
	if err != nil {
		logs.Close()
		return nil, err
	}
	var trans *raft.NetworkTransport
	if cfg.Stream == nil && cfg.TLSServer != nil {
		ln, err := tls.Listen("tcp", cfg.RaftBind, cfg.TLSServer)
		if err != nil {
			logs.Close()
			return nil, fmt.Errorf("raft TLS listener on %s: %w", cfg.RaftBind, err)
		}
		cfg.Stream = &tlsStream{Listener: ln, conf: cfg.TLSClient}
	}
	if cfg.Stream != nil {
		trans = raft.NewNetworkTransportWithLogger(cfg.Stream, 3, 10*time.Second, hlog)
	} else {
		trans, err = raft.NewTCPTransportWithLogger(cfg.RaftBind, addr, 3, 10*time.Second, hlog)
	}
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("raft transport on %s: %w", cfg.RaftBind, err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
		rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
		rc.TrailingLogs = cfg.SnapshotThreshold / 2
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	existing, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, err
	}
	r, err := raft.NewRaft(rc, f, logs, logs, snaps, trans)
	if err != nil {
		trans.Close()
		logs.Close()
		return nil, err
	}
	if !existing && !join {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil {
			r.Shutdown()
			trans.Close()
			logs.Close()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, raft: r, fsm: f, trans: trans, logs: logs,
		allocs: make(chan *allocReq, 4096), stop: make(chan struct{}), peers: map[string]*redis.Client{}}
	c.stopped.Add(1)
	go c.runGroupCommit()
	c.stopped.Add(1)
	go c.watchRole()
	return c, nil
}

// Existing reports whether dir already holds Raft state (a restart).
func Existing(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "raft", "raft.db"))
	return err == nil
}

// RaftAddr is the transport's address.
func (c *Cluster) RaftAddr() string { return string(c.trans.LocalAddr()) }

// Close leaves Raft running no more.
func (c *Cluster) Close() error {
	close(c.stop)
	err := c.raft.Shutdown().Error()
	c.stopped.Wait()
	c.trans.Close()
	c.logs.Close()
	c.peersMu.Lock()
	for _, p := range c.peers {
		p.Close()
	}
	c.peersMu.Unlock()
	return err
}

// IsLeader reports whether this node leads.
func (c *Cluster) IsLeader() bool { return c.raft.State() == raft.Leader }

// Leader returns the leader's RESP address, if there is a leader and it is
// known.
func (c *Cluster) Leader() (string, bool) {
	_, id := c.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	if id == raft.ServerID(c.cfg.NodeID) {
		return c.cfg.RESPAddr, true
	}
	m, ok := c.fsm.member(string(id))
	if !ok || m.RESPAddr == "" {
		return "", false
	}
	return m.RESPAddr, true
}

// WaitForLeader polls until there is a known leader or ctx ends.
func (c *Cluster) WaitForLeader(ctx context.Context) (string, error) {
	for {
		if addr, ok := c.Leader(); ok {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", engine.ErrNoLeader
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// watchRole logs role changes.
func (c *Cluster) watchRole() {
	defer c.stopped.Done()
	obs := make(chan raft.Observation, 16)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	c.raft.RegisterObserver(o)
	defer c.raft.DeregisterObserver(o)
	for {
		select {
		case <-c.stop:
			return
		case ob := <-obs:
			c.log.Info("raft role", "role", ob.Data.(raft.RaftState).String(), "term", c.raft.Stats()["term"])
		}
	}
}

// apply proposes one entry on this node, which must lead.
func (c *Cluster) apply(entry []byte) (any, error) {
	f := c.raft.Apply(entry, 5*time.Second)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
			errors.Is(err, raft.ErrEnqueueTimeout) || errors.Is(err, raft.ErrRaftShutdown) {
			return nil, fmt.Errorf("%w: %v", engine.ErrNoLeader, err)
		}
		return nil, err
	}
	c.applies.Add(1)
	return f.Response(), nil
}

// Allocate reserves n contiguous values of tag, cluster-wide. On the leader
// it joins the next group commit; elsewhere it is forwarded to the leader.
func (c *Cluster) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	if !c.IsLeader() {
		return c.forwardAlloc(ctx, tag, n)
	}
	req := &allocReq{item: allocItem{Tag: tag, N: n}, done: make(chan allocResult, 1)}
	select {
	case c.allocs <- req:
	case <-ctx.Done():
		return 0, 0, engine.ErrNoLeader
	}
	select {
	case res := <-req.done:
		return res.First, res.Last, res.Err
	case <-ctx.Done():
		return 0, 0, engine.ErrNoLeader
	}
}

// runGroupCommit drains waiting allocations into one log entry at a time
// (uhaha's runWriteApplier): the more requests arrive during an Apply, the
// more the next one carries.
func (c *Cluster) runGroupCommit() {
	defer c.stopped.Done()
	for {
		var batch []*allocReq
		select {
		case <-c.stop:
			return
		case req := <-c.allocs:
			batch = append(batch, req)
		}
	drain:
		for len(batch) < 1024 {
			select {
			case req := <-c.allocs:
				batch = append(batch, req)
			default:
				break drain
			}
		}
		e := newEntry(entryAlloc).uvarint(uint64(len(batch)))
		for _, r := range batch {
			e = e.string(r.item.Tag).varint(r.item.N)
		}
		resp, err := c.apply(e)
		results, _ := resp.([]allocResult)
		for i, r := range batch {
			switch {
			case err != nil:
				r.done <- allocResult{Err: err}
			case i < len(results):
				r.done <- results[i]
			default:
				r.done <- allocResult{Err: errors.New("allocation lost its answer")}
			}
		}
	}
}

// Set raises tag's floor to v, on the leader. cond is "", "NX" (only if
// the tag does not exist) or "XX" (only if it exists), decided in the same
// Apply as the raise. It returns the tag's high-water before the SET and
// whether the tag existed; whether the SET applied follows from cond and
// existed.
func (c *Cluster) Set(ctx context.Context, tag string, v int64, cond string) (old int64, existed bool, err error) {
	code := setAlways
	switch cond {
	case "":
	case "NX":
		code = setNX
	case "XX":
		code = setXX
	default:
		return 0, false, fmt.Errorf("unknown SET condition %q", cond)
	}
	if !c.IsLeader() {
		args := []any{"SET", tag, v}
		if cond != "" {
			args = append(args, cond)
		}
		s, err := c.forward(ctx, append(args, "GET")...).Text()
		switch {
		case errors.Is(err, redis.Nil):
			return 0, false, nil
		case err != nil:
			return 0, false, wireError(err)
		}
		old, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("SET GET answered %q", s)
		}
		return old, true, nil
	}
	e := newEntry(entrySet).string(tag).varint(v)
	if code != setAlways {
		e = e.uvarint(uint64(code))
	}
	resp, err := c.apply(e)
	if err != nil {
		return 0, false, err
	}
	res := resp.(setResult)
	return res.Old, res.Existed, res.Err
}

// Join makes node a voter (when raftAddr is new) and a member with a
// worker ID. fresh says the node has no worker ID of its own (a new or
// wiped data directory): a node ID the cluster already knows then gets a
// new worker ID, since the old one's IDs cannot be known to this incarnation.
// It runs on the leader; elsewhere it is forwarded.
func (c *Cluster) Join(ctx context.Context, node, raftAddr, respAddr string, fresh bool) (worker, startAboveMS int64, err error) {
	if !c.IsLeader() {
		args := []any{"CLUSTER", "JOIN", node, raftAddr, respAddr}
		if fresh {
			args = append(args, "FRESH")
		}
		v, err := c.forward(ctx, args...).Int64Slice()
		if err != nil {
			return 0, 0, wireError(err)
		}
		if len(v) != 2 {
			return 0, 0, fmt.Errorf("CLUSTER JOIN answered %v", v)
		}
		return v[0], v[1], nil
	}
	cf := c.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return 0, 0, err
	}
	voter := false
	for _, s := range cf.Configuration().Servers {
		if s.ID == raft.ServerID(node) {
			voter = s.Address == raft.ServerAddress(raftAddr)
		}
	}
	if !voter {
		if err := c.raft.AddVoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, 10*time.Second).Error(); err != nil {
			return 0, 0, fmt.Errorf("%w: add voter: %v", engine.ErrNoLeader, err)
		}
	}
	flag := uint64(0)
	if fresh {
		flag = 1
	}
	resp, err := c.apply(newEntry(entryJoin).string(node).string(raftAddr).string(respAddr).uvarint(flag))
	if err != nil {
		return 0, 0, err
	}
	jr := resp.(joinResult)
	if jr.Err == nil {
		c.log.Info("member joined", "node", node, "worker", jr.Worker, "raft", raftAddr, "resp", respAddr)
	}
	return jr.Worker, jr.StartAboveMS, jr.Err
}

// Forget removes node for good: out of the Raft configuration, its worker
// ID free for a new node above its last replicated high-water.
func (c *Cluster) Forget(ctx context.Context, node string) error {
	if node == c.cfg.NodeID {
		return errors.New("a node cannot forget itself")
	}
	if !c.IsLeader() {
		return wireError(c.forward(ctx, "CLUSTER", "FORGET", node).Err())
	}
	if err := c.raft.RemoveServer(raft.ServerID(node), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("%w: remove server: %v", engine.ErrNoLeader, err)
	}
	resp, err := c.apply(newEntry(entryForget).string(node))
	if err != nil {
		return err
	}
	if e, ok := resp.(error); ok {
		return e
	}
	return nil
}

// HighWaterFor records node's snowflake high-water in the state machine,
// so that a node given its worker ID after CLUSTER FORGET starts above it.
// Nodes call it for themselves, best effort: a partitioned node keeps
// issuing without it.
func (c *Cluster) HighWaterFor(ctx context.Context, node string, ms int64) error {
	if !c.IsLeader() {
		return wireError(c.forward(ctx, "CLUSTER", "HIGHWATER", node, ms).Err())
	}
	_, err := c.apply(newEntry(entryHighWater).string(node).varint(ms))
	return err
}

// TransferLeadership hands leadership to another voter.
func (c *Cluster) TransferLeadership() error { return c.raft.LeadershipTransfer().Error() }

// Snapshot takes a Raft snapshot now and compacts the log.
func (c *Cluster) Snapshot() error { return c.raft.Snapshot().Error() }

// Get is a tag's high-water as this node's state machine has it, which on
// a follower may lag the leader by a few entries. EXISTS and DBSIZE use it.
func (c *Cluster) Get(tag string) (int64, bool) { return c.fsm.tag(tag) }

// High is a tag's cluster-wide allocation high-water, at least every value
// any node has handed out: read on the leader (whose state machine has
// every committed allocation), or from this node's state when there is no
// leader to ask.
func (c *Cluster) High(ctx context.Context, tag string) (int64, bool) {
	if !c.IsLeader() {
		v, err := c.forward(ctx, "GET", tag).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return 0, false
		case err == nil:
			if s, ok := v.(string); ok {
				if n, err := strconv.ParseInt(s, 10, 64); err == nil {
					return n, true
				}
			}
		}
	}
	return c.fsm.tag(tag)
}

// Size is the number of tags.
func (c *Cluster) Size() int { return c.fsm.size() }

// Worker is this node's worker ID from the state machine, if it has one.
func (c *Cluster) Worker() (int64, bool) {
	m, ok := c.fsm.member(c.cfg.NodeID)
	return m.Worker, ok
}

// Info is what CLUSTER INFO and INFO report.
func (c *Cluster) Info() [][2]string {
	st := c.raft.Stats()
	leader, _ := c.Leader()
	_, leaderID := c.raft.LeaderWithID()
	worker, ok := c.Worker()
	w := "none"
	if ok {
		w = strconv.FormatInt(worker, 10)
	}
	members := c.fsm.memberList()
	list := ""
	for i, m := range members {
		if i > 0 {
			list += ","
		}
		list += m
	}
	return [][2]string{
		{"node_id", c.cfg.NodeID},
		{"worker_id", w},
		{"role", st["state"]},
		{"leader_id", string(leaderID)},
		{"leader", leader},
		{"term", st["term"]},
		{"members", strconv.Itoa(len(members))},
		{"member_list", list},
		{"applied_index", strconv.FormatUint(c.fsm.applied(), 10)},
		{"commit_index", st["commit_index"]},
		{"raft_addr", c.RaftAddr()},
		{"raft_applies_proposed", strconv.FormatInt(c.applies.Load(), 10)},
	}
}

// PeerAddrs lists the RESP addresses of the other members, as this node's
// state machine has them.
func (c *Cluster) PeerAddrs() []string {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	var out []string
	for id, m := range c.fsm.meta.Members {
		if id != c.cfg.NodeID && m.RESPAddr != "" {
			out = append(out, m.RESPAddr)
		}
	}
	sort.Strings(out)
	return out
}

// Applies is the number of log entries this node proposed as leader.
func (c *Cluster) Applies() int64 { return c.applies.Load() }

// forward sends a command to the leader's RESP port.
func (c *Cluster) forward(ctx context.Context, args ...any) *redis.Cmd {
	addr, ok := c.Leader()
	if !ok || addr == c.cfg.RESPAddr {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(engine.ErrNoLeader)
		return cmd
	}
	cmd := c.peer(addr).Do(ctx, args...)
	if err := cmd.Err(); err != nil && !isRedisError(err) {
		cmd.SetErr(fmt.Errorf("%w: forwarding to %s: %v", engine.ErrNoLeader, addr, err))
	}
	return cmd
}

func (c *Cluster) forwardAlloc(ctx context.Context, tag string, n int64) (int64, int64, error) {
	v, err := c.forward(ctx, "CLUSTER", "ALLOC", tag, n).Int64Slice()
	if err != nil {
		return 0, 0, wireError(err)
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("CLUSTER ALLOC answered %v", v)
	}
	return v[0], v[1], nil
}

// RemoteError is an error reply from another node, passed on as it was.
type RemoteError string

func (e RemoteError) Error() string { return string(e) }

// RESPError is the reply to pass on, code included.
func (e RemoteError) RESPError() string { return string(e) }

// wireError maps an error the leader answered back to the engine's errors,
// or to a RemoteError to pass on as it is.
func wireError(err error) error {
	if err == nil || !isRedisError(err) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "TRYAGAIN"):
		return fmt.Errorf("%w: leader: %s", engine.ErrNoLeader, msg)
	case msg == "ERR "+engine.ErrOverflow.Error():
		return engine.ErrOverflow
	}
	return RemoteError(msg)
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (c *Cluster) peer(addr string) *redis.Client {
	c.peersMu.Lock()
	defer c.peersMu.Unlock()
	p := c.peers[addr]
	if p == nil {
		p = redis.NewClient(&redis.Options{Addr: addr, Password: c.cfg.Password, Protocol: 2, TLSConfig: c.cfg.TLSClient,
			DialTimeout: time.Second, ReadTimeout: 6 * time.Second, MaxRetries: -1, PoolSize: 16,
			DisableIdentity: true})
		c.peers[addr] = p
	}
	return p
}

// tlsStream carries Raft over TLS with the node certificate.
type tlsStream struct {
	net.Listener
	conf *tls.Config
}

func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), s.conf)
}

// slogWriter sends hclog's lines ("[WARN]  raft: ...") to slog at their level.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[ERROR]": slog.LevelError, "[WARN]": slog.LevelWarn, "[DEBUG]": slog.LevelDebug} {
		if strings.HasPrefix(line, prefix) {
			level, line = l, strings.TrimSpace(strings.TrimPrefix(line, prefix))
		}
	}
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}
