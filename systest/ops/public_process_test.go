package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/internal/systest"
)

// decoded is DECODE's reply (a RESP3 map, or a RESP2 array) as a map.
func decoded(t *testing.T, rdb *redis.Client, args ...any) map[string]any {
	t.Helper()
	v, err := rdb.Do(context.Background(), append([]any{"DECODE"}, args...)...).Result()
	if err != nil {
		t.Fatalf("DECODE %v on %s: %v", args, rdb.Options().Addr, err)
	}
	f := map[string]any{}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			f[k.(string)] = x
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			f[v[i].(string)] = v[i+1]
		}
	}
	return f
}

// fingerprintInLog is the public-ID key fingerprint a node logged.
var fingerprintInLog = regexp.MustCompile(`public_key_fingerprint=([0-9a-f]{16})`)

// TestPublicIDsAcrossThreeProcesses: three processes joined with --join,
// no --public-key: the key the first made at bootstrap reaches the
// others through the log. Every node reverses every other node's public
// forms to the same ID and parts (the ID's worker being the issuing
// node's), so all three hold the same permutation; no public form repeats
// and gene forms keep the gene. After a SIGKILL and restart of the node
// that made the key, it reverses the public forms handed out before. A
// fourth node with another --public-key is refused at its join, with both
// fingerprints named and never the key.
func TestPublicIDsAcrossThreeProcesses(t *testing.T) {
	members := systest.StartMembers(t, 3)
	ctx := context.Background()
	clients := make([]*redis.Client, 3)
	workers := make([]int64, 3)
	type issued struct {
		public int64
		kind   string
		node   int
	}
	var forms []issued
	seen := map[int64]bool{}
	for i, m := range members {
		clients[i] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + m.Port, MaxRetries: -1})
		defer clients[i].Close()
		one, err := systest.UntilServed(t, clients[i], "PUBLICID").Int64()
		if err != nil {
			t.Fatalf("node %d PUBLICID: %v", i, err)
		}
		workers[i] = decoded(t, clients[i], one, "PUBLICID")["worker"].(int64)
		many, err := clients[i].Do(ctx, "PUBLICID", 200).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		genes, err := clients[i].Do(ctx, "PUBLICGENEID", "buyer-77", 50).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range append([]int64{one}, many...) {
			forms = append(forms, issued{p, "PUBLICID", i})
		}
		for _, p := range genes {
			forms = append(forms, issued{p, "PUBLICGENEID", i})
		}
	}
	if workers[0] == workers[1] || workers[1] == workers[2] || workers[0] == workers[2] {
		t.Fatalf("worker IDs %v", workers)
	}
	gene, _ := clients[0].Do(ctx, "GENEOF", "buyer-77").Int64()
	check := func(when string) {
		for _, f := range forms {
			var want map[string]any
			for j, rdb := range clients {
				got := decoded(t, rdb, f.public, f.kind)
				if got["worker"] != workers[f.node] {
					t.Fatalf("%s: node %d reverses node %d's %s %d to worker %v, want %d", when, j, f.node, f.kind, f.public, got["worker"], workers[f.node])
				}
				if want == nil {
					want = got
					continue
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("%s: %s %d: node 0 says %s %v, node %d %v", when, f.kind, f.public, k, v, j, got[k])
					}
				}
			}
			if f.kind == "PUBLICGENEID" && (f.public%256 != gene || want["gene"] != gene) {
				t.Fatalf("%s: PUBLICGENEID %d does not keep gene %d: %v", when, f.public, gene, want)
			}
		}
	}
	for _, f := range forms {
		if seen[f.public] {
			t.Fatalf("public form %d handed out twice", f.public)
		}
		seen[f.public] = true
	}
	check("before the restart")

	members[0].P.Kill()
	members[0].Start(t)
	clients[0].Close()
	clients[0] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + members[0].Port, MaxRetries: -1})
	if err := systest.UntilServed(t, clients[0], "PUBLICID").Err(); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	check("after a SIGKILL and restart of the node that made the key")

	var fingerprints []string
	for _, m := range members {
		fp := fingerprintInLog.FindStringSubmatch(m.P.Log())
		if fp == nil {
			t.Fatalf("no public_key_fingerprint in the log of %s", m.Port)
		}
		fingerprints = append(fingerprints, fp[1])
	}
	if fingerprints[1] != fingerprints[0] || fingerprints[2] != fingerprints[0] {
		t.Fatalf("fingerprints %v", fingerprints)
	}
	other := make([]byte, engine.PublicKeyLen)
	rand.Read(other)
	code, out := systest.RunToExit(t, "--port", systest.FreePort(t), "--raft-addr", systest.FreeAddr(t), "--dir", t.TempDir(),
		"--join", "127.0.0.1:"+members[1].Port, "--public-key", hex.EncodeToString(other))
	if code != 1 || !strings.Contains(out, engine.PublicKeyFingerprint(other)) || !strings.Contains(out, fingerprints[0]) ||
		strings.Contains(out, hex.EncodeToString(other)) {
		t.Fatalf("a joiner with another --public-key: exit %d, output:\n%s", code, out)
	}
	if info := systest.ClusterInfo(t, clients[1]); info["members"] != "3" {
		t.Fatalf("after the refused join: %v", info)
	}
	t.Logf("3 processes: %d public forms, each reversed alike by every node, before and after a restart; key fingerprint %s; a joiner with key %s refused",
		len(forms), fingerprints[0], engine.PublicKeyFingerprint(other))
}

