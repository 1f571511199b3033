package resp

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"idserver/engine"
	"idserver/internal/memstore"
)

func testPublicIDs(t testing.TB, seed byte) *engine.PublicIDs {
	t.Helper()
	p, err := engine.NewPublicIDs(bytes.Repeat([]byte{seed}, engine.PublicKeyLen), engine.DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decodeFields reads a DECODE reply, RESP2 array or RESP3 map.
func decodeFields(v any) map[string]any {
	fields := map[string]any{}
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			fields[v[i].(string)] = v[i+1]
		}
	case map[any]any:
		for k, x := range v {
			fields[k.(string)] = x
		}
	}
	return fields
}

// TestPublicIDsOverGoRedis: PUBLICID and PUBLICGENEID answer as NEXTID and
// GENEID do, in public form; DECODE value PUBLICID|PUBLICGENEID gives the
// ID back (the worker is this node's, the gene the buyer's) and its parts;
// the gene form keeps the gene.
func TestPublicIDsOverGoRedis(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	srv.SetPublicIDs(testPublicIDs(t, 7))
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := newClient(t, addr, proto, "")
		before := time.Now().UnixMilli()
		one, err := rdb.Do(ctx, "PUBLICID").Int64()
		if err != nil || one <= 0 {
			t.Fatalf("PUBLICID: %d %v", one, err)
		}
		many, err := rdb.Do(ctx, "PUBLICID", 1000).Int64Slice()
		if err != nil || len(many) != 1000 {
			t.Fatalf("PUBLICID 1000: %d %v", len(many), err)
		}
		var ids []int64
		for _, pub := range append([]int64{one}, many...) {
			dec, err := rdb.Do(ctx, "DECODE", pub, "publicid").Result()
			if err != nil {
				t.Fatalf("DECODE %d PUBLICID: %v", pub, err)
			}
			f := decodeFields(dec)
			id, _ := f["id"].(int64)
			ms, _ := f["time_ms"].(int64)
			if len(f) != 6 || f["worker"] != int64(3) || ms < before || ms > time.Now().UnixMilli()+1000 {
				t.Fatalf("DECODE %d PUBLICID: %v", pub, dec)
			}
			plain := decodeFields(rdb.Do(ctx, "DECODE", id).Val())
			for k, v := range plain {
				if f[k] != v {
					t.Fatalf("DECODE %d PUBLICID says %s %v, DECODE %d says %v", pub, k, f[k], id, v)
				}
			}
			ids = append(ids, id)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("the IDs behind PUBLICID do not increase: %d then %d", ids[i-1], ids[i])
			}
		}
		gene, _ := rdb.Do(ctx, "GENEOF", "buyer-42").Int64()
		gpubs, err := rdb.Do(ctx, "PUBLICGENEID", "buyer-42", 50).Int64Slice()
		if err != nil || len(gpubs) != 50 {
			t.Fatalf("PUBLICGENEID buyer-42 50: %v", err)
		}
		for _, pub := range gpubs {
			if pub%256 != gene {
				t.Fatalf("PUBLICGENEID %d does not keep the gene %d", pub, gene)
			}
			f := decodeFields(rdb.Do(ctx, "DECODE", pub, "PUBLICGENEID").Val())
			if f["gene"] != gene || f["worker"] != int64(3) || f["id"].(int64)%256 != gene {
				t.Fatalf("DECODE %d PUBLICGENEID: %v", pub, f)
			}
		}
		if v, err := rdb.Do(ctx, "PUBLICGENEID", "7").Int64(); err != nil || v%256 != 7 {
			t.Fatalf("PUBLICGENEID 7: %d %v", v, err)
		}
	}
}

