package node

// Start-up and shutdown, as phases. Open runs them top to bottom; each one
// that starts something registers how to stop it (and wait for what it
// started), and Close runs those in reverse.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"idserver/cluster"
	"idserver/engine"
	"idserver/persist"
	"idserver/resp"
)

// StoppedError is the error of a start whose context ended: Phase names
// the phase it was in ("joining the cluster", say).
type StoppedError struct {
	Phase string
	Err   error
}

func (e *StoppedError) Error() string { return "start stopped while " + e.Phase + ": " + e.Err.Error() }
func (e *StoppedError) Unwrap() error { return e.Err }

// phase is one step of Open.
type phase struct {
	name string // what the node is doing, as StoppedError.Phase and the log name it
	run  func(context.Context) error
}

// Open starts a node. Its RESP port answers at once, -LOADING until the
// node holds a worker ID and a lease and can issue. A start the cluster
// refuses because it removed the node is an error Rejoin recognizes. When
// ctx ends before the node is ready, Open stops what it started and
// returns a *StoppedError naming the phase it was in; ctx ending later
// stops nothing (Close does).
func Open(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WorkerLease <= 0 {
		cfg.WorkerLease = 10 * time.Second
	}
	n := &Node{cfg: cfg, log: cfg.Logger, served: make(chan error, 1), ids: &idSource{layout: cfg.Layout}}
	phases := []phase{
		{"opening the store", n.openStore},
		{"binding the RESP port", n.bindRESP},
		{"deciding how to start", n.decideStart},
		{"opening the cluster", n.openCluster},
		{"serving -LOADING", n.serveLoading},
		{"joining the cluster", n.checkInPhase},
		{"starting the generator", n.startGenerator},
		{"starting the background loops", n.startBackground},
		{"waiting for autopilot to settle this node", n.settle},
	}
	for _, p := range phases {
		began := time.Now()
		err = p.run(ctx)
		n.log.Debug("start phase", "phase", p.name, "took", time.Since(began).Round(time.Microsecond))
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			n.unwind()
			if ctx.Err() != nil {
				return nil, &StoppedError{Phase: p.name, Err: err}
			}
			return nil, err
		}
	}
	return n, nil
}

// onStop registers how to undo what a phase started: Close (or a start
// that fails) runs them in reverse order.
func (n *Node) onStop(stop func() error) { n.stops = append(n.stops, stop) }

// unwind runs the registered stops in reverse order, each waiting for
// what its phase started, and forgets them.
func (n *Node) unwind() error {
	var errs []error
	for i := len(n.stops) - 1; i >= 0; i-- {
		if err := n.stops[i](); err != nil {
			errs = append(errs, err)
		}
	}
	n.stops = nil
	return errors.Join(errs...)
}

// Close undoes the phases in reverse: it stops serving (every RESP
// connection ended and its command returned, a CLUSTER BACKUP included),
// stops the background loops and waits for them, closes the generator
// (which lowers its high-water to the last ID issued), waits for the
// segment refills in flight, closes Raft (autopilot's removals waited
// for) and closes the store last.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.unwind() })
	return n.closeErr
}

// openStore opens the data directory and reads the node's identity.
func (n *Node) openStore(context.Context) (err error) {
	if n.Store, err = persist.Open(n.cfg.Dir); err != nil {
		return err
	}
	n.onStop(func() error {
		if err := n.Store.Close(); err != nil {
			return fmt.Errorf("closing the store: %w", err)
		}
		return nil
	})
	if err = n.Store.EnsureLayout(n.cfg.Layout.String()); err != nil {
		return err
	}
	n.ID, err = n.Store.NodeID(n.cfg.NodeID)
	return err
}

// bindRESP listens on the RESP port before the cluster opens: its address
// is what the cluster knows this node by. It is served from serveLoading.
func (n *Node) bindRESP(context.Context) (err error) {
	if n.ln, err = net.Listen("tcp", net.JoinHostPort(n.cfg.Bind, strconv.Itoa(n.cfg.Port))); err != nil {
		return err
	}
	n.onStop(func() error { n.ln.Close(); return nil })
	n.Addr = n.ln.Addr().String()
	if n.cfg.Advertise != "" {
		n.Addr = n.cfg.Advertise
	}
	if host, _, _ := net.SplitHostPort(n.Addr); net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		return fmt.Errorf("RESP address %s cannot be reached by other members: set --advertise", n.Addr)
	}
	return nil
}

