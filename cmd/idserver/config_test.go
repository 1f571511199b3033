package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	now := time.Now().UTC()
	// An epoch that leaves 100 days of 36 time bits (2^36 ms is 795 days).
	short := now.Add(-(1<<36)*time.Millisecond + 100*24*time.Hour).Truncate(time.Second).Format(time.RFC3339)
	roomy := now.Add(-(1<<36)*time.Millisecond + 400*24*time.Hour).Truncate(time.Second).Format(time.RFC3339)
	cases := []struct {
		name string
		args []string
		want string // "" when valid
	}{
		{"defaults", nil, ""},
		{"past epoch", []string{"--epoch", "2020-01-01T00:00:00Z"}, ""},
		{"epoch in the future", []string{"--epoch", "2030-01-01T00:00:00Z"}, "--epoch 2030-01-01T00:00:00Z is in the future (now "},
		{"epoch far in the future", []string{"--epoch", "2999-12-31T23:59:59.999Z"}, "is in the future"},
		{"epoch a minute ahead", []string{"--epoch", now.Add(time.Minute).Truncate(time.Second).Format(time.RFC3339)}, "is in the future"},
		{"fewer than a year of time bits", []string{"--epoch", short, "--time-bits", "36", "--worker-bits", "15"}, "fewer than a year left"},
		{"more than a year of time bits", []string{"--epoch", roomy, "--time-bits", "36", "--worker-bits", "15"}, ""},
		{"not a time", []string{"--epoch", "yesterday"}, "--epoch"},
		{"not a whole millisecond", []string{"--epoch", "2020-01-01T00:00:00.0005Z"}, "whole millisecond"},
		{"not a whole millisecond, far ahead", []string{"--epoch", "2999-01-01T00:00:00.0005Z"}, "whole millisecond"},
		{"widths do not add up", []string{"--time-bits", "40"}, "must be 63"},
		{"segment step", []string{"--segment-step", "0"}, "--segment-step"},
		{"protected mode: every interface, no secret", []string{"--bind", "0.0.0.0"}, `protected mode: --bind "0.0.0.0" is not a loopback address`},
		{"protected mode: an empty host is every interface", []string{"--bind", ""}, `protected mode: --bind ""`},
		{"protected mode: a name is not looked up", []string{"--bind", "db.example"}, `protected mode: --bind "db.example"`},
		{"protected mode: the Raft port", []string{"--raft-addr", "10.0.0.1:7000"}, `protected mode: --raft-addr "10.0.0.1"`},
		{"protected mode: loopback", []string{"--bind", "127.0.0.2", "--raft-addr", "[::1]:7000"}, ""},
		{"protected mode: localhost", []string{"--bind", "localhost"}, ""},
		{"protected mode: --requirepass", []string{"--bind", "0.0.0.0", "--requirepass", "pw"}, ""},
		{"protected mode: --cluster-secret", []string{"--bind", "0.0.0.0", "--cluster-secret", "s"}, ""},
		{"protected mode: no", []string{"--bind", "0.0.0.0", "--protected-mode", "no"}, ""},
		{"protected mode: metrics on every interface, no password", []string{"--metrics-addr", ":9121"}, `protected mode: --metrics-addr ""`},
		{"protected mode: metrics beyond loopback, a secret is no password", []string{"--metrics-addr", "0.0.0.0:9121", "--cluster-secret", "s"}, `protected mode: --metrics-addr "0.0.0.0"`},
		{"protected mode: metrics with --requirepass", []string{"--metrics-addr", "0.0.0.0:9121", "--requirepass", "pw"}, ""},
		{"protected mode: metrics on loopback", []string{"--metrics-addr", "127.0.0.1:9121"}, ""},
		{"protected mode: metrics, no", []string{"--metrics-addr", "0.0.0.0:9121", "--protected-mode", "no"}, ""},
		{"protected mode: neither yes nor no", []string{"--protected-mode", "off"}, `--protected-mode "off": yes or no`},
		{"--tls-ca without a certificate", []string{"--tls-ca", "ca.pem"}, "--tls-ca goes with --tls-cert"},
		{"client output limit too small", []string{"--client-output-limit", "100"}, "--client-output-limit 100 must be between"},
		{"client output timeout too short", []string{"--client-output-timeout", "1ms"}, "--client-output-timeout 1ms is too short"},
		{"negative snapshot interval", []string{"--raft-snapshot-interval", "-1s"}, "--raft-snapshot-interval -1s: 0"},
		{"snapshot interval under Raft's 5ms", []string{"--raft-snapshot-interval", "1ms"}, "--raft-snapshot-interval 1ms: 0 (10s), or 5ms or more"},
		{"client output limit and timeout", []string{"--client-output-limit", "65536", "--client-output-timeout", "2s"}, ""},
		{"raft timeout scale", []string{"--raft-timeout-scale", "4"}, ""},
		{"raft timeout scale below 1", []string{"--raft-timeout-scale", "0.5"}, "--raft-timeout-scale 0.5 must be between 1 and 20"},
		{"raft timeout scale not a number", []string{"--raft-timeout-scale", "NaN"}, "--raft-timeout-scale NaN must be between"},
		{"reserved workers", []string{"--reserved-workers", "100, 0-15"}, ""},
		{"reserved workers past the worker bits", []string{"--reserved-workers", "0-15,1024"}, "--reserved-workers 0-15,1024: worker ID 1024 does not fit in 10 worker bits"},
		{"every worker reserved", []string{"--worker-bits", "2", "--seq-bits", "20", "--reserved-workers", "0-3"}, "--reserved-workers 0-3 reserves all 4 worker IDs"},
		{"reserved workers not a list", []string{"--reserved-workers", "a-b"}, `--reserved-workers "a-b"`},
		{"above an ID of 2020", []string{"--above-id", "1000"}, ""},
		{"above an ID of the next century", []string{"--above-id", "9000000000000000000"}, "--above-id 9000000000000000000: this layout's IDs are at "},
		{"above a negative ID", []string{"--above-id", "-5"}, "--above-id -5 must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, func(string) string { return "" }, io.Discard)
			if err != nil {
				t.Fatalf("parse %v: %v", tc.args, err)
			}
			err = c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%v: %v", tc.args, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestValidateRefusesAFutureEpochBeforeTheDataDirectory: run exits 2 with
// the message and leaves --dir untouched.
func TestValidateRefusesAFutureEpochBeforeTheDataDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--epoch", "2030-01-01T00:00:00Z", "--dir", dir, "--port", "0"}, func(string) string { return "" }, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--epoch 2030-01-01T00:00:00Z is in the future") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("--dir %s was touched: %v", dir, err)
	}
}

