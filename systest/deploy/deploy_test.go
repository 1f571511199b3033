package deploy

import (
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// startReady starts the three pods at once and waits until they are
// ready.
func startReady(t *testing.T) *statefulSet {
	t.Helper()
	s := newStatefulSet(t)
	s.startAll()
	s.waitReady(60*time.Second, 0, 1, 2)
	return s
}

// startWatched is startReady with the pods watched (watchTruth): pod i
// while up[i] is true, which it is for every pod at first.
func startWatched(t *testing.T) (*statefulSet, *[3]atomic.Bool, *truth) {
	t.Helper()
	s := startReady(t)
	up := new([3]atomic.Bool)
	for i := range up {
		up[i].Store(true)
	}
	w := s.watchTruth(&ids{}, func(i int) bool { return up[i].Load() })
	return s, up, w
}

// TestParallelFirstStart: the StatefulSet created with every pod at once
// (podManagementPolicy Parallel) on empty volumes comes up: pod 0
// bootstraps although the others answer (each waiting to join), and they
// join it.
func TestParallelFirstStart(t *testing.T) {
	long(t)
	s := startReady(t)
	for i := range s.pods {
		if _, err := s.nextID(i); err != nil {
			t.Fatalf("pod %d ready, NEXTID: %v", i, err)
		}
	}
}

// TestMemberAloneIsNotReady: a member of three whose peers are gone, and
// then restarted alone, answers NEXTID with TRYAGAIN once its lease has
// ended, and its readiness probe says so (503 with the reason) while the
// liveness probe passes (a restart would not help); a peer back makes it
// ready again and NEXTID answers.
func TestMemberAloneIsNotReady(t *testing.T) {
	long(t)
	s := startReady(t)
	s.pods[1].srv.Kill()
	s.pods[2].srv.Kill()
	// The lease (--worker-lease, 10 s by default) runs out, then the probe
	// (every 2 s) sees it.
	notReady := func(what string) {
		t.Helper()
		waitFor(t, 20*time.Second, "pod 0 not ready "+what, func() (bool, string) {
			ok, why := s.ready(0)
			return !ok && strings.Contains(why, "cannot issue NEXTID"), why
		})
		if _, err := s.nextID(0); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Fatalf("pod 0 %s: NEXTID answered %v, want TRYAGAIN", what, err)
		}
		if ok, why := s.live(0); !ok {
			t.Fatalf("pod 0 %s: liveness probe fails (%s): Kubernetes would restart it for a quorum it cannot mend", what, why)
		}
	}
	notReady("with its peers gone")
	s.pods[0].srv.Kill()
	if err := s.start(0); err != nil {
		t.Fatal(err)
	}
	notReady("restarted alone")
	began := time.Now()
	if err := s.start(1); err != nil {
		t.Fatal(err)
	}
	s.waitReady(30*time.Second, 0, 1)
	if _, err := s.nextID(0); err != nil {
		t.Fatalf("pod 0 ready again, NEXTID: %v", err)
	}
	t.Logf("pod 0 ready again %v after pod 1 started", time.Since(began).Round(time.Millisecond))
}

// TestFullRestartInParallel: every pod killed at once and started again at
// once on its volume, as Parallel does after a node pool restart, comes
// back ready; meanwhile a pod is ready only while it answers NEXTID.
func TestFullRestartInParallel(t *testing.T) {
	long(t)
	s, up, w := startWatched(t)
	time.Sleep(time.Second) // a few rounds of the watch before the kill
	for i, p := range s.pods {
		up[i].Store(false)
		p.srv.Kill()
	}
	killed := time.Now()
	s.startAll()
	for i := range up {
		up[i].Store(true)
	}
	s.waitReady(60*time.Second, 0, 1, 2)
	back := time.Since(killed)
	time.Sleep(time.Second) // a few rounds of the watch on the pods back
	w.end()
	t.Logf("3 pods killed and started again at once: all ready %v after the kill", back.Round(time.Millisecond))
	for i := range s.pods {
		if _, err := s.nextID(i); err != nil {
			t.Fatalf("pod %d ready, NEXTID: %v", i, err)
		}
	}
}

// TestRollingRestartInOrder: the pods restarted one at a time, from the
// highest ordinal down as a RollingUpdate does, each with SIGTERM (the
// kubelet's stop) and started again on its volume, the next only once the
// one before is ready: the pods not restarting stay ready and answer
// NEXTID throughout, and a pod is ready only while it answers NEXTID.
func TestRollingRestartInOrder(t *testing.T) {
	long(t)
	s, up, w := startWatched(t)
	for i := len(s.pods) - 1; i >= 0; i-- {
		up[i].Store(false)
		if err := s.pods[i].srv.Stop(30 * time.Second); err != nil { // terminationGracePeriodSeconds
			t.Fatalf("pod %d: %v", i, err)
		}
		began := time.Now()
		if err := s.start(i); err != nil {
			t.Fatal(err)
		}
		up[i].Store(true)
		s.waitReady(60*time.Second, i)
		t.Logf("pod %d ready %v after its start", i, time.Since(began).Round(time.Millisecond))
		for j := range s.pods {
			if ok, why := s.ready(j); !ok {
				t.Errorf("after pod %d's restart, pod %d is not ready: %s", i, j, why)
			}
		}
	}
	time.Sleep(time.Second) // a few rounds of the watch after the last restart
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.readyOK == 0 {
		t.Fatal("no NEXTID answered during the rolling restart")
	}
}

// TestServiceLinksDoNotStopTheProcess: a pod in a namespace with a Service
// named idserver gets IDSERVER_PORT=tcp://10.96.0.9:6380 and the rest of
// the service links in its environment. Every pod of the tests here runs
// with them (the manifest gives --port, which wins); without --port on the
// command line, where IDSERVER_PORT is read, the process does not stop
// either: --version, which reads the environment as a start does, exits 0.
// A start without --port would take the fixed port 6380, which a test
// here may not bind; cmd/idserver's TestServiceLinkIgnored checks that
// such a start keeps 6380 and warns.
func TestServiceLinksDoNotStopTheProcess(t *testing.T) {
	long(t)
	cmd := exec.Command(systest.Binary(t), "--version")
	cmd.Env = append(os.Environ(), serviceLinks()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("idserver --version with the service links of a Service named idserver: %v\n%s", err, out)
	}
	srv, err := testproc.Start(t, testproc.Config{Binary: systest.Binary(t), Dir: t.TempDir(), Env: serviceLinks(), Ready: []any{"NEXTID"}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(10 * time.Second)
}
