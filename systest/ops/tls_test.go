package ops

import (
	"context"
	"crypto/tls"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// TestTLSClientsAndCluster: RESP over TLS for go-redis and redis-cli, plain
// TCP refused on the TLS port, and a second node joining, forwarding and
// replicating over TLS with the same certificate, behind a password.
func TestTLSClientsAndCluster(t *testing.T) {
	certFile, keyFile, pool := testproc.SelfSigned(t, t.TempDir())
	port1, port2 := strconv.Itoa(testproc.FreePort(t)), strconv.Itoa(testproc.FreePort(t))
	common := []string{"--tls-cert", certFile, "--tls-key", keyFile, "--requirepass", "pw"}
	p1, err := systest.LaunchTLS(t, t.TempDir(), pool, append([]string{"--port", port1, "--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}, common...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	secure := redis.NewClient(&redis.Options{Addr: p1.Addr, Password: "pw", TLSConfig: &tls.Config{RootCAs: pool}})
	defer secure.Close()
	if _, err := secure.Do(ctx, "NEXTID").Int64(); err != nil {
		t.Fatalf("go-redis over TLS: %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: p1.Addr, Password: "pw", MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	defer plain.Close()
	if err := plain.Do(ctx, "NEXTID").Err(); err == nil {
		t.Fatal("plain TCP was served on the TLS port")
	}
	if cli, err := exec.LookPath("redis-cli"); err == nil {
		out, err := exec.Command(cli, "--tls", "--cacert", certFile, "-p", port1, "--no-auth-warning", "-a", "pw", "NEXTID").CombinedOutput()
		if err != nil || !regexp.MustCompile(`^[1-9][0-9]+\n$`).Match(out) {
			t.Fatalf("redis-cli --tls: %q %v", out, err)
		}
	} else {
		t.Log("redis-cli not found: install Debian's redis-tools to test it over TLS")
	}
	// A second node joins over TLS; its INCRs are forwarded to the leader over TLS.
	p2, err := systest.LaunchTLS(t, t.TempDir(), pool, append([]string{"--port", port2, "--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t)), "--join", p1.Addr}, common...)...)
	if err != nil {
		t.Fatal(err)
	}
	second := redis.NewClient(&redis.Options{Addr: p2.Addr, Password: "pw", TLSConfig: &tls.Config{RootCAs: pool}})
	defer second.Close()
	a, err := second.Do(ctx, "INCR", "orders").Int64()
	if err != nil {
		t.Fatalf("INCR on the joined TLS node: %v", err)
	}
	b, err := secure.Do(ctx, "INCR", "orders").Int64()
	if err != nil || a == b {
		t.Fatalf("INCR on both nodes: %d and %d (%v)", a, b, err)
	}
}
