package ops

// Forged Raft traffic: a process without the cluster secret (the test, as
// an attacker on the network) sends Raft RPCs and node-to-node requests to
// every node's Raft port. Every node refuses them: terms, DBSIZE and
// members stay as they were, and INCR goes on above every earlier value.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// forgedStream is hashicorp/raft's StreamLayer as an attacker writes it:
// TCP, or TLS with conf, and each connection opened with the header
// idserver used before the handshake: a kind byte ('R' Raft, 'C'
// node-to-node), then the cluster ID, which CLUSTER INFO shows.
type forgedStream struct {
	cluster   string
	conf      *tls.Config
	closeOnce sync.Once
	closed    chan struct{}
	mu        sync.Mutex
	opened    map[string][]string // target -> local addresses of the connections made to it
}

func newForgedStream(cluster string, conf *tls.Config) *forgedStream {
	if conf != nil && len(conf.Certificates) > 0 {
		// Present the certificate whatever CAs the node asks for (Go's
		// client would send none that does not match them).
		cert := conf.Certificates[0]
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return &forgedStream{cluster: cluster, conf: conf, closed: make(chan struct{}), opened: map[string][]string{}}
}

func (s *forgedStream) open(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if s.conf != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, s.conf)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.opened[addr] = append(s.opened[addr], c.LocalAddr().String())
	s.mu.Unlock()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(append([]byte{kind, byte(len(s.cluster))}, s.cluster...)); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func (s *forgedStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.open(string(addr), 'R', timeout)
}

func (s *forgedStream) Accept() (net.Conn, error) {
	<-s.closed
	return nil, net.ErrClosed
}

func (s *forgedStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

func (s *forgedStream) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// target is one node under attack.
type target struct {
	id, raft string
	p        *systest.Proc
	rdb      *redis.Client
}

// startTargets starts a 3-node cluster with --requirepass pw and args on
// every node, n1 bootstrapping, and waits until each sees 3 members.
func startTargets(t *testing.T, pool *x509.CertPool, args ...string) []*target {
	t.Helper()
	args = append([]string{"--requirepass", "pw"}, args...)
	var ts []*target
	for i := 1; i <= 3; i++ {
		tg := &target{id: "n" + strconv.Itoa(i), raft: "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}
		a := append([]string{"--node-id", tg.id, "--raft-addr", tg.raft}, args...)
		if i > 1 {
			a = append(a, "--join", ts[0].p.Addr)
		}
		var err error
		if pool != nil {
			tg.p, err = systest.LaunchTLS(t, t.TempDir(), pool, a...)
		} else {
			tg.p, err = systest.Launch(t, t.TempDir(), nil, a...)
		}
		if err != nil {
			t.Fatal(err)
		}
		var conf *tls.Config
		if pool != nil {
			conf = &tls.Config{RootCAs: pool}
		}
		tg.rdb = redis.NewClient(&redis.Options{Addr: tg.p.Addr, Password: "pw", TLSConfig: conf, MaxRetries: -1})
		t.Cleanup(func() { tg.rdb.Close() })
		ts = append(ts, tg)
	}
	for _, tg := range ts {
		for deadline := time.Now().Add(20 * time.Second); systest.ClusterInfo(t, tg.rdb)["members"] != "3"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never saw 3 members: %v", tg.id, systest.ClusterInfo(t, tg.rdb))
			}
		}
	}
	return ts
}

// clusterState is what the attack must not change.
type clusterState struct {
	terms, dbsize []string
}

// stateOf reads every node's term and DBSIZE once the nodes agree on
// DBSIZE (a follower applies a moment after its leader).
func stateOf(t *testing.T, ts []*target) clusterState {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var s clusterState
		for _, tg := range ts {
			s.terms = append(s.terms, systest.ClusterInfo(t, tg.rdb)["term"])
			n, err := tg.rdb.DBSize(context.Background()).Result()
			if err != nil {
				t.Fatalf("DBSIZE on %s: %v", tg.id, err)
			}
			s.dbsize = append(s.dbsize, strconv.FormatInt(n, 10))
		}
		if s.dbsize[0] == s.dbsize[1] && s.dbsize[1] == s.dbsize[2] || time.Now().After(deadline) {
			return s
		}
	}
}

