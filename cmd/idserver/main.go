// Command idserver serves snowflake and gene IDs over the Redis protocol.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"idserver/engine"
	"idserver/persist"
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
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.level()}))
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
	gen, err := engine.New(engine.Config{
		Layout:    cfg.Layout,
		Worker:    cfg.WorkerID,
		Window:    cfg.Window,
		MaxBorrow: cfg.MaxBorrow,
	}, time.Now, store)
	if err != nil {
		return fail(err)
	}
	ctx, stopReserving := context.WithCancel(context.Background())
	reserved := make(chan struct{})
	go func() {
		defer close(reserved)
		gen.Run(ctx, func(err error) { log.Error("high-water step failed", "err", err) })
	}()

	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.Port)))
	if err != nil {
		stopReserving()
		return fail(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	limits := resp.DefaultLimits()
	limits.MaxBulk = cfg.MaxBulk
	srv := resp.New(resp.Config{
		Password: cfg.RequirePass,
		Limits:   limits,
		Version:  version,
		NodeID:   nodeID,
		Port:     port,
		Bind:     cfg.Bind,
		Logger:   log,
	}, gen)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	st := gen.Status()
	log.Info("listening", "addr", ln.Addr().String(), "version", version, "node_id", nodeID,
		"worker_id", cfg.WorkerID, "layout", cfg.Layout.String(), "dir", cfg.Dir,
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
	srv.Close()
	stopReserving()
	<-reserved
	if err := gen.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
		log.Error("closing the generator", "err", err)
		code = 1
	}
	if err := store.Close(); err != nil {
		log.Error("closing the store", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}
