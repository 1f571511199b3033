package cluster

import (
	"reflect"
	"testing"
	"time"
)

// TestTimingScales checks that --raft-timeout-scale multiplies every
// timeout of the budget, Raft's own configuration included, and that
// pre-vote stays on.
func TestTimingScales(t *testing.T) {
	base := TimingFor(1)
	want1 := Timing{
		Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond,
		Commit: 50 * time.Millisecond, Apply: 5 * time.Second, Confirm: 2 * time.Second, Call: 8 * time.Second,
		Request: 9 * time.Second, Autopilot: time.Second, SlowSync: time.Second,
	}
	if base != want1 {
		t.Fatalf("TimingFor(1) = %+v, want %+v", base, want1)
	}
	if TimingFor(0) != base {
		t.Errorf("TimingFor(0) = %+v, want scale 1's %+v", TimingFor(0), base)
	}
	for _, scale := range []float64{1.5, 2, 4, 10, MaxTimeoutScale} {
		got := TimingFor(scale)
		gv, bv := reflect.ValueOf(got), reflect.ValueOf(base)
		for i := range gv.NumField() {
			name := gv.Type().Field(i).Name
			want := time.Duration(float64(bv.Field(i).Interface().(time.Duration)) * scale)
			if d := gv.Field(i).Interface().(time.Duration); d != want {
				t.Errorf("scale %v: %s = %v, want %v", scale, name, d, want)
			}
		}
		rc := raftConfig(got)
		for _, c := range []struct {
			name      string
			got, want time.Duration
		}{
			{"HeartbeatTimeout", rc.HeartbeatTimeout, got.Heartbeat},
			{"ElectionTimeout", rc.ElectionTimeout, got.Election},
			{"LeaderLeaseTimeout", rc.LeaderLeaseTimeout, got.LeaderLease},
			{"CommitTimeout", rc.CommitTimeout, got.Commit},
		} {
			if c.got != c.want {
				t.Errorf("scale %v: raft.Config.%s = %v, want %v", scale, c.name, c.got, c.want)
			}
		}
		if rc.PreVoteDisabled {
			t.Errorf("scale %v: pre-vote is disabled", scale)
		}
		if got.Apply >= got.Call || got.Call >= got.Request || got.LeaderLease > got.Heartbeat {
			t.Errorf("scale %v: a budget does not contain what it waits on: %+v", scale, got)
		}
	}
}