// forgeRaft sends every node, through hashicorp/raft's own transport over
// stream, an AppendEntries with a huge term and an InstallSnapshot of an
// empty state that names the three nodes as the configuration. It returns
// the errors the transport saw ("" when the RPC was answered).
func forgeRaft(ts []*target, stream *forgedStream) (aeErrs, isErrs []string) {
	trans := raft.NewNetworkTransport(stream, 1, 3*time.Second, io.Discard)
	defer trans.Close()
	var conf raft.Configuration
	for _, tg := range ts {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(tg.id), Address: raft.ServerAddress(tg.raft)})
	}
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for _, tg := range ts {
		var ae raft.AppendEntriesResponse
		err := trans.AppendEntries(raft.ServerID(tg.id), raft.ServerAddress(tg.raft), &raft.AppendEntriesRequest{
			RPCHeader: header, Term: 5000, Leader: header.Addr, LeaderCommitIndex: 1 << 30,
		}, &ae)
		aeErrs = append(aeErrs, errText(err))
	}
	for _, tg := range ts {
		state := []byte("{}")
		var is raft.InstallSnapshotResponse
		err := trans.InstallSnapshot(raft.ServerID(tg.id), raft.ServerAddress(tg.raft), &raft.InstallSnapshotRequest{
			RPCHeader: header, SnapshotVersion: 1, Term: 5000, Leader: header.Addr,
			LastLogIndex: 1 << 30, LastLogTerm: 5000, Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: 1 << 30,
			Size: int64(len(state)),
		}, &is, bytes.NewReader(state))
		isErrs = append(isErrs, errText(err))
	}
	return aeErrs, isErrs
}

// forgeRequests sends every node node-to-node requests as JSON frames
// (op 4: forget n3; op 5: allocate a million orders for n1) and returns
// what each answered ("" for no answer at all).
func forgeRequests(ts []*target, stream *forgedStream) []string {
	var answers []string
	for _, tg := range ts {
		conn, err := stream.open(tg.raft, 'C', 3*time.Second)
		if err != nil {
			answers = append(answers, "")
			continue
		}
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		rd := bufio.NewReader(conn)
		for i, req := range []map[string]any{
			{"seq": 1, "op": 4, "cluster": stream.cluster, "node": "n3"},
			{"seq": 2, "op": 5, "cluster": stream.cluster, "node": "n1", "items": []map[string]any{{"Tag": "orders", "N": 1_000_000}}},
		} {
			b, _ := json.Marshal(req)
			conn.Write(append([]byte{byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...))
			var n [4]byte
			if _, err := io.ReadFull(rd, n[:]); err != nil {
				if i == 0 {
					answers = append(answers, "")
				}
				break
			}
			frame := make([]byte, min(int(n[0])<<24|int(n[1])<<16|int(n[2])<<8|int(n[3]), 1<<16))
			io.ReadFull(rd, frame)
			if i == 0 {
				answers = append(answers, string(frame))
			}
		}
		conn.Close()
	}
	return answers
}

// attackRefused runs every forgery over stream and checks that nothing
// changed, and that each node logged the refusal of the stream's first
// connection to it with reason.
func attackRefused(t *testing.T, ts []*target, stream *forgedStream, reason string) {
	t.Helper()
	ctx := context.Background()
	last := map[string]int64{} // each node's last INCR orders: its own segment's
	for _, tg := range ts {
		v, err := tg.rdb.Incr(ctx, "orders").Result()
		if err != nil {
			t.Fatal(err)
		}
		last[tg.id] = v
	}
	high, err := ts[0].rdb.Get(ctx, "orders").Int64() // the highest value of orders allocated, cluster-wide
	if err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, ts)
	answers := forgeRequests(ts, stream)
	aeErrs, isErrs := forgeRaft(ts, stream)
	for i, tg := range ts {
		if aeErrs[i] == "" {
			t.Errorf("%s answered a forged AppendEntries at term 5000", tg.id)
		}
		if isErrs[i] == "" {
			t.Errorf("%s answered a forged InstallSnapshot", tg.id)
		}
		if answers[i] != "" {
			t.Errorf("%s answered a forged node-to-node request: %s", tg.id, answers[i])
		}
	}
	after := stateOf(t, ts)
	for i, tg := range ts {
		if after.terms[i] != before.terms[i] {
			t.Errorf("%s: term %s after the attack, was %s", tg.id, after.terms[i], before.terms[i])
		}
		if after.dbsize[i] != before.dbsize[i] {
			t.Errorf("%s: DBSIZE %s after the attack, was %s", tg.id, after.dbsize[i], before.dbsize[i])
		}
		if info := systest.ClusterInfo(t, tg.rdb); info["members"] != "3" {
			t.Errorf("%s: %s members after the attack, 3 before", tg.id, info["members"])
		}
		v, err := tg.rdb.Incr(ctx, "orders").Result()
		if err != nil || v <= last[tg.id] {
			t.Errorf("%s: INCR orders answered %d %v after the attack, %d before", tg.id, v, err, last[tg.id])
		}
		last[tg.id] = v
		// Past the node's buffer: a fresh allocation starts above
		// everything allocated before the attack.
		if got, err := tg.rdb.Get(ctx, "orders").Int64(); err != nil || got < high {
			t.Errorf("%s: GET orders %d %v after the attack, %d before", tg.id, got, err, high)
		}
		if seg, err := tg.rdb.Do(ctx, "NEXTSEG", "orders", 5000).Int64Slice(); err != nil || seg[0] <= high {
			t.Errorf("%s: NEXTSEG orders 5000 answered %v %v after the attack; %d was allocated before", tg.id, seg, err, high)
		}
		stream.mu.Lock()
		from := stream.opened[tg.raft]
		stream.mu.Unlock()
		if len(from) == 0 {
			t.Errorf("the attacker reached %s not even at TCP", tg.id)
			continue
		}
		_, logged := wait.Until(5*time.Second, func() (bool, string) {
			for _, line := range strings.Split(tg.p.Log(), "\n") {
				if strings.Contains(line, "refused a connection to the Raft port") && strings.Contains(line, "from="+from[0]+" ") && strings.Contains(line, reason) {
					return true, ""
				}
			}
			return false, ""
		})
		if !logged {
			t.Errorf("%s did not log the refusal of %s with %q", tg.id, from[0], reason)
		}
	}
	t.Logf("%d forged connections per node; terms %v -> %v, DBSIZE %v -> %v, orders allocated up to %d before, INCR orders per node now %v",
		len(stream.opened[ts[0].raft]), before.terms, after.terms, before.dbsize, after.dbsize, high, last)
}