// TestPublicIDsBadInput: wrong arity, counts out of range, long buyers,
// values that are not public forms and unknown DECODE kinds get
// Redis-style errors, and nothing is issued.
func TestPublicIDsBadInput(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	srv.SetPublicIDs(testPublicIDs(t, 8))
	rdb := newClient(t, addr, 2, "")
	ctx := context.Background()
	long := strings.Repeat("b", MaxKeyLen+1)
	for _, c := range []struct {
		args []any
		err  string
	}{
		{[]any{"PUBLICID", 1, 2}, "ERR wrong number of arguments for 'publicid' command"},
		{[]any{"PUBLICID", 0}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"PUBLICID", 10001}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"PUBLICID", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"PUBLICGENEID"}, "ERR wrong number of arguments for 'publicgeneid' command"},
		{[]any{"PUBLICGENEID", "b", 1, 2}, "ERR wrong number of arguments for 'publicgeneid' command"},
		{[]any{"PUBLICGENEID", "b", -1}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"PUBLICGENEID", long}, "ERR buyer must be 1 to 256 bytes"},
		{[]any{"PUBLICGENEID", ""}, "ERR buyer must be 1 to 256 bytes"},
		{[]any{"DECODE"}, "ERR wrong number of arguments for 'decode' command"},
		{[]any{"DECODE", 5, "PUBLICID", "x"}, "ERR wrong number of arguments for 'decode' command"},
		{[]any{"DECODE", 5, "PUBLIC"}, "ERR syntax error: DECODE value PUBLICID or DECODE value PUBLICGENEID"},
		{[]any{"DECODE", 0, "PUBLICID"}, "ERR invalid id"},
		{[]any{"DECODE", -5, "PUBLICGENEID"}, "ERR invalid id"},
		{[]any{"DECODE", "x", "PUBLICID"}, "ERR invalid id"},
		{[]any{"DECODE", "018f3e2c-1d2a-7b3c-8d4e-5f6a7b8c9d0e", "PUBLICID"}, "ERR invalid id"},
	} {
		if err := rdb.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.err {
			t.Errorf("%v: %v, want %q", c.args, err, c.err)
		}
	}
	for _, name := range []string{"publicid", "publicgeneid"} {
		if n := srv.cmdStats[commandTable[name].index].issued.Load(); n != 0 {
			t.Errorf("%s issued %d IDs on bad input", name, n)
		}
	}
}

// TestPublicIDsWaitForTheKey: before the cluster's key is known the public
// commands answer TRYAGAIN and issue nothing.
func TestPublicIDsWaitForTheKey(t *testing.T) {
	srv, addr := startServerT(t, Config{})
	rdb := newClient(t, addr, 2, "")
	ctx := context.Background()
	for _, args := range [][]any{{"PUBLICID"}, {"PUBLICGENEID", "b", 3}, {"DECODE", 12345, "PUBLICID"}} {
		if err := rdb.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
			t.Errorf("%v before the key: %v, want TRYAGAIN", args, err)
		}
	}
	if n := srv.cmdStats[commandTable["publicid"].index].issued.Load(); n != 0 {
		t.Errorf("PUBLICID issued %d IDs without a key", n)
	}
}

// TestPublicIDDispatchAllocatesNothing: PUBLICID and PUBLICGENEID, from
// the read buffer to the reply buffer, allocate nothing per command, and
// DECODE of a public form no more than DECODE of an ID (its time string).
func TestPublicIDDispatchAllocatesNothing(t *testing.T) {
	gen, err := engine.New(engine.Config{Layout: engine.DefaultLayout(), Worker: 3, MaxBorrow: time.Hour, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{}, gen)
	srv.SetPublicIDs(testPublicIDs(t, 9))
	allocs := func(cmd string) float64 {
		in := []byte(frames(cmd))
		cn := &connection{limit: DefaultClientOutputLimit}
		c := &client{conn: cn, proto: 2, authed: true}
		cn.SetContext(c)
		p := frameParser{lim: DefaultLimits()}
		return testing.AllocsPerRun(1000, func() {
			args, used, _ := p.parse(in, false)
			srv.handle(c, cn, &p, args, in[:used], in[used:])
			cn.out = cn.out[:0]
		})
	}
	for _, cmd := range []string{"PUBLICID", "PUBLICID 32", "PUBLICGENEID 12345", "PUBLICGENEID 12345 32"} {
		if n := allocs(cmd); n != 0 {
			t.Errorf("%s: %v allocations per command", cmd, n)
		}
	}
	if public, plain := allocs("DECODE 4611686018427387904 PUBLICID"), allocs("DECODE 4611686018427387904"); public > plain {
		t.Errorf("DECODE of a public form: %v allocations, DECODE of an ID %v", public, plain)
	}
}

// TestPublicCommandsOnlyIssue: an EXEC whose connection failed skips the
// public commands, as it skips NEXTID: their only effect is their reply.
func TestPublicCommandsOnlyIssue(t *testing.T) {
	loadCommandTable()
	for _, name := range []string{"publicid", "publicgeneid", "decode"} {
		if changesState(commandTable[name]) {
			t.Errorf("%s counts as changing state", name)
		}
	}
}
