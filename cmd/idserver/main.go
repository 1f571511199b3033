// Command idserver serves snowflake and gene IDs over the Redis protocol.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/node"
	"idserver/resp"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// goRedisLog sends go-redis's own lines (those of a joiner's failed
// dials, every 250 ms while --join cannot be reached) to the log at DEBUG,
// in its format: the node logs what they mean ("waiting for the cluster to
// take this node") at INFO itself.
type goRedisLog struct{ log *slog.Logger }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run wires the parts, serves until SIGTERM or SIGINT, and shuts down in
// reverse order. It returns the process exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "backup":
			return runBackup(args[1:], getenv, stdout, stderr)
		case "restore":
			return runRestore(args[1:], getenv, stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the usage is printed
	}
	if err != nil {
		fmt.Fprintln(stderr, "idserver:", err)
		fmt.Fprintln(stderr, "Run 'idserver --help' for the flags.")
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
	redis.SetLogger(goRedisLog{log})
	for _, w := range cfg.warnings() {
		log.Warn(w)
		if cfg.LogFormat != "json" { // every line of a JSON log is JSON
			fmt.Fprintln(stderr, "idserver: warning:", w)
		}
	}
	fail := func(err error) int {
		log.Error("cannot start", "err", err)
		if cfg.LogFormat != "json" { // every line of a JSON log is JSON
			fmt.Fprintln(stderr, "idserver:", err)
		}
		return 1
	}
	var metrics *metricsServer
	if cfg.MetricsAddr != "" {
		if metrics, err = startMetrics(cfg.MetricsAddr, log); err != nil {
			return fail(fmt.Errorf("--metrics-addr: %w", err))
		}
		defer metrics.close()
	}
	tlsServer, tlsClient, err := loadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA)
	if err != nil {
		return fail(err)
	}
	limits := resp.DefaultLimits()
	limits.MaxBulk = cfg.MaxBulk
	clock, debugClock := time.Now, resp.DebugClock(nil)
	if cfg.EnableDebug {
		offset := resp.NewOffsetClock(time.Now)
		clock, debugClock = offset.Now, offset
		log.Warn("--enable-debug-command: DEBUG CLOCK can step this node's clock")
	}
	// Signals are caught before the node opens (it serves before Open
	// returns, and a join may wait minutes): one that comes during the start
	// stops the node as soon as it is up; a second one exits at once.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	opened := make(chan struct{})
	go func() {
		select {
		case <-opened:
		case sig := <-signals:
			log.Info("signal during the start: stopping once the node is up (a second one exits now)", "signal", sig.String())
			select {
			case <-opened:
				signals <- sig
			case <-signals:
				log.Warn("second signal during the start: exiting now")
				os.Exit(1)
			}
		}
	}()
	ncfg := node.Config{
		Now: clock, Debug: debugClock,
		Bind: cfg.Bind, Port: cfg.Port, Advertise: cfg.Advertise, RaftAddr: cfg.RaftAddr, RaftAdvertise: cfg.RaftAdv,
		Dir: cfg.Dir, NodeID: cfg.NodeID, Join: cfg.Join, Layout: cfg.Layout, Window: cfg.Window,
		MaxBorrow: cfg.MaxBorrow, WorkerLease: cfg.WorkerLease, Recover: cfg.Recover, RecoverSkip: cfg.RecoverSkip, SegmentStep: cfg.SegmentStep,
		RequirePass: cfg.RequirePass, ClusterSecret: cfg.ClusterSecret, Limits: limits, MaxClients: cfg.MaxClients, Version: version, Logger: log,
		ClientOutputLimit: cfg.ClientOutputLimit, ClientOutputTimeout: cfg.ClientOutputTimeout,
		TLSServer: tlsServer, TLSClient: tlsClient, PublicKey: cfg.PublicKeyBytes,
		Voters: cfg.Voters, DeadMemberAfter: cfg.DeadAfter, Zone: cfg.Zone, RaftTimeoutScale: cfg.RaftTimeoutScale,
	}
	if again, cut := node.Interrupted(ncfg); cut {
		// The start before moved this directory aside to join again and
		// was cut short: this one finishes the move and joins again.
		aside, err := node.MoveAside(again)
		if err != nil {
			close(opened)
			return fail(fmt.Errorf("finishing the move of %s aside: %w", cfg.Dir, err))
		}
		log.Warn("finished moving a removed member's old state aside, cut short at the last start: joining again as a new member",
			"node_id", again.NodeID, "join", again.Join, "moved_to", aside)
		ncfg = again
	}
	n, err := node.Open(ncfg)
	if again, removed := node.Rejoin(ncfg, err); removed {
		// Removed while it was down (a pod back with its volume after
		// --dead-member-after): it joins again as a new member under its
		// node ID, on its directory emptied, with no operator step.
		aside, merr := node.MoveAside(again)
		if merr != nil {
			close(opened)
			return fail(fmt.Errorf("%w; moving %s aside to join again: %v", err, cfg.Dir, merr))
		}
		log.Warn("the cluster removed this node while it was down: joining again as a new member, its old state moved aside",
			"node_id", again.NodeID, "join", again.Join, "moved_to", aside, "reason", err.Error())
		n, err = node.Open(again)
	}
	close(opened)
	if err != nil {
		return fail(err)
	}
	if metrics != nil {
		metrics.serve(&metricSources{resp: n.Server, gen: n.Gen, segs: n.Segments, cl: n.Cluster, notMember: n.NotMember})
	}

	code := 0
	select {
	case sig := <-signals:
		log.Info("shutting down", "signal", sig.String())
	case err := <-n.Served():
		log.Error("server stopped", "err", err)
		code = 1
	}
	if metrics != nil {
		metrics.ready.Store(false)
	}
	if err := n.Close(); err != nil {
		log.Error("shutting down", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}

// loadTLS reads the node certificate, which serves RESP and the Raft port
// and is presented to other nodes, and the CAs that nodes' certificates are
// verified against: caFile, or the certificates in certFile themselves (one
// self-signed certificate shared by every node, which must then name every
// node's address). On the Raft port both sides verify (node.Config).
func loadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if certFile == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	pool := x509.NewCertPool()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-ca: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", caFile)
		}
	} else {
		for _, der := range cert.Certificate {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-cert: %w", err)
			}
			pool.AddCert(c)
		}
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client, nil
}
