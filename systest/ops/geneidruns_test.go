package ops

import (
	"context"
	"strings"
	"testing"

	"idserver/internal/systest"
)

// TestGeneIDRunsOnARealServer: GENEIDRUNS against the real binary, mixed
// with GENEID and NEXTID on the same gene's slots: every expanded ID carries
// the buyer's gene, none repeats, each gene's IDs increase across calls, and
// bad input is refused with Redis-style errors and issues nothing.
func TestGeneIDRunsOnARealServer(t *testing.T) {
	p := systest.StartProc(t, t.TempDir())
	rc := p.Client()
	defer rc.Close()
	ctx := context.Background()
	const buyer, gene = "12345", 12345 % 256
	seen := map[int64]bool{}
	var last int64
	check := func(id int64, what string) {
		t.Helper()
		if seen[id] {
			t.Fatalf("%s: %d issued twice", what, id)
		}
		seen[id] = true
		if id%256 != gene {
			t.Fatalf("%s: %d %% 256 = %d, want gene %d", what, id, id%256, gene)
		}
		if id <= last {
			t.Fatalf("%s: %d not above the gene's previous %d", what, id, last)
		}
		last = id
	}
	for round := range 50 {
		runs, err := rc.Do(ctx, "GENEIDRUNS", buyer, 1000+round).Int64Slice()
		if err != nil || len(runs)%2 != 0 || len(runs) == 0 {
			t.Fatalf("GENEIDRUNS: %v %v", runs, err)
		}
		n := 0
		for i := 0; i < len(runs); i += 2 {
			for id := runs[i]; id <= runs[i+1]; id += 256 {
				check(id, "GENEIDRUNS")
				n++
			}
		}
		if n != 1000+round {
			t.Fatalf("GENEIDRUNS %d expanded to %d IDs", 1000+round, n)
		}
		id, err := rc.Do(ctx, "GENEID", buyer).Int64()
		if err != nil {
			t.Fatal(err)
		}
		check(id, "GENEID")
		if err := rc.Do(ctx, "NEXTID", 300).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := len(seen)
	for _, bad := range []struct {
		args []any
		want string
	}{
		{[]any{"GENEIDRUNS", buyer}, "wrong number of arguments"},
		{[]any{"GENEIDRUNS", buyer, 0}, "out of range"},
		{[]any{"GENEIDRUNS", buyer, 10001}, "out of range"},
		{[]any{"GENEIDRUNS", buyer, "x"}, "not an integer"},
		{[]any{"GENEIDRUNS", strings.Repeat("b", 257), 1}, "ERR"},
	} {
		if err := rc.Do(ctx, bad.args...).Err(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("%v: %v, want an error with %q", bad.args, err, bad.want)
		}
	}
	if id, err := rc.Do(ctx, "GENEID", buyer).Int64(); err != nil {
		t.Fatal(err)
	} else {
		check(id, "GENEID after bad input")
	}
	if len(seen) != before+1 {
		t.Fatalf("bad input issued IDs")
	}
}