// TestForgedRaftTrafficIsRefused: a 3-node cluster with --requirepass; an
// attacker without it sends forged AppendEntries (term 5000),
// InstallSnapshot (an empty state) and node-to-node requests (forget,
// allocate) to every node, with the cluster ID in the old header: all are
// refused and logged, the terms and DBSIZE are unchanged, and INCR goes on
// above the values it gave before.
func TestForgedRaftTrafficIsRefused(t *testing.T) {
	ts := startTargets(t, nil)
	ctx := context.Background()
	for _, tag := range []string{"orders", "users", "invoices"} {
		if err := ts[1].rdb.Incr(ctx, tag).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cluster := systest.ClusterInfo(t, ts[0].rdb)["cluster_id"]
	attackRefused(t, ts, newForgedStream(cluster, nil), `reason="opened with 'C', not the handshake`)
}

// TestForgedRaftTrafficOverTLSIsRefused: the same cluster with
// --tls-cert/--tls-key (one self-signed certificate, its own CA). Over TLS
// with no client certificate, with a certificate of another CA, over plain
// TCP, and with the nodes' own certificate but without the secret, every
// forgery is refused and logged, and nothing changes.
func TestForgedRaftTrafficOverTLSIsRefused(t *testing.T) {
	certFile, keyFile, pool := testproc.SelfSigned(t, t.TempDir())
	ts := startTargets(t, pool, "--tls-cert", certFile, "--tls-key", keyFile)
	ctx := context.Background()
	for _, tag := range []string{"orders", "users"} {
		if err := ts[1].rdb.Incr(ctx, tag).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cluster := systest.ClusterInfo(t, ts[0].rdb)["cluster_id"]
	otherCert, otherKey, _ := testproc.SelfSigned(t, t.TempDir())
	other, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	stolen, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		conf   *tls.Config
		reason string
	}{
		{"TLS with no client certificate", &tls.Config{RootCAs: pool}, "tls: client didn't provide a certificate"},
		{"TLS with a certificate of another CA", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{other}}, "unknown authority"},
		{"plain TCP", nil, "first record does not look like a TLS handshake"},
		{"the nodes' certificate without the secret", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{stolen}}, `opened with 'C', not the handshake`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attackRefused(t, ts, newForgedStream(cluster, tc.conf), tc.reason)
		})
	}
}

// TestClusterSecret: --cluster-secret (or IDSERVER_CLUSTER_SECRET), not
// --requirepass, keys the Raft port when given: a node with the same one
// joins and serves; a node with another is refused at the member's Raft
// port when it joins, naming the flag, and the cluster keeps its members.
func TestClusterSecret(t *testing.T) {
	first := systest.StartProc(t, t.TempDir(), "--requirepass", "pw", "--cluster-secret", "s3cret", "--raft-addr", systest.FreeAddr(t))
	second, err := systest.Launch(t, t.TempDir(), []string{"IDSERVER_CLUSTER_SECRET=s3cret"}, "--requirepass", "pw", "--raft-addr", systest.FreeAddr(t), "--join", first.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: second.Addr, Password: "pw", MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Incr(ctx, "orders").Err(); err != nil {
		t.Fatalf("INCR on the member that joined with the same cluster secret: %v", err)
	}
	p, err := systest.Launch(t, t.TempDir(), nil, "--requirepass", "pw", "--cluster-secret", "other", "--raft-addr", systest.FreeAddr(t), "--join", first.Addr)
	out := systest.WaitExit(t, p, err)
	if code := p.Cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out, "is --cluster-secret, or --requirepass, the same on every node?") {
		t.Fatalf("a joiner with another cluster secret: exit %d, want 1 naming --cluster-secret:\n%s", code, out)
	}
	leader := redis.NewClient(&redis.Options{Addr: first.Addr, Password: "pw"})
	defer leader.Close()
	if info := systest.ClusterInfo(t, leader); info["members"] != "2" {
		t.Fatalf("after the refused join: %v", info)
	}
	// The joiner is refused at the member's Raft port, before it sends its
	// join: the member logs the connection it refused, the joiner the
	// refusal of its proof.
	if !strings.Contains(first.Log(), `msg="refused a connection to the Raft port: no proof of the cluster secret"`) ||
		!strings.Contains(p.Log(), "the node refused this node's proof") {
		t.Fatalf("the refused handshake was not logged on both sides:\n%s\n%s", p.Log(), first.Log())
	}
}

