// Command idserver serves snowflake and gene IDs over the Redis protocol.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"idserver/cluster"
	"idserver/engine"
	"idserver/persist"
	"idserver/resp"

	"github.com/redis/go-redis/v9"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run wires the parts, serves until SIGTERM or SIGINT, and shuts down in
// reverse order. It returns the process exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "idserver:", err)
		return 2
	}
	if cfg.ShowVersion {
		fmt.Fprintln(stdout, "idserver", version)
		return 0
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "idserver:", err)
		return 2
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.level()})
	if cfg.LogFormat == "json" {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.level()})
	}
	log := slog.New(handler)
	slog.SetDefault(log)
	var store *persist.Store
	fail := func(err error) int {
		if store != nil {
			store.Close()
		}
		log.Error("cannot start", "err", err)
		fmt.Fprintln(stderr, "idserver:", err)
		return 1
	}

	store, err = persist.Open(cfg.Dir)
	if err != nil {
		return fail(err)
	}
	if err := store.EnsureLayout(cfg.Layout.String()); err != nil {
		return fail(err)
	}
	nodeID, err := store.NodeID(cfg.NodeID)
	if err != nil {
		return fail(err)
	}
	var metrics *metricsServer
	if cfg.MetricsAddr != "" {
		if metrics, err = startMetrics(cfg.MetricsAddr, log); err != nil {
			return fail(fmt.Errorf("--metrics-addr: %w", err))
		}
		defer metrics.close()
	}

	// The RESP listener comes first: its address is what the cluster knows
	// this node by.
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	respAddr := ln.Addr().String()
	tlsServer, tlsClient, err := loadTLS(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return fail(err)
	}
	raftAddr, err := freeIfZero(cfg.RaftAddr)
	if err != nil {
		return fail(err)
	}
	restart := cluster.Existing(cfg.Dir)
	var segments atomic.Pointer[engine.Segments]
	cl, err := cluster.Open(cluster.Config{
		NodeID:           nodeID,
		Dir:              cfg.Dir,
		RaftBind:         raftAddr,
		RESPAddr:         respAddr,
		Password:         cfg.RequirePass,
		TLSServer:        tlsServer,
		TLSClient:        tlsClient,
		MaxWorker:        cfg.Layout.MaxWorker(),
		Store:            store,
		Logger:           log,
		HeartbeatTimeout: 500 * time.Millisecond,
		ElectionTimeout:  500 * time.Millisecond,
		OnFloor: func(tag string, v int64) {
			if s := segments.Load(); s != nil {
				s.DropBelow(tag, v)
			}
		},
	}, cfg.Join != "")
	if err != nil {
		return fail(err)
	}
	closeCluster := func() {
		if err := cl.Close(); err != nil {
			log.Error("closing raft", "err", err)
		}
	}
	worker, startAbove, err := workerID(cl, store, cfg, tlsClient, nodeID, raftAddr, respAddr, log)
	if err != nil {
		closeCluster()
		return fail(err)
	}
	if restart {
		// Addresses may have changed (--port 0): tell the cluster, when it can hear.
		go announce(cl, cfg, tlsClient, nodeID, raftAddr, respAddr, log)
	}
	clock, debugClock := time.Now, resp.DebugClock(nil)
	if cfg.EnableDebug {
		offset := resp.NewOffsetClock(time.Now)
		clock, debugClock = offset.Now, offset
		log.Warn("--enable-debug-command: DEBUG CLOCK can step this node's clock")
	}
	gen, err := engine.New(engine.Config{
		Layout:       cfg.Layout,
		Worker:       worker,
		Window:       cfg.Window,
		MaxBorrow:    cfg.MaxBorrow,
		StartAboveMS: startAbove,
	}, clock, store)
	if err != nil {
		closeCluster()
		return fail(err)
	}
	segs := engine.NewSegments(cl, cfg.SegmentStep, clock)
	segments.Store(segs)
	ctx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	background.Add(2)
	go func() {
		defer background.Done()
		gen.Run(ctx, func(err error) { log.Error("high-water step failed", "err", err) })
	}()
	go func() {
		defer background.Done()
		replicateHighWater(ctx, cl, gen, nodeID)
	}()

	port := ln.Addr().(*net.TCPAddr).Port
	limits := resp.DefaultLimits()
	limits.MaxBulk = cfg.MaxBulk
	srv := resp.New(resp.Config{
		Password:   cfg.RequirePass,
		Limits:     limits,
		Version:    version,
		NodeID:     nodeID,
		Port:       port,
		Bind:       cfg.Bind,
		Logger:     log,
		MaxClients: cfg.MaxClients,
		Segments:   segs,
		Cluster:    cl,
		Debug:      debugClock,
	}, gen)
	served := make(chan error, 1)
	var serving net.Listener = ln
	if tlsServer != nil {
		serving = tls.NewListener(ln, tlsServer)
	}
	go func() { served <- srv.Serve(serving) }()
	if metrics != nil {
		metrics.serve(&metricSources{resp: srv, gen: gen, segs: segs, cl: cl})
	}
	st := gen.Status()
	log.Info("listening", "addr", respAddr, "raft_addr", raftAddr, "version", version, "node_id", nodeID,
		"worker_id", worker, "layout", cfg.Layout.String(), "dir", cfg.Dir,
		"logical_clock_ms", st.LogicalMS, "high_water_ms", st.HighWaterMS)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	code := 0
	select {
	case sig := <-signals:
		log.Info("shutting down", "signal", sig.String())
	case err := <-served:
		log.Error("server stopped", "err", err)
		code = 1
	}
	if metrics != nil {
		metrics.ready.Store(false)
	}
	srv.Close()
	stopBackground()
	background.Wait()
	if err := gen.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
		log.Error("closing the generator", "err", err)
		code = 1
	}
	closeCluster()
	if err := store.Close(); err != nil {
		log.Error("closing the store", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}

// workerID returns the worker ID kept in the data directory, or asks the
// cluster for one (joining through cfg.Join, or as the bootstrapped single
// node) and keeps it.
func workerID(cl *cluster.Cluster, store *persist.Store, cfg Config, tlsClient *tls.Config, nodeID, raftAddr, respAddr string, log *slog.Logger) (int64, int64, error) {
	if w, above, ok, err := store.Worker(); err != nil || ok {
		return w, above, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		w, above int64
		err      error
		attempt  int
	)
	for {
		if cfg.Join != "" {
			w, above, err = joinThrough(ctx, cfg.Join, cfg.RequirePass, tlsClient, nodeID, raftAddr, respAddr, true)
		} else {
			w, above, err = cl.Join(ctx, nodeID, raftAddr, respAddr, true)
		}
		if err == nil {
			break
		}
		if attempt++; attempt%8 == 0 {
			log.Info("waiting for a Raft leader to assign a worker ID", "via", cmp.Or(cfg.Join, "self"), "err", err)
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("no worker ID from the cluster within 60s: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if above > 0 {
		// A reused worker ID: its forgotten holder may have reserved up to a
		// window past its last replicated high-water, and replicated it up to
		// one interval late. Start above all of that.
		above += cfg.Window.Milliseconds() + replicateEvery.Milliseconds()
	}
	log.Info("worker ID assigned", "worker_id", w, "start_above_ms", above)
	return w, above, store.SetWorkerSync(w, above)
}

// joinThrough sends CLUSTER JOIN to a member's RESP port.
func joinThrough(ctx context.Context, member, password string, tlsClient *tls.Config, nodeID, raftAddr, respAddr string, fresh bool) (int64, int64, error) {
	c := redis.NewClient(&redis.Options{Addr: member, Password: password, TLSConfig: tlsClient, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	args := []any{"CLUSTER", "JOIN", nodeID, raftAddr, respAddr}
	if fresh {
		args = append(args, "FRESH")
	}
	v, err := c.Do(ctx, args...).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("CLUSTER JOIN answered %v", v)
	}
	return v[0], v[1], nil
}

// announce re-registers a restarted node's addresses. With a leader in
// sight it asks it; without one (the node's Raft address changed, so the
// leader cannot reach it) it asks the other members over RESP, which
// forward to the leader, which then updates the node's Raft address.
func announce(cl *cluster.Cluster, cfg Config, tlsClient *tls.Config, nodeID, raftAddr, respAddr string, log *slog.Logger) {
	for range 240 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := cl.Join(ctx, nodeID, raftAddr, respAddr, false)
		if err != nil {
			for _, member := range append(cl.PeerAddrs(), cfg.Join) {
				if member == "" || member == respAddr {
					continue
				}
				if _, _, err = joinThrough(ctx, member, cfg.RequirePass, tlsClient, nodeID, raftAddr, respAddr, false); err == nil {
					break
				}
			}
		}
		cancel()
		if err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	log.Warn("could not announce this node's addresses to the cluster")
}

// replicateEvery is how often a node copies its high-water into the state machine.
const replicateEvery = 2 * time.Second

// replicateHighWater copies the snowflake high-water into the state
// machine every replicateEvery, best effort.
func replicateHighWater(ctx context.Context, cl *cluster.Cluster, gen *engine.Generator, nodeID string) {
	var last int64
	tick := time.NewTicker(replicateEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hw := gen.Status().HighWaterMS
		if hw == last {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if cl.HighWaterFor(rctx, nodeID, hw) == nil {
			last = hw
		}
		cancel()
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

// loadTLS reads the node certificate. The same certificate serves RESP and
// Raft and is the one trusted for connections to other nodes, so it must
// name every node's address.
func loadTLS(certFile, keyFile string) (server, client *tls.Config, err error) {
	if certFile == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	pool := x509.NewCertPool()
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-cert: %w", err)
		}
		pool.AddCert(c)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client, nil
}
