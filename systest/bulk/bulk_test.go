// Package bulk tests MSET and --max-tags against real processes on
// 127.0.0.1: a cluster of three, loaded through a follower.
package bulk

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

func TestMain(m *testing.M) { systest.Main(m) }

// TestMSetThroughAFollowerUpToMaxTags: three members with --max-tags 1000.
// MSETs through a follower raise every tag on every member (GET on each,
// and INCR on each answers above the floor); once the cluster holds 1000
// tags an MSET with a new tag is refused whole, naming the bound, existing
// tags still take MSET and INCR, and DBSIZE, INFO and /metrics say 1000.
// A refused new tag is the client's reply alone: no member logs it.
func TestMSetThroughAFollowerUpToMaxTags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	ctx := context.Background()
	metrics := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	var rdbs []*redis.Client
	var procs []*testproc.Server
	var first string
	for i := range 3 {
		args := []string{"--node-id", "n" + strconv.Itoa(i+1), "--max-tags", "1000",
			"--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}
		if i == 0 {
			args = append(args, "--metrics-addr", metrics)
		} else {
			args = append(args, "--join", first)
		}
		s, err := testproc.Start(t, testproc.Config{Binary: systest.Binary(t), Dir: t.TempDir(), Args: args, Ready: []any{"NEXTID"}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = s.Addr
		}
		procs = append(procs, s)
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	infoField := func(rdb *redis.Client, name string) string {
		for _, line := range strings.Split(rdb.Info(ctx, "cluster").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return v
			}
		}
		return ""
	}
	var follower *redis.Client
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ready := 0
		for _, rdb := range rdbs {
			if infoField(rdb, "max_tags") == "1000" {
				ready++
			}
			if strings.EqualFold(infoField(rdb, "raft_role"), "follower") {
				follower = rdb
			}
		}
		if ready == 3 && follower != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("max_tags:1000 on %d of 3 members, follower %v, after 20s", ready, follower != nil)
		}
	}
	for _, rdb := range rdbs { // each buffers a segment of b0 below its floor
		if err := rdb.Incr(ctx, "b0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	mset := func(from, to int, base int64) error {
		args := []any{"MSET"}
		for i := from; i < to; i++ {
			args = append(args, "b"+strconv.Itoa(i), base+int64(i))
		}
		return follower.Do(ctx, args...).Err()
	}
	for from := 0; from < 1000; from += 500 {
		if err := mset(from, from+500, 1_000_000); err != nil {
			t.Fatalf("MSET b%d..b%d through a follower: %v", from, from+499, err)
		}
	}
	for _, rdb := range rdbs {
		for _, i := range []int{0, 499, 999} {
			tag, floor := "b"+strconv.Itoa(i), int64(1_000_000+i)
			if v, err := rdb.Get(ctx, tag).Int64(); err != nil || v != floor {
				t.Errorf("GET %s: %d %v, want %d", tag, v, err, floor)
			}
		}
	}
	for _, rdb := range rdbs {
		if v, err := rdb.Incr(ctx, "b0").Result(); err != nil || v <= 1_000_000 {
			t.Errorf("INCR b0 after MSET b0 1000000: %d %v (its buffer was not fenced)", v, err)
		}
	}
	err := follower.Do(ctx, "MSET", "b1", 5_000_000, "new", 1).Err()
	if err == nil || !strings.Contains(err.Error(), "tag limit reached: --max-tags 1000") {
		t.Fatalf("MSET with a 1001st tag: %v, want the tag limit", err)
	}
	if v, _ := rdbs[0].Get(ctx, "b1").Int64(); v >= 5_000_000 {
		t.Errorf("b1 at %d: the refused MSET raised it", v)
	}
	if err := mset(0, 10, 2_000_000); err != nil {
		t.Fatalf("MSET of existing tags at the bound: %v", err)
	}
	if err := follower.Incr(ctx, "new").Err(); err == nil || !strings.Contains(err.Error(), "tag limit reached") {
		t.Fatalf("INCR of a new tag at the bound: %v", err)
	}
	for _, rdb := range rdbs {
		for i := range 20 {
			if err := rdb.Incr(ctx, "past"+strconv.Itoa(i)).Err(); err == nil || !strings.Contains(err.Error(), "tag limit reached") {
				t.Fatalf("INCR of a new tag at the bound: %v", err)
			}
		}
	}
	for i, p := range procs {
		if n := strings.Count(p.Log(), "tag limit"); n > 0 {
			t.Errorf("member %d logged %d lines about refused new tags (its log follows)", i+1, n)
		}
	}
	for _, rdb := range rdbs {
		if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 1000 {
			t.Errorf("DBSIZE: %d %v, want 1000", n, err)
		}
		if v := infoField(rdb, "tags"); v != "1000" {
			t.Errorf("INFO cluster tags:%s, want 1000", v)
		}
	}
	body := systest.Scrape(t, "http://"+metrics+"/metrics")
	for _, want := range []string{"\nidserver_max_tags 1000\n", "\nidserver_tags 1000\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", strings.TrimSpace(want))
		}
	}
}
