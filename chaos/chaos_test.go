package chaos

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// campaignLength is each campaign's fault schedule in TestCampaign;
// CHAOS_DURATION (a Go duration) overrides it.
func campaignLength(t *testing.T) time.Duration {
	d := 25 * time.Second
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("CHAOS_DURATION: %v", err)
		}
	}
	return d
}

// TestCampaign runs two short campaigns against real processes: a fixed
// seed, and a random one printed in the log (CHAOS_SEED replays one).
// Any anomaly fails the test with its seed and history excerpt.
func TestCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("a fault campaign takes about a minute; not in -short")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool to build cmd/idserver")
	}
	bin, err := BuildServer(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	seeds := []uint64{1, rand.Uint64() >> 1}
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		seeds = []uint64{seed}
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Logf("seed %d (replay: CHAOS_SEED=%d go test ./chaos -run TestCampaign)", seed, seed)
			// Not t.TempDir: the nodes run as other users and must reach it.
			dir, err := os.MkdirTemp("", "idserver-chaos-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if !t.Failed() {
					os.RemoveAll(dir)
				}
			})
			res, err := Run(context.Background(), Config{Seed: seed, Duration: campaignLength(t), Binary: bin, Dir: dir, Faults: ciFaults, Logf: t.Logf, PorcupineTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var table bytes.Buffer
			res.Table(&table)
			t.Log("\n" + table.String())
			failing := 0
			for kind, n := range res.Verdict.Counts {
				if why := excused(kind, res.Verdict.Counts); why != "" {
					t.Logf("known open: %d %s anomalies: %s", n, kind, why)
					continue
				}
				failing += n
			}
			if failing > 0 {
				t.Errorf("seed %d: %d anomalies not known open (history and logs kept in %s)", seed, failing, res.Dir)
			}
			if res.Verdict.ValuesChecked == 0 || res.Faults == nil {
				t.Errorf("seed %d: nothing checked", seed)
			}
		})
	}
}

// membershipScript is each fault that the cluster's own membership must
// handle, in turn: a fourth node joins; the leader is replaced by an empty
// directory at its address; a node is cut off until the cluster removes it
// while it runs, then replaced; a node is stopped for good; an empty
// directory under a member's node ID (refused, then replaced at its
// address); the leader killed and restarted.
var membershipScript = []Fault{
	{Kind: FScaleUp, Gap: time.Second, Target: -1},
	{Kind: FReplace, Gap: time.Second, Target: -1, Hold: 500 * time.Millisecond},
	{Kind: FRemoveCutLive, Gap: time.Second, Target: 1},
	{Kind: FScaleDown, Gap: time.Second, Target: 2},
	{Kind: FWipeSameID, Gap: time.Second, Target: 0},
	{Kind: FKill, Gap: time.Second, Target: -1, Hold: time.Second},
}

// TestMembershipFaults runs membershipScript under the campaign's load
// (seed 1's operations) and fails on any anomaly, on a scripted fault
// not injected, or when no live node was removed.
func TestMembershipFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute of membership faults; not in -short")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool to build cmd/idserver")
	}
	bin, err := BuildServer(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "idserver-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	res, err := Run(context.Background(), Config{Seed: 1, Duration: 40 * time.Second, Binary: bin, Dir: dir, Script: membershipScript,
		Logf: t.Logf, PorcupineTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res.Table(&table)
	t.Log("\n" + table.String())
	if len(res.Skipped) > 0 {
		t.Skipf("this machine cannot inject every fault (install iptables, run as root): %v", res.Skipped)
	}
	for _, f := range membershipScript {
		if res.Faults[f.Kind] == 0 {
			t.Errorf("no %s injected", f.Kind)
		}
	}
	if len(res.History.Removals) == 0 {
		t.Errorf("no live node was removed by the cluster")
	}
	if res.Verdict.ValuesChecked == 0 {
		t.Errorf("no value checked")
	}
	for kind, n := range res.Verdict.Counts {
		if excused(kind, res.Verdict.Counts) == "" {
			t.Errorf("%d %s anomalies (history and logs kept in %s)", n, kind, res.Dir)
		}
	}
}

// TestScheduleReplays: a seed gives the same faults and the same
// operations, another seed others.
func TestScheduleReplays(t *testing.T) {
	a, b := Schedule(7, time.Hour, AllFaults, 3), Schedule(7, time.Hour, AllFaults, 3)
	if len(a) < 100 || len(a) != len(b) {
		t.Fatalf("%d and %d faults for the same seed", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("fault %d: %v then %v", i, a[i], b[i])
		}
	}
	kinds := map[string]bool{}
	for _, f := range a {
		kinds[f.Kind] = true
	}
	if len(kinds) != len(AllFaults) {
		t.Errorf("an hour of faults has %d kinds of %d", len(kinds), len(AllFaults))
	}
	if c := Schedule(8, time.Hour, AllFaults, 3); c[0] == a[0] && c[1] == a[1] {
		t.Errorf("seeds 7 and 8 start alike: %v %v", a[:2], c[:2])
	}
	r1, r2 := rand.New(rand.NewPCG(7, 1)), rand.New(rand.NewPCG(7, 1))
	for i := range 10000 {
		if x, y := drawOp(r1, 1000), drawOp(r2, 1000); x != y {
			t.Fatalf("op %d: %v then %v", i, x, y)
		}
	}
}