// TestHelpAndFlagErrors: --help (and -h) prints the usage on stdout and
// exits 0; a flag error prints its message once and a short hint, not the
// whole usage.
func TestHelpAndFlagErrors(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr strings.Builder
		if code := run([]string{arg}, noEnv, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "Usage: idserver") ||
			!strings.Contains(stdout.String(), "-join string") || stderr.Len() != 0 {
			t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", arg, code, stdout.String(), stderr.String())
		}
	}
	for _, args := range [][]string{{"--nosuch"}, {"--port", "x"}} {
		var stdout, stderr strings.Builder
		code := run(args, noEnv, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != 2 || stdout.Len() != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "idserver: ") ||
			lines[1] != "Run 'idserver --help' for the flags." {
			t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestSubcommandHelpAndFlagErrors: backup and restore print their usage
// once, on stdout for --help (exit 0), on stderr after a bad flag (exit 2).
func TestSubcommandHelpAndFlagErrors(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, sub := range []string{"backup", "restore"} {
		var stdout, stderr strings.Builder
		if code := run([]string{sub, "--help"}, noEnv, &stdout, &stderr); code != 0 || stderr.Len() != 0 ||
			strings.Count(stdout.String(), "usage: idserver "+sub) != 1 {
			t.Errorf("%s --help: exit %d\nstdout:\n%s\nstderr:\n%s", sub, code, stdout.String(), stderr.String())
		}
		stdout.Reset()
		stderr.Reset()
		if code := run([]string{sub, "--nosuch"}, noEnv, &stdout, &stderr); code != 2 || stdout.Len() != 0 ||
			!strings.HasPrefix(stderr.String(), "idserver "+sub+": flag provided but not defined: -nosuch\n") ||
			strings.Count(stderr.String(), "usage: idserver "+sub) != 1 {
			t.Errorf("%s --nosuch: exit %d\nstdout:\n%s\nstderr:\n%s", sub, code, stdout.String(), stderr.String())
		}
	}
}

// --reserved-workers is written into the layout canonically: sorted,
// merged, no blanks, so that "100, 0-15" and "0-15,100" name one layout.
func TestReservedWorkersJoinTheLayout(t *testing.T) {
	c, err := parseConfig([]string{"--reserved-workers", "100, 0-7,8-15"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Layout.Reserved != "0-15,100" || !strings.HasSuffix(c.Layout.String(), " reserved-workers=0-15,100") {
		t.Fatalf("layout %q, reserved %q", c.Layout.String(), c.Layout.Reserved)
	}
}
