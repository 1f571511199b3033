package compat

// The client matrix: every client an operator's services may use, with and
// without a password, issuing NEXTID, GENEID, DECODE, NEXTSEG and INCR, a
// transaction pipeline (MULTI ... EXEC as the client builds it) and the
// "seed the counter if absent" idiom, SET NX.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// matrixServers starts an open server and one behind --requirepass.
func matrixServers(t *testing.T) map[string]*systest.Proc {
	t.Helper()
	return map[string]*systest.Proc{
		"":   systest.StartProc(t, t.TempDir()),
		"pw": systest.StartProc(t, t.TempDir(), "--requirepass", "pw"),
	}
}

// decodeGene reads "gene" from a DECODE reply: a map in RESP3, pairs in RESP2.
func decodeGene(t *testing.T, reply any) int64 {
	t.Helper()
	switch v := reply.(type) {
	case map[any]any:
		return v["gene"].(int64)
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if v[i] == "gene" {
				return v[i+1].(int64)
			}
		}
	}
	t.Fatalf("DECODE reply %T %v", reply, reply)
	return -1
}

func TestMatrixGoRedis(t *testing.T) {
	ctx := context.Background()
	for pass, p := range matrixServers(t) {
		for _, proto := range []int{2, 3} {
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto, Password: pass})
			defer rdb.Close()
			gid, err := rdb.Do(ctx, "GENEID", "12345").Int64()
			if err != nil {
				t.Fatalf("RESP%d pw=%q GENEID: %v", proto, pass, err)
			}
			dec, err := rdb.Do(ctx, "DECODE", gid).Result()
			if err != nil || decodeGene(t, dec) != 12345%256 {
				t.Fatalf("RESP%d DECODE: %v %v", proto, dec, err)
			}
			if _, isMap := dec.(map[any]any); isMap != (proto == 3) {
				t.Fatalf("RESP%d DECODE came as %T", proto, dec)
			}
			seg, err := rdb.Do(ctx, "NEXTSEG", "go", 10).Int64Slice()
			if err != nil || seg[1]-seg[0] != 9 {
				t.Fatalf("NEXTSEG: %v %v", seg, err)
			}
			if v, err := rdb.Incr(ctx, "go").Result(); err != nil || v <= seg[1] {
				t.Fatalf("INCR: %d %v", v, err)
			}
			if _, err := rdb.Do(ctx, "NEXTID").Int64(); err != nil {
				t.Fatal(err)
			}
			// A transaction pipeline: MULTI, the commands, EXEC.
			tx, seed := "go-tx-"+strconv.Itoa(proto), "go-seed-"+strconv.Itoa(proto)
			var incr, incrBy *redis.IntCmd
			var setNX *redis.StatusCmd
			if _, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				incr = pipe.Incr(ctx, tx)
				incrBy = pipe.IncrBy(ctx, tx, 5)
				setNX = pipe.SetArgs(ctx, seed, 1000000, redis.SetArgs{Mode: "NX"})
				return nil
			}); err != nil || incr.Val() != 1 || incrBy.Val() != 6 || setNX.Val() != "OK" {
				t.Fatalf("RESP%d TxPipelined: %v %v %v %v", proto, err, incr, incrBy, setNX)
			}
			// SET NX again does nothing; SETNX likewise; the next INCR is above the seed.
			if err := rdb.SetArgs(ctx, seed, 5, redis.SetArgs{Mode: "NX"}).Err(); err != redis.Nil {
				t.Fatalf("RESP%d second SET NX: %v", proto, err)
			}
			if ok, err := rdb.SetNX(ctx, seed, 5, 0).Result(); ok || err != nil {
				t.Fatalf("RESP%d SETNX on a seeded tag: %v %v", proto, ok, err)
			}
			if v, err := rdb.Incr(ctx, seed).Result(); err != nil || v != 1000001 {
				t.Fatalf("RESP%d INCR after SET NX 1000000: %d %v", proto, v, err)
			}
		}
	}
}

func TestMatrixRueidis(t *testing.T) {
	ctx := context.Background()
	for pass, p := range matrixServers(t) {
		// rueidis's defaults turn on client-side caching (CLIENT TRACKING),
		// which idserver refuses with what to set instead.
		if c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr}, Password: pass}); err == nil {
			c.Close()
			t.Fatalf("rueidis with default options connected: idserver must refuse CLIENT TRACKING")
		} else if !strings.Contains(err.Error(), "DisableCache: true") {
			t.Fatalf("rueidis with default options: %v, want an error naming DisableCache: true", err)
		}
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr}, Password: pass, DisableCache: true})
		if err != nil {
			t.Fatalf("rueidis pw=%q: %v", pass, err)
		}
		defer c.Close()
		if _, err := c.Do(ctx, c.B().Arbitrary("NEXTID").Build()).AsInt64(); err != nil {
			t.Fatalf("rueidis NEXTID: %v", err)
		}
		gid, err := c.Do(ctx, c.B().Arbitrary("GENEID").Args("12345").Build()).AsInt64()
		if err != nil || gid%16 != 12345%16 {
			t.Fatalf("rueidis GENEID: %d %v", gid, err)
		}
		dec, err := c.Do(ctx, c.B().Arbitrary("DECODE").Args(strconv.FormatInt(gid, 10)).Build()).AsMap()
		if err != nil {
			t.Fatalf("rueidis DECODE (a RESP3 map): %v", err)
		}
		gm := dec["gene"]
		if gene, err := gm.AsInt64(); err != nil || gene != 12345%256 {
			t.Fatalf("rueidis DECODE gene: %d %v", gene, err)
		}
		seg, err := c.Do(ctx, c.B().Arbitrary("NEXTSEG").Args("rue", "10").Build()).AsIntSlice()
		if err != nil || seg[1]-seg[0] != 9 {
			t.Fatalf("rueidis NEXTSEG: %v %v", seg, err)
		}
		if v, err := c.Do(ctx, c.B().Incr().Key("rue").Build()).AsInt64(); err != nil || v <= seg[1] {
			t.Fatalf("rueidis INCR: %d %v", v, err)
		}
		// A transaction pipeline on one connection: MULTI, the commands, EXEC.
		res := c.DoMulti(ctx, c.B().Multi().Build(), c.B().Incr().Key("rue-tx").Build(), c.B().Incrby().Key("rue-tx").Increment(5).Build(),
			c.B().Set().Key("rue-seed").Value("1000000").Nx().Build(), c.B().Exec().Build())
		exec, err := res[4].ToArray()
		if err != nil || len(exec) != 3 {
			t.Fatalf("rueidis EXEC: %v %v", exec, err)
		}
		a, _ := exec[0].AsInt64()
		b, _ := exec[1].AsInt64()
		ok, _ := exec[2].ToString()
		if a != 1 || b != 6 || ok != "OK" {
			t.Fatalf("rueidis EXEC replies: %d %d %q", a, b, ok)
		}
		if err := c.Do(ctx, c.B().Set().Key("rue-seed").Value("5").Nx().Build()).Error(); !rueidis.IsRedisNil(err) {
			t.Fatalf("rueidis second SET NX: %v", err)
		}
		if v, err := c.Do(ctx, c.B().Incr().Key("rue-seed").Build()).AsInt64(); err != nil || v != 1000001 {
			t.Fatalf("rueidis INCR after SET NX 1000000: %d %v", v, err)
		}
	}
}