// decideStart reads what the directory and the flags say and decides how
// this start begins (decide).
func (n *Node) decideStart(ctx context.Context) error {
	clusterID, err := n.Store.ClusterID()
	if err != nil {
		return err
	}
	copied, err := n.Store.CheckCopy()
	if err != nil {
		return err
	}
	note, _ := readRejoinNote(filepath.Join(n.cfg.Dir, "removed"))
	n.plan = decide(startFacts{
		clusterID:   clusterID,
		joinAddrs:   n.joinAddrs(),
		firstOfJoin: n.firstOfJoin(),
		movedAside:  clusterID == "" && wasMovedAside(n.cfg.Dir),
		noteJoin:    note.Join,
		copied:      copied,
		peersAnswer: func() bool { return n.anyPeerHoldsACluster(ctx) },
	}, n.cfg.Join)
	switch n.plan.kind {
	case startRefused:
		return fmt.Errorf("the cluster removed this node and its state was moved aside into %s, but it has not joined again: "+
			"it may not start a cluster of its own; start it with --join and a member's address", filepath.Join(n.cfg.Dir, "removed"))
	case startFirstOfSet:
		n.log.Info("no other address of --join holds a cluster and this node is its first: bootstrapping a new cluster", "join", n.cfg.Join)
	}
	if n.plan.join != n.cfg.Join {
		n.log.Warn("this removed node has not joined again yet and has no --join: joining through the members it knew",
			"join", n.plan.join, "note", filepath.Join(n.cfg.Dir, "removed", rejoinFile))
		n.cfg.Join = n.plan.join
	}
	return ctx.Err()
}

// openCluster starts Raft (bootstrapping a new cluster when the plan says
// so) and the segment buffers over it.
func (n *Node) openCluster(context.Context) error {
	cfg := n.cfg
	raftBind, err := freeIfZero(cfg.RaftAddr)
	if err != nil {
		return err
	}
	raftTLS, err := mutualTLS(cfg.TLSServer, cfg.TLSClient)
	if err != nil {
		return err
	}
	secret := cfg.ClusterSecret
	if secret == "" {
		secret = cfg.RequirePass
	}
	var segments atomic.Pointer[engine.Segments]
	n.Cluster, err = cluster.Open(cluster.Config{
		NodeID: n.ID, Dir: cfg.Dir, RaftBind: raftBind, RaftAdvertise: cfg.RaftAdvertise, RESPAddr: n.Addr,
		Secret: secret, Layout: cfg.Layout, Store: n.Store, Logger: cfg.Logger, Join: n.plan.joins,
		Now: cfg.Now, WorkerLease: cfg.WorkerLease, Recover: cfg.Recover, RecoverSkip: cfg.RecoverSkip, Network: cfg.Network, TLSServer: raftTLS, TLSClient: cfg.TLSClient,
		TimeoutScale: cfg.RaftTimeoutScale, SnapshotThreshold: cfg.SnapshotThreshold, SnapshotInterval: cfg.SnapshotInterval,
		Voters: cfg.Voters, DeadMemberAfter: cfg.DeadMemberAfter, Zone: cfg.Zone, Version: cfg.Version, Commit: cfg.Commit,
		OnConflict: n.conflict, PublicKey: cfg.PublicKey, MaxTags: cfg.MaxTags,
		OnForgotten: func() {
			why := "this node was removed by its cluster (CLUSTER FORGET, or dead for --dead-member-after); restarted, it joins again as a new member"
			n.log.Error("forgotten by the cluster: no more values; IDs stop when the worker lease ends", "reason", why)
			n.notMember.Store(true)
			if s := segments.Load(); s != nil {
				s.Stop(fmt.Errorf("%w: %s", cluster.ErrNotMember, why))
			}
		},
		OnFence: func(tag string) int64 {
			if s := segments.Load(); s != nil {
				return s.Fence(tag)
			}
			return 0
		},
		OnIssued: func(tag string) int64 {
			if s := segments.Load(); s != nil {
				return s.Issued(tag)
			}
			return 0
		},
	})
	if err != nil {
		return err
	}
	n.onStop(func() error {
		if err := n.Cluster.Close(); err != nil {
			return fmt.Errorf("closing raft: %w", err)
		}
		return nil
	})
	n.Segments = engine.NewSegments(n.Cluster, cfg.SegmentStep, cfg.Now)
	segments.Store(n.Segments)
	n.onStop(func() error { n.Segments.Close(); return nil })
	return nil
}

// serveLoading serves the RESP port at once, answering -LOADING until the
// node can issue: a client with a short timeout gets an answer, not a
// silent socket, while the node joins its cluster.
func (n *Node) serveLoading(context.Context) error {
	cfg := n.cfg
	n.Server = resp.New(resp.Config{
		Password: cfg.RequirePass, Limits: cfg.Limits, Version: cfg.Version, Commit: cfg.Commit, NodeID: n.ID,
		Port: n.ln.Addr().(*net.TCPAddr).Port, Bind: cfg.Bind, Logger: cfg.Logger, MaxClients: cfg.MaxClients,
		Segments: n.Segments, Cluster: n.Cluster, RequestTimeout: n.Cluster.Timing().Request, Ready: n.ready.Load,
		Debug: cfg.Debug, ClientOutputLimit: cfg.ClientOutputLimit, ClientOutputTimeout: cfg.ClientOutputTimeout,
		EmulateCluster: cfg.EmulateCluster, SentinelMasters: cfg.SentinelMasters,
	}, n.ids)
	var serving net.Listener = n.ln
	if cfg.TLSServer != nil {
		serving = tls.NewListener(n.ln, cfg.TLSServer)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.Server.Serve(serving); err != nil {
			select {
			case n.served <- err:
			default:
			}
		}
	}()
	n.onStop(func() error {
		n.Server.Close()
		<-done
		return nil
	})
	return nil
}

