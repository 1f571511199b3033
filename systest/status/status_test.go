// Package status tests idserver status against real processes on
// 127.0.0.1: a cluster of three, healthy, with one member killed, and with
// two.
package status

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

func TestMain(m *testing.M) { systest.Main(m) }

// report is what idserver status --json prints, as far as the tests read it.
type report struct {
	Node             string `json:"node"`
	Leader           string `json:"leader"`
	FailureTolerance int    `json:"failure_tolerance"`
	LeaseLeftMS      int64  `json:"lease_left_ms"`
	CanIssue         bool   `json:"can_issue"`
	Problems         []string
	Members          []struct {
		ID            string `json:"id"`
		Suffrage      string `json:"suffrage"`
		Zone          string `json:"zone"`
		Health        string `json:"health"`
		LastContactMS int64  `json:"last_contact_ms"`
		Trails        int64  `json:"trails"`
		LeaseLeftMS   int64  `json:"lease_left_ms"`
	} `json:"members"`
}

// status runs idserver status with args and returns its output and exit code.
func status(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(systest.Binary(t), append([]string{"status"}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String() + stderr.String(), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String() + stderr.String(), 0
}

// waitStatus polls idserver status --json with args until ok accepts its
// report and exit code, and returns them.
func waitStatus(t *testing.T, what string, ok func(report, int) bool, args ...string) (report, int) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, code := status(t, append(args, "--json")...)
		var r report
		if err := json.Unmarshal([]byte(out), &r); err == nil && ok(r, code) {
			return r, code
		}
		last = fmt.Sprintf("exit %d:\n%s", code, out)
		if time.Now().After(deadline) {
			t.Fatalf("idserver status never said %s; last:\n%s", what, last)
		}
	}
}

// startThree starts three members in zones a, b and c, the first
// bootstrapping and the others joining it.
func startThree(t *testing.T) []*testproc.Server {
	t.Helper()
	var nodes []*testproc.Server
	for i, zone := range []string{"a", "b", "c"} {
		args := []string{"--node-id", "n" + strconv.Itoa(i+1), "--zone", zone,
			"--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}
		if i > 0 {
			args = append(args, "--join", nodes[0].Addr)
		}
		s, err := testproc.Start(t, testproc.Config{Binary: systest.Binary(t), Dir: t.TempDir(), Args: args, Ready: []any{"NEXTID"}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
	}
	return nodes
}

// TestStatusFailureTolerance: idserver status against the first of three
// members says tolerance 1 and exit 0 while all three run, tolerance 0
// (still exit 0) once one is killed, and exit 1, naming the missing
// leader, once two are.
func TestStatusFailureTolerance(t *testing.T) {
	testproc.Long(t)
	nodes := startThree(t)
	addr := nodes[0].Addr

	healthy := func(r report, code int) bool {
		if code != 0 || r.FailureTolerance != 1 || !r.CanIssue || len(r.Members) != 3 {
			return false
		}
		for _, m := range r.Members {
			if m.Suffrage != "voter" || m.Health != "healthy" || m.Trails < 0 || m.LastContactMS < 0 || m.LeaseLeftMS <= 0 {
				return false
			}
		}
		return true
	}
	r, _ := waitStatus(t, "three healthy voters, tolerance 1, exit 0", healthy, "--addr", addr)
	zones := map[string]string{}
	for _, m := range r.Members {
		zones[m.ID] = m.Zone
	}
	if zones["n1"] != "a" || zones["n2"] != "b" || zones["n3"] != "c" {
		t.Errorf("zones %v, want n1=a n2=b n3=c", zones)
	}
	text, code := status(t, "--addr", addr)
	if code != 0 || !strings.Contains(text, "failure tolerance: 1") || !strings.Contains(text, "can issue: yes") ||
		!strings.Contains(text, "(leader)") {
		t.Errorf("idserver status (text) exit %d:\n%s", code, text)
	}

	nodes[2].Kill()
	waitStatus(t, "tolerance 0 and exit 0 with n3 killed", func(r report, code int) bool {
		return code == 0 && r.CanIssue && r.FailureTolerance == 0
	}, "--addr", addr)

	nodes[1].Kill()
	r, _ = waitStatus(t, "exit 1 (no leader) with n2 and n3 killed", func(r report, code int) bool {
		return code == 1 && !r.CanIssue && r.Leader == ""
	}, "--addr", addr)
	if len(r.Problems) == 0 || !strings.Contains(strings.Join(r.Problems, "\n"), "no leader") {
		t.Errorf("problems %q do not name the missing leader", r.Problems)
	}
	text, code = status(t, "--addr", addr)
	if code != 1 || !strings.Contains(text, "can issue: NO") || !strings.Contains(text, "leader: none") {
		t.Errorf("idserver status (text) exit %d, want 1:\n%s", code, text)
	}
}

// TestStatusUnreachable: a node that does not answer is exit 1 with the
// address named; a stray argument is a usage error, exit 2.
func TestStatusUnreachable(t *testing.T) {
	testproc.Long(t)
	addr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	out, code := status(t, "--addr", addr, "--timeout", "1s")
	if code != 1 || !strings.Contains(out, addr) {
		t.Errorf("status of a closed port: exit %d, want 1 naming %s:\n%s", code, addr, out)
	}
	if out, code := status(t, "--addr", addr, "extra"); code != 2 {
		t.Errorf("status with a stray argument: exit %d, want 2:\n%s", code, out)
	}
}

// TestStatusOverTLSWithPassword: a node started with --tls-cert and
// --requirepass answers idserver status given --tls-ca and --password
// (one node: it can issue, tolerance 0); without the password it is exit 1.
func TestStatusOverTLSWithPassword(t *testing.T) {
	testproc.Long(t)
	certFile, keyFile, pool := testproc.SelfSigned(t, t.TempDir())
	s, err := testproc.Start(t, testproc.Config{Binary: systest.Binary(t), Dir: t.TempDir(), TLS: &tls.Config{RootCAs: pool},
		Args: []string{"--tls-cert", certFile, "--tls-key", keyFile, "--requirepass", "pw"}, Ready: []any{"NEXTID"}})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := waitStatus(t, "one node that can issue, tolerance 0", func(r report, code int) bool {
		return code == 0 && r.CanIssue && r.FailureTolerance == 0 && len(r.Members) == 1
	}, "--addr", s.Addr, "--tls-ca", certFile, "--password", "pw")
	if r.LeaseLeftMS <= 0 {
		t.Errorf("lease left %d ms on a node that issues", r.LeaseLeftMS)
	}
	if out, code := status(t, "--addr", s.Addr, "--tls-ca", certFile); code != 1 || !strings.Contains(out, "NOAUTH") {
		t.Errorf("status without the password: exit %d, want 1 with NOAUTH:\n%s", code, out)
	}
}