func TestMatrixRedisCLIAndBenchmark(t *testing.T) {
	cli := testproc.Need(t, "redis-cli")
	bench := testproc.Need(t, "redis-benchmark")
	for pass, p := range matrixServers(t) {
		auth := []string{}
		if pass != "" {
			auth = []string{"--no-auth-warning", "-a", pass}
		}
		for _, proto := range []string{"-2", "-3"} {
			run := func(args ...string) string {
				cmd := exec.Command(cli, append(append([]string{"-p", p.Port, proto}, auth...), args...)...)
				out, err := cmd.CombinedOutput()
				if err != nil || strings.Contains(strings.ToLower(string(out)), "warn") || strings.HasPrefix(string(out), "ERR") {
					t.Fatalf("redis-cli %s %v: %v\n%s", proto, args, err, out)
				}
				return string(out)
			}
			gid := strings.TrimSpace(run("GENEID", "12345"))
			if dec := run("DECODE", gid); !strings.Contains(dec, "gene") {
				t.Fatalf("redis-cli %s DECODE: %q", proto, dec)
			}
			run("NEXTSEG", "cli", "10")
			run("INCR", "cli")
		}
		for _, proto := range [][]string{nil, {"-3"}} {
			args := append([]string{"-p", p.Port, "-n", "20000", "-q"}, proto...)
			if pass != "" {
				args = append(args, "-a", pass)
			}
			out, err := exec.Command(bench, append(args, "NEXTID")...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "requests per second") || strings.Contains(string(out), "WARN") || strings.Contains(string(out), "rror") {
				t.Fatalf("redis-benchmark %v: %v\n%s", args, err, out)
			}
		}
	}
}

func TestMatrixPythonRedis(t *testing.T) {
	py := testproc.NeedPythonRedis(t)
	script := filepath.Join(repoRoot(t), "clients", "python_matrix.py")
	for pass, p := range matrixServers(t) {
		args := []string{script, "127.0.0.1", p.Port}
		if pass != "" {
			args = append(args, pass)
		}
		out, err := exec.Command(py, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS redis-py") {
			t.Fatalf("redis-py pw=%q: %v\n%s", pass, err, out)
		}
		t.Log(strings.TrimSpace(string(out)))
	}
}

func TestMatrixNodeClients(t *testing.T) {
	node, modules := testproc.NeedNodeModules(t, "ioredis", "redis")
	script := filepath.Join(repoRoot(t), "clients", "node_matrix.js")
	for pass, p := range matrixServers(t) {
		args := []string{script, "127.0.0.1", p.Port}
		if pass != "" {
			args = append(args, pass)
		}
		cmd := exec.Command(node, args...)
		cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS ioredis") || !strings.Contains(string(out), "PASS node-redis RESP2") ||
			!strings.Contains(string(out), "PASS node-redis RESP3") {
			t.Fatalf("node clients pw=%q: %v\n%s", pass, err, out)
		}
		t.Log(strings.TrimSpace(string(out)))
	}
}

// TestMatrixNodeClientsRead53BitIDsExactly: against --id-bits 53, ioredis
// and node-redis with no option (no stringNumbers, no type mapping) read
// NEXTID and GENEID as JavaScript numbers that are the IDs exactly.
func TestMatrixNodeClientsRead53BitIDsExactly(t *testing.T) {
	node, modules := testproc.NeedNodeModules(t, "ioredis", "redis")
	p := systest.StartProc(t, t.TempDir(), "--id-bits", "53")
	cmd := exec.Command(node, filepath.Join(repoRoot(t), "clients", "node_matrix.js"), "127.0.0.1", p.Port)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "IDSERVER_ID_BITS=53", "IDSERVER_GENE_BITS=6")
	out, err := cmd.CombinedOutput()
	for _, want := range []string{"PASS ioredis exact", "PASS node-redis RESP2 exact", "PASS node-redis RESP3 exact"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("node clients on 53-bit IDs: %v, no %q in\n%s", err, want, out)
		}
	}
	t.Log(strings.TrimSpace(string(out)))
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
