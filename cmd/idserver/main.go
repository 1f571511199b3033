// Command idserver serves snowflake and gene IDs over the Redis protocol.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"idserver/node"
	"idserver/resp"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

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
	for _, w := range cfg.warnings() {
		log.Warn(w)
		fmt.Fprintln(stderr, "idserver: warning:", w)
	}
	fail := func(err error) int {
		log.Error("cannot start", "err", err)
		fmt.Fprintln(stderr, "idserver:", err)
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
	n, err := node.Open(node.Config{
		Now: clock, Debug: debugClock,
		Bind: cfg.Bind, Port: cfg.Port, Advertise: cfg.Advertise, RaftAddr: cfg.RaftAddr, RaftAdvertise: cfg.RaftAdv,
		Dir: cfg.Dir, NodeID: cfg.NodeID, Join: cfg.Join, Layout: cfg.Layout, Window: cfg.Window,
		MaxBorrow: cfg.MaxBorrow, WorkerLease: cfg.WorkerLease, Recover: cfg.Recover, RecoverSkip: cfg.RecoverSkip, SegmentStep: cfg.SegmentStep,
		RequirePass: cfg.RequirePass, ClusterSecret: cfg.ClusterSecret, Limits: limits, MaxClients: cfg.MaxClients, Version: version, Logger: log,
		ClientOutputLimit: cfg.ClientOutputLimit, ClientOutputTimeout: cfg.ClientOutputTimeout,
		TLSServer: tlsServer, TLSClient: tlsClient, PublicKey: cfg.PublicKeyBytes,
		Voters: cfg.Voters, DeadMemberAfter: cfg.DeadAfter, Zone: cfg.Zone,
	})
	if err != nil {
		return fail(err)
	}
	if metrics != nil {
		metrics.serve(&metricSources{resp: n.Server, gen: n.Gen, segs: n.Segments, cl: n.Cluster})
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
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