// TestProtectedMode: bound beyond loopback with no secret, a node refuses
// to start (exit 2, the remedy named) and touches no directory; with
// --protected-mode no, or with a cluster secret, it starts. (Bound to
// 0.0.0.0 on a port from FreePort, and reached on 127.0.0.1.)
func TestProtectedMode(t *testing.T) {
	dir := t.TempDir() + "/data"
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--bind", "0.0.0.0", "--port", systest.FreePort(t)}, `--bind "0.0.0.0"`},
		{[]string{"--bind", "127.0.0.1", "--port", systest.FreePort(t), "--raft-addr", "0.0.0.0:0"}, `--raft-addr "0.0.0.0"`},
	} {
		code, out := systest.RunToExit(t, append(tc.args, "--dir", dir)...)
		if code != 2 || !strings.Contains(out, "protected mode: "+tc.flag+" is not a loopback address and no secret is set") ||
			!strings.Contains(out, "--cluster-secret") || !strings.Contains(out, "--protected-mode no") {
			t.Fatalf("%v: exit %d, want 2 with the remedy:\n%s", tc.args, code, out)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a node refused by protected mode touched --dir: %v", err)
	}
	everywhere := []string{"--bind", "0.0.0.0", "--advertise", "127.0.0.1:0", "--raft-addr", systest.FreeAddr(t)}
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{nil, append([]string{"--protected-mode", "no"}, everywhere...)},
		{[]string{"IDSERVER_CLUSTER_SECRET=s3cret"}, everywhere},
	} {
		p, err := systest.Launch(t, t.TempDir(), tc.env, tc.args...)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.env, tc.args, err)
		}
		if !strings.HasPrefix(p.Addr, "127.0.0.1:") {
			t.Fatalf("talking to %s, not loopback", p.Addr)
		}
		if err := p.Client().Incr(context.Background(), "orders").Err(); err != nil {
			t.Fatalf("%v %v: INCR: %v", tc.env, tc.args, err)
		}
		p.Shutdown()
	}
}

// caSigned writes a CA certificate into dir and returns it with a signer
// of certificates for 127.0.0.1 under it.
func caSigned(t *testing.T, dir string) (caFile string, pool *x509.CertPool, leaf func(name string) (certFile, keyFile string)) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idserver test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	caFile = filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	serial := int64(1)
	leaf = func(name string) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
		return certFile, keyFile
	}
	return caFile, pool, leaf
}

// TestTLSCAVerifiesPeers: nodes with certificates signed by a CA, given
// with --tls-ca, form a cluster over mutual TLS. A certificate of another
// CA is refused at TLS; one the same CA signed passes TLS (it is a node's
// certificate) but not the handshake without the secret.
func TestTLSCAVerifiesPeers(t *testing.T) {
	caFile, pool, leaf := caSigned(t, t.TempDir())
	nodeCert, nodeKey := leaf("node")
	ts := startTargets(t, pool, "--tls-cert", nodeCert, "--tls-key", nodeKey, "--tls-ca", caFile)
	if err := ts[2].rdb.Incr(context.Background(), "orders").Err(); err != nil {
		t.Fatalf("INCR through a member over mutual TLS: %v", err)
	}
	cluster := systest.ClusterInfo(t, ts[0].rdb)["cluster_id"]
	sameCACert, sameCAKey := leaf("attacker")
	sameCA, err := tls.LoadX509KeyPair(sameCACert, sameCAKey)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, _ := testproc.SelfSigned(t, t.TempDir())
	other, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a certificate of another CA", func(t *testing.T) {
		attackRefused(t, ts, newForgedStream(cluster, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{other}}), "unknown authority")
	})
	t.Run("a certificate of the CA, without the secret", func(t *testing.T) {
		attackRefused(t, ts, newForgedStream(cluster, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{sameCA}}), `opened with 'C', not the handshake`)
	})
}
