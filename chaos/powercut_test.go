package chaos

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"idserver/chaos/lazyfs"
)

// TestPowerCut runs real idserver processes with their data directories on
// lazyfs under NEXTID, INCR, NEXTSEG (and the rest of the campaign's mix)
// and cuts the power again and again: the processes are SIGKILLed and
// every write they did not sync is dropped at the same instant, then they
// restart on the same directories. Every value acknowledged before and
// after is checked (no repeat, per-node order, floors, linearizability).
// One node alone, in Strict mode (a name is durable only once its directory
// is fsynced: cluster.Open must sync raft/ and the data directory), and three
// nodes losing power all at once.
// CHAOS_BINARY tests another build (the teeth: see DESIGN.md).
func TestPowerCut(t *testing.T) {
	if testing.Short() {
		t.Skip("power cuts under load take about a minute; not in -short")
	}
	if err := lazyfs.Available(); err != nil {
		t.Skip("power cuts need a lazyfs mount: " + err.Error())
	}
	bin := os.Getenv("CHAOS_BINARY")
	if bin == "" {
		if _, err := exec.LookPath("go"); err != nil {
			t.Skip("needs the go tool to build cmd/idserver")
		}
		var err error
		if bin, err = BuildServer(context.Background(), t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		nodes  int
		fault  string
		strict bool // a name is durable only once its directory is fsynced
	}{{"one-node-strict", 1, FPowerCut, true}, {"three-nodes-at-once", 3, FPowerCutAll, false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "idserver-chaos-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if !t.Failed() {
					os.RemoveAll(dir)
				}
			})
			res, err := Run(context.Background(), Config{Seed: 7, Duration: 20 * time.Second, Nodes: tc.nodes, Binary: bin, Dir: dir,
				Faults: []string{tc.fault}, StrictDirs: tc.strict, Logf: t.Logf, PorcupineTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var table bytes.Buffer
			res.Table(&table)
			t.Log("\n" + table.String())
			if n := res.Faults[tc.fault]; n < 5 {
				t.Errorf("%d power cuts, want at least 5 (skipped: %v)", n, res.Skipped)
			}
			if res.PowerCutPages == 0 {
				t.Errorf("the power cuts dropped no unsynced page: nothing was lost, nothing tested")
			}
			if res.Verdict.ValuesChecked == 0 {
				t.Errorf("no value checked")
			}
			if n := notKnownOpen(t, res.Verdict.Counts); n > 0 {
				t.Errorf("%d anomalies not known open after power cuts (history and logs kept in %s)", n, res.Dir)
			}
		})
	}
}
