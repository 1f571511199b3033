// Command idserver serves snowflake and gene IDs over the Redis protocol.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/node"
	"idserver/resp"
)

// version and commit are set at build time with
// -ldflags "-X main.version=1.2.0 -X main.commit=<git sha>". Without
// -X main.commit, the commit is the Git revision the go command records
// when it builds from a checkout (buildCommit).
var (
	version = "0.1.0-dev"
	commit  = ""
)

// buildCommit is the commit this binary was built from: -X main.commit
// when given, else the vcs.revision Go recorded, with "-dirty" when the
// checkout had uncommitted changes (vcs.modified); "" when neither is known
// (a build outside a checkout, or with -buildvcs=false).
func buildCommit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var revision string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" && modified {
		revision += "-dirty"
	}
	return revision
}

// goRedisLog sends go-redis's own lines (those of a joiner's failed
// dials, every 250 ms while --join cannot be reached) to the log at DEBUG,
// in its format: the node logs what they mean ("waiting for the cluster to
// take this node") at INFO itself.
type goRedisLog struct{ log *slog.Logger }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

// startStopBudget bounds how long a SIGTERM during the start waits for the
// start to unwind before the process exits anyway.
const startStopBudget = 1500 * time.Millisecond

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
		case "status":
			return runStatus(args[1:], getenv, stdout, stderr)
		case "import":
			return runImport(args[1:], getenv, stdout, stderr)
		}
	}
	// SIGHUP reloads the TLS certificate (watchCerts); caught first of all,
	// so that one sent at any point of the start never ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGTERM or SIGINT during the start ends it: the node stops the phase
	// it is in (a join waiting for an answer, a catch-up, the settle wait)
	// and what it started, and the process exits 0. Once the node is up,
	// one stops it cleanly. Caught here, before the flags are read, so that
	// one sent at any point from main on is answered so.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	cfg, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the usage is printed
	}
	if err != nil {
		fmt.Fprintln(stderr, "idserver:", err)
		fmt.Fprintln(stderr, "Run 'idserver --help' for the flags.")
		return 2
	}
	built := buildCommit()
	if cfg.ShowVersion {
		shown := built
		if shown == "" {
			shown = "unknown"
		}
		fmt.Fprintf(stdout, "idserver %s commit %s %s %s/%s\n", version, shown, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "idserver:", err)
		return 2
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.level()})
	if cfg.LogFormat == "json" {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.level(), ReplaceAttr: quoteNonUTF8})
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
		if metrics, err = startMetrics(cfg.MetricsAddr, cfg.RequirePass, log); err != nil {
			return fail(fmt.Errorf("--metrics-addr: %w", err))
		}
		defer metrics.close()
	}
	certs, err := openCerts(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA, time.Now)
	if err != nil {
		return fail(err)
	}
	var tlsServer, tlsClient *tls.Config
	if certs != nil {
		tlsServer, tlsClient = certs.server, certs.client
		certs.warnExpiry(log)
	}
	stopCerts, certsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(certsDone)
		watchCerts(certs, log, hup, stopCerts)
	}()
	defer func() {
		close(stopCerts)
		<-certsDone
	}()
	limits := resp.DefaultLimits()
	limits.MaxBulk = cfg.MaxBulk
	clock, debugClock := time.Now, resp.DebugClock(nil)
	if cfg.EnableDebug {
		offset := resp.NewOffsetClock(time.Now)
		clock, debugClock = offset.Now, offset
		log.Warn("--enable-debug-command: DEBUG CLOCK can step this node's clock")
	}
	starting, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	startSignal, startEnded := make(chan os.Signal, 1), make(chan struct{})
	go func() {
		defer close(startSignal)
		select {
		case <-starting.Done(): // the start ended
		case sig := <-signals:
			startSignal <- sig
			cancelStart()
			// What the cancelled phase started ends within a moment,
			// except Raft restoring a snapshot, which it finishes first
			// (seconds for a few hundred thousand tags). The process
			// does not wait for that: the next start begins again from
			// what is on disk, as after any crash.
			select {
			case <-startEnded:
			case <-time.After(startStopBudget):
				log.Info("stopped during the start, without waiting for Raft to finish restoring a snapshot", "signal", sig.String(), "waited", startStopBudget)
				os.Exit(0)
			}
		}
	}()
	ncfg := node.Config{
		Now: clock, Debug: debugClock,
		Bind: cfg.Bind, Port: cfg.Port, Advertise: cfg.Advertise, RaftAddr: cfg.RaftAddr, RaftAdvertise: cfg.RaftAdv,
		Dir: cfg.Dir, NodeID: cfg.NodeID, Join: cfg.Join, Layout: cfg.Layout, Window: cfg.Window,
		MaxBorrow: cfg.MaxBorrow, WorkerLease: cfg.WorkerLease, Recover: cfg.Recover, RecoverSkip: cfg.RecoverSkip, SegmentStep: cfg.SegmentStep,
		RequirePass: cfg.RequirePass, ClusterSecret: cfg.ClusterSecret, Limits: limits, MaxClients: cfg.MaxClients, Version: version, Commit: built, Logger: log,
		ClientOutputLimit: cfg.ClientOutputLimit, ClientOutputTimeout: cfg.ClientOutputTimeout,
		TLSServer: tlsServer, TLSClient: tlsClient, PublicKey: cfg.PublicKeyBytes, MaxTags: cfg.MaxTags,
		Voters: cfg.Voters, DeadMemberAfter: cfg.DeadAfter, Zone: cfg.Zone, RaftTimeoutScale: cfg.RaftTimeoutScale,
		SnapshotThreshold: cfg.SnapshotThreshold, SnapshotInterval: cfg.SnapshotInterval,
		EmulateCluster: cfg.ClusterMode == "emulated", SentinelMasters: cfg.sentinelMasterNames(),
	}
	if metrics != nil {
		ncfg.BeforeServe = func(n *node.Node) {
			src := &metricSources{resp: n.Server, gen: n.Gen, segs: n.Segments, cl: n.Cluster, notMember: n.NotMember, ready: n.Ready}
			if certs != nil {
				src.tlsNotAfter = certs.notAfter
			}
			metrics.serve(src)
		}
	}
	if again, cut := node.Interrupted(ncfg); cut {
		// The start before moved this directory aside to join again and
		// was cut short: this one finishes the move and joins again.
		aside, err := node.MoveAside(again)
		if err != nil {
			return fail(fmt.Errorf("finishing the move of %s aside: %w", cfg.Dir, err))
		}
		log.Warn("finished moving a removed member's old state aside, cut short at the last start: joining again as a new member",
			"node_id", again.NodeID, "join", again.Join, "moved_to", aside)
		ncfg = again
	}
	n, err := node.Open(starting, ncfg)
	if again, removed := node.Rejoin(ncfg, err); removed {
		// Removed while it was down (a pod back with its volume after
		// --dead-member-after): it joins again as a new member under its
		// node ID, on its directory emptied, with no operator step.
		aside, merr := node.MoveAside(again)
		if merr != nil {
			return fail(fmt.Errorf("%w; moving %s aside to join again: %v", err, cfg.Dir, merr))
		}
		log.Warn("the cluster removed this node while it was down: joining again as a new member, its old state moved aside",
			"node_id", again.NodeID, "join", again.Join, "moved_to", aside, "reason", err.Error())
		n, err = node.Open(starting, again)
	}
	close(startEnded)
	cancelStart() // the start ended: Open's context is no longer used
	sig, signalled := <-startSignal
	var stopped *node.StoppedError
	switch {
	case signalled && errors.As(err, &stopped):
		log.Info("stopped during the start", "signal", sig.String(), "phase", stopped.Phase)
		return 0
	case err != nil:
		return fail(err)
	case signalled:
		// The signal came as the start ended: the node is up; stop it.
		select {
		case signals <- sig:
		default: // another one is queued
		}
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

// loadTLS is openCerts's server and client configurations (nil, nil
// without certFile).
func loadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	certs, err := openCerts(certFile, keyFile, caFile, time.Now)
	if certs == nil {
		return nil, nil, err
	}
	return certs.server, certs.client, nil
}
