package resp

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUUIDv7OverGoRedis: UUIDV7 answers canonical version 7 strings, one
// node's strictly increasing, and DECODE gives back their time, in RESP2
// and RESP3; bad counts get Redis-style errors.
func TestUUIDv7OverGoRedis(t *testing.T) {
	addr := startServer(t, Config{})
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := newClient(t, addr, proto, "")
		before := time.Now().UnixMilli()
		one, err := rdb.Do(ctx, "UUIDV7").Text()
		if err != nil {
			t.Fatal(err)
		}
		many, err := rdb.Do(ctx, "UUIDV7", 500).StringSlice()
		if err != nil || len(many) != 500 {
			t.Fatalf("UUIDV7 500: %d %v", len(many), err)
		}
		prev := one
		for _, u := range many {
			if len(u) != 36 || u[14] != '7' || u <= prev || u != strings.ToLower(u) {
				t.Fatalf("%q after %q: not a canonical, increasing UUIDv7", u, prev)
			}
			prev = u
		}
		dec, err := rdb.Do(ctx, "DECODE", strings.ToUpper(one)).Result()
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]any{}
		switch v := dec.(type) {
		case []any:
			for i := 0; i+1 < len(v); i += 2 {
				fields[v[i].(string)] = v[i+1]
			}
		case map[any]any:
			for k, x := range v {
				fields[k.(string)] = x
			}
		}
		ms, _ := fields["time_ms"].(int64)
		if ms < before || ms > time.Now().UnixMilli() || len(fields) != 2 {
			t.Fatalf("proto %d DECODE %s: %v, want time_ms in [%d, now]", proto, one, dec, before)
		}
		if tm, _ := fields["time"].(string); tm != time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") {
			t.Fatalf("DECODE time %q for %d", tm, ms)
		}
	}
	rdb := newClient(t, addr, 2, "")
	for _, c := range []struct {
		args []any
		err  string
	}{
		{[]any{"UUIDV7", 0}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"UUIDV7", 10001}, "ERR count is out of range, must be between 1 and 10000"},
		{[]any{"UUIDV7", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"UUIDV7", 1, 2}, "ERR wrong number of arguments for 'uuidv7' command"},
		{[]any{"DECODE", "017f22e2-79b0-4cc3-98c4-dc0c0c07398f"}, "ERR invalid id"},
	} {
		if err := rdb.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.err {
			t.Errorf("%v: %v, want %s", c.args, err, c.err)
		}
	}
}