// checkInPhase checks in with the cluster: the directory's copy check, the
// worker ID (joining when the node has none) and the first lease renewal.
func (n *Node) checkInPhase(ctx context.Context) error {
	copied, err := n.checkCopy()
	if err != nil {
		return err
	}
	worker, startAbove, lease, err := n.workerID(ctx)
	if err != nil {
		return err
	}
	if n.startAbove, n.leaseEnd, err = n.startLease(ctx, worker, startAbove, lease, copied); err != nil {
		return err
	}
	n.Worker = worker
	return nil
}

// startGenerator makes the generator above the check-in's start and lets
// the RESP server issue from it.
func (n *Node) startGenerator(ctx context.Context) (err error) {
	cfg := n.cfg
	if n.Gen, err = engine.New(engine.Config{
		Layout: cfg.Layout, Worker: n.Worker, Window: cfg.Window, MaxBorrow: cfg.MaxBorrow,
		StartAboveMS: n.startAbove, LeaseEndMS: n.leaseEnd,
		// cfg.Now is the machine's clock or DEBUG CLOCK's offset over it:
		// the generator reads it once a millisecond, and the monotonic
		// clock on every call.
		Monotonic: engine.MonotonicClock(),
	}, cfg.Now, n.Store); err != nil {
		return err
	}
	n.onStop(func() error {
		if err := n.Gen.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			return fmt.Errorf("closing the generator: %w", err)
		}
		return nil
	})
	if !n.leaseChecked.Load() {
		n.Gen.SetLeaseProblem("renewing it after the start") // cleared by the first renewal
	}
	if n.clockWentBack() {
		n.freshWorker(ctx) // a restart after the clock went back (freshworker.go)
	}
	n.Segments.SetLeaseEnd(n.wallOf(n.leaseEnd))
	n.ids.gen.Store(n.Gen)
	if err := n.conflicted.Load(); err != nil {
		return *err
	}
	return nil
}

// startBackground starts the loops that run while the node does: the
// generator's high-water steps, the lease renewals, the layout's end
// warning, the drop of idle tag buffers, and when needed the late check-in and the wait for the public-ID
// key. They run under their own context (not Open's), which Close ends.
func (n *Node) startBackground(context.Context) error {
	ctx, stop := context.WithCancel(context.Background())
	n.onStop(func() error {
		stop()
		n.background.Wait()
		return nil
	})
	loops := []func(context.Context){
		func(ctx context.Context) {
			// A full disk fails every step (eight a window) and every kick
			// for as long as it lasts: one line a second says so.
			var logged time.Time
			n.Gen.Run(ctx, func(err error) {
				if time.Since(logged) >= time.Second {
					logged = time.Now()
					n.log.Error("high-water step failed (logged once a second)", "err", err)
				}
			})
		},
		n.warnLayoutEnd,
		n.renewLease,
		n.Segments.RunIdleDrop,
	}
	if n.checkInLater {
		loops = append(loops, n.checkInLoop)
	}
	// A restart finds the public-ID key in its state (and refuses another
	// --public-key now); a new cluster or a joiner gets it in the background
	// in a moment, once it has applied the log up to it.
	publicKnown, err := n.publicIDs()
	if err != nil {
		return err
	}
	if !publicKnown {
		loops = append(loops, n.awaitPublicKey)
	}
	for _, loop := range loops {
		n.background.Add(1)
		go func() {
			defer n.background.Done()
			loop(ctx)
		}()
	}
	return nil
}

// settle waits (bounded) for autopilot to settle this node, then serves
// IDs. Its stop, the first Close runs, ends every RESP connection and
// waits for their commands.
func (n *Node) settle(ctx context.Context) error {
	n.waitSettled(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	if n.cfg.BeforeServe != nil {
		n.cfg.BeforeServe(n)
	}
	n.ready.Store(true)
	n.onStop(func() error {
		n.ready.Store(false)
		n.Server.Close()
		return nil
	})
	st := n.Gen.Status()
	n.log.Info("listening", "addr", n.ln.Addr().String(), "advertise", n.Addr, "raft_addr", n.Cluster.RaftAddr(),
		"version", n.cfg.Version, "commit", n.cfg.Commit, "node_id", n.ID, "cluster_id", n.Cluster.ClusterID(), "worker_id", n.Worker,
		"layout", n.cfg.Layout.String(), "dir", n.cfg.Dir, "logical_clock_ms", st.LogicalMS, "high_water_ms", st.HighWaterMS,
		"lease_end_ms", st.LeaseEndMS)
	return nil
}
