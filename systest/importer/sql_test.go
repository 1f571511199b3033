package importer

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"idserver/internal/systest"
)

// TestPostgresSequences follows docs/migrating.md for PostgreSQL:
// sequences with a cache, an increment and a schema are imported; values a
// session had cached before the import and hands out after it are below
// idserver's; a descending sequence is refused and named.
func TestPostgresSequences(t *testing.T) {
	cmds := docCommands(t)
	url := startPostgres(t)
	ctx := context.Background()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	admin := connect()
	for _, stmt := range []string{
		`CREATE SEQUENCE orders_seq CACHE 20`,
		`CREATE SEQUENCE invoice_seq INCREMENT 10 START 1000`,
		`CREATE SEQUENCE fresh_seq START 500`,
		`CREATE SCHEMA billing`,
		`CREATE SEQUENCE billing.refund_seq`,
		`CREATE SEQUENCE down_sequence INCREMENT -1`,
		`CREATE SEQUENCE other_counter`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	seen := map[string][]int64{}
	nextval := func(c *pgx.Conn, seq string, n int) {
		for range n {
			var v int64
			if err := c.QueryRow(ctx, `SELECT nextval($1)`, seq).Scan(&v); err != nil {
				t.Fatal(err)
			}
			seen[seq] = append(seen[seq], v)
		}
	}
	a, b := connect(), connect()
	nextval(a, "orders_seq", 1) // a caches 1..20
	nextval(b, "orders_seq", 5) // b caches 21..40
	nextval(admin, "invoice_seq", 3)
	nextval(admin, "billing.refund_seq", 7)

	members := systest.StartMembers(t, 1)
	replace := map[string]string{"postgres://USER:PASSWORD@HOST:5432/DB": url, "ID1:6380": "127.0.0.1:" + members[0].Port}
	if code, out := runDoc(t, cmds[docPostgres], replace); code != 0 || !strings.Contains(out, "4 imported, 0 refused") {
		t.Fatalf("import: exit %d, want 0 and 4 imported:\n%s", code, out)
	}
	code, out := runDoc(t, cmds[docPostgresVerify], replace)
	verified(t, code, out, 4)

	// The sessions hand out what they had cached: all below idserver's.
	nextval(a, "orders_seq", 19)
	nextval(b, "orders_seq", 15)
	nextval(admin, "invoice_seq", 1)
	nextval(admin, "billing.refund_seq", 1)
	nextval(connect(), "fresh_seq", 1)
	dst := client(t, members[0])
	for _, seq := range []string{"orders_seq", "invoice_seq", "billing.refund_seq", "fresh_seq"} {
		next, err := dst.Incr(ctx, seq).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range seen[seq] {
			if v >= next {
				t.Errorf("%s: nextval %d handed out, idserver's INCR %d not above it", seq, v, next)
			}
		}
		t.Logf("%s: PostgreSQL handed out up to %d, idserver's next %d", seq, seen[seq][len(seen[seq])-1], next)
	}

	code, out = systest.RunToExit(t, "import", "--from", url, "--match", "down_*", "--to", replace["ID1:6380"])
	if code != 3 || !strings.Contains(out, `refused "down_sequence": a descending sequence`) {
		t.Fatalf("descending sequence: exit %d, want 3 naming it:\n%s", code, out)
	}
}

// TestMariaDBLeafTable follows docs/migrating.md for Leaf: leaf_alloc's
// rows land with max_id as the floor, above every segment Leaf handed
// out; a table without a named column is refused, the column named.
func TestMariaDBLeafTable(t *testing.T) {
	cmds := docCommands(t)
	addr := startMariaDB(t)
	root := openMySQL(t, addr, "")
	defer root.Close()
	for _, stmt := range []string{
		`CREATE DATABASE leaf`,
		`CREATE TABLE leaf.leaf_alloc (biz_tag VARCHAR(128) NOT NULL PRIMARY KEY, max_id BIGINT NOT NULL DEFAULT 1,
			step INT NOT NULL, description VARCHAR(256), update_time TIMESTAMP DEFAULT CURRENT_TIMESTAMP)`,
		`CREATE TABLE leaf.leaf_legacy (biz_tag VARCHAR(128) NOT NULL PRIMARY KEY, maxid BIGINT NOT NULL, step INT NOT NULL)`,
		`INSERT INTO leaf.leaf_legacy VALUES ('legacy', 100, 10)`,
	} {
		if _, err := root.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// Leaf takes a segment by raising max_id by step; it hands out
	// (max_id-step, max_id].
	segmentEnd := map[string]int64{}
	for i := range 50 {
		tag, step := fmt.Sprintf("biz-%d", i), int64(1000*(i%5+1))
		if _, err := root.Exec(`INSERT INTO leaf.leaf_alloc (biz_tag, max_id, step) VALUES (?, 1, ?)`, tag, step); err != nil {
			t.Fatal(err)
		}
		for range i%3 + 1 {
			if _, err := root.Exec(`UPDATE leaf.leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?`, tag); err != nil {
				t.Fatal(err)
			}
		}
		var end int64
		if err := root.QueryRow(`SELECT max_id FROM leaf.leaf_alloc WHERE biz_tag = ?`, tag).Scan(&end); err != nil {
			t.Fatal(err)
		}
		segmentEnd[tag] = end
	}
	members := systest.StartMembers(t, 1)
	to := "127.0.0.1:" + members[0].Port
	url := "mysql://root@" + addr + "/leaf"
	replace := map[string]string{"mysql://USER:PASSWORD@HOST:3306/leaf": url, "ID1:6380": to}
	if code, out := runDoc(t, cmds[docLeaf], replace); code != 0 || !strings.Contains(out, "50 imported, 0 refused") {
		t.Fatalf("import: exit %d, want 0 and 50 imported:\n%s", code, out)
	}
	code, out := runDoc(t, cmds[docLeafVerify], replace)
	verified(t, code, out, 50)
	dst := client(t, members[0])
	for tag, end := range segmentEnd {
		if next, err := dst.Incr(context.Background(), tag).Result(); err != nil || next <= end {
			t.Errorf("%s: Leaf handed out up to %d, idserver's INCR %d (%v)", tag, end, next, err)
		}
	}

	code, out = systest.RunToExit(t, "import", "--from", url, "--table", "leaf_legacy", "--to", to)
	if code != 1 || !strings.Contains(out, "table leaf_legacy has no column max_id (--max-column); its columns are biz_tag, maxid, step") {
		t.Fatalf("a table without max_id: exit %d, want 1 naming the column:\n%s", code, out)
	}
	code, out = systest.RunToExit(t, "import", "--from", url, "--table", "leaf_legacy", "--max-column", "maxid", "--to", to)
	if code != 0 || !strings.Contains(out, "1 imported") {
		t.Fatalf("--max-column maxid: exit %d, want 0:\n%s", code, out)
	}
}