// TestPublicKeyFlag: --public-key is the key public forms are made with
// (checked against engine.PublicIDs outside the server, also through
// IDSERVER_PUBLIC_KEY); a restart without it keeps the stored key; a
// restart with another is refused naming both fingerprints; a key of the
// wrong length exits 2 before the data directory is touched; bad
// arguments get Redis-style errors.
func TestPublicKeyFlag(t *testing.T) {
	for _, bad := range []string{"abc", strings.Repeat("0", 63), strings.Repeat("0", 66), strings.Repeat("x", 64)} {
		dir := t.TempDir() + "/data"
		if code, out := systest.RunToExit(t, "--port", systest.FreePort(t), "--dir", dir, "--public-key", bad); code != 2 || !strings.Contains(out, "--public-key") {
			t.Errorf("--public-key %q: exit %d, output:\n%s", bad, code, out)
		}
		if code, out := systest.RunToExitEnv(t, []string{"IDSERVER_PUBLIC_KEY=" + bad}, "--port", systest.FreePort(t), "--dir", dir); code != 2 || !strings.Contains(out, "public-key") {
			t.Errorf("IDSERVER_PUBLIC_KEY=%q: exit %d, output:\n%s", bad, code, out)
		}
	}
	ctx := context.Background()
	key := make([]byte, engine.PublicKeyLen)
	rand.Read(key)
	want, err := engine.NewPublicIDs(key, engine.DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := systest.Launch(t, dir, []string{"IDSERVER_PUBLIC_KEY=" + hex.EncodeToString(key)})
	if err != nil {
		t.Fatal(err)
	}
	rdb := p.Client()
	pubs, err := systest.UntilServed(t, rdb, "PUBLICID", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, pub := range pubs {
		id := decoded(t, rdb, pub, "PUBLICID")["id"].(int64)
		x := []int64{id}
		want.Hide(x)
		if x[0] != pub {
			t.Fatalf("ID %d: the server's public form %d, engine.PublicIDs with the key gives %d", id, pub, x[0])
		}
	}
	for _, c := range []struct {
		args []any
		err  string
	}{
		{[]any{"PUBLICID", 10001}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"PUBLICID", 1, 2}, "ERR wrong number of arguments for 'publicid' command"},
		{[]any{"PUBLICGENEID"}, "ERR wrong number of arguments for 'publicgeneid' command"},
		{[]any{"PUBLICGENEID", "b", 0}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"DECODE", pubs[0], "PUBLIC"}, "ERR syntax error: DECODE value PUBLICID or DECODE value PUBLICGENEID"},
		{[]any{"DECODE", "-3", "PUBLICID"}, "ERR invalid id"},
	} {
		if err := rdb.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.err {
			t.Errorf("%v: %v, want %q", c.args, err, c.err)
		}
	}
	p.Shutdown()

	p = systest.StartProc(t, dir) // no flag: the stored key
	if got := decoded(t, p.Client(), pubs[0], "PUBLICID"); got["id"] == nil {
		t.Fatalf("after a restart without --public-key: %v", got)
	} else if x := []int64{got["id"].(int64)}; want.Hide(x) != nil || x[0] != pubs[0] {
		t.Fatalf("after a restart without --public-key, %d reverses to %v", pubs[0], got)
	}
	p.Shutdown()

	other := make([]byte, engine.PublicKeyLen)
	rand.Read(other)
	code, out := systest.RunToExit(t, "--port", systest.FreePort(t), "--dir", dir, "--public-key", hex.EncodeToString(other))
	if code != 1 || !strings.Contains(out, engine.PublicKeyFingerprint(other)) || !strings.Contains(out, engine.PublicKeyFingerprint(key)) ||
		strings.Contains(out, hex.EncodeToString(key)) || strings.Contains(out, hex.EncodeToString(other)) {
		t.Fatalf("a restart with another --public-key: exit %d, output:\n%s", code, out)
	}
	systest.StartProc(t, dir, "--public-key", strings.ToUpper(hex.EncodeToString(key))) // its own key, in capitals, starts
}

// TestPublicIDsIn53Bits: with --id-bits 53 public forms are 53-bit too
// (exact in a JavaScript number), reverse to IDs of this node, and the
// gene forms keep the layout's gene bits.
func TestPublicIDsIn53Bits(t *testing.T) {
	p := systest.StartProc(t, t.TempDir(), "--id-bits", "53")
	rdb := p.Client()
	l, err := engine.AutoLayout(53, engine.AutoUnit(53))
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := systest.UntilServed(t, rdb, "PUBLICID", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	gpubs, err := rdb.Do(context.Background(), "PUBLICGENEID", "12345", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	geneMask := int64(1)<<l.GeneBits - 1
	for i, pub := range append(pubs, gpubs...) {
		kind := "PUBLICID"
		if i >= len(pubs) {
			kind = "PUBLICGENEID"
			if pub&geneMask != 12345&geneMask {
				t.Fatalf("PUBLICGENEID 12345 gave %d, gene %d, want %d", pub, pub&geneMask, 12345&geneMask)
			}
		}
		if pub <= 0 || pub >= 1<<53 {
			t.Fatalf("%s %d is not a positive 53-bit integer", kind, pub)
		}
		if id, _ := decoded(t, rdb, pub, kind)["id"].(int64); id <= 0 || id >= 1<<53 {
			t.Fatalf("DECODE %d %s: id %d", pub, kind, id)
		}
	}
}
