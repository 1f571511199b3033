package main

import (
	"io"
	"strings"
	"testing"
)

// TestServiceLinkIgnored: the environment Kubernetes gives every pod of a
// namespace with a Service named idserver (IDSERVER_PORT=tcp://...) does
// not stop the process: the link is ignored with a warning naming it, and
// a value of the project's own form is still read.
func TestServiceLinkIgnored(t *testing.T) {
	env := map[string]string{
		"IDSERVER_PORT":                "tcp://10.96.0.9:6380",
		"IDSERVER_PORT_6380_TCP":       "tcp://10.96.0.9:6380",
		"IDSERVER_PORT_6380_TCP_PROTO": "tcp",
		"IDSERVER_PORT_6380_TCP_PORT":  "6380",
		"IDSERVER_PORT_6380_TCP_ADDR":  "10.96.0.9",
		"IDSERVER_SERVICE_HOST":        "10.96.0.9",
		"IDSERVER_SERVICE_PORT":        "6380",
		"IDSERVER_SERVICE_PORT_RESP":   "6380",
		"IDSERVER_WORKER_LEASE":        "7s",
	}
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	if cfg.Port != 6380 || cfg.WorkerLease.String() != "7s" {
		t.Errorf("port %d, worker lease %v; want the default 6380 and 7s", cfg.Port, cfg.WorkerLease)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	warned := strings.Join(cfg.warnings(), "\n")
	if !strings.Contains(warned, `IDSERVER_PORT="tcp://10.96.0.9:6380" is ignored`) {
		t.Errorf("no warning naming IDSERVER_PORT: %q", warned)
	}
	env = map[string]string{"IDSERVER_PORT": "not-a-port"}
	if _, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard); err == nil {
		t.Error("IDSERVER_PORT=not-a-port was accepted: a value of the project's own form that is wrong must still stop the start")
	}
}
