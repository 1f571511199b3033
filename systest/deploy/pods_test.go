package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// manifest is the StatefulSet kubectl apply -k applies.
const manifest = "../../deploy/kubernetes/statefulset-persistent.yaml"

// namespace stands for $(POD_NAMESPACE).
const namespace = "test"

// password is the Secret's password, read by the pods as the manifest
// says (IDSERVER_REQUIREPASS from secretKeyRef).
const password = "deploy-test-secret"

// statefulSet is the manifest's pods on loopback.
type statefulSet struct {
	t         *testing.T
	container corev1.Container
	ports     map[string]int32 // the container's ports by name
	env       []string         // the pods' environment but POD_NAME (service links included)
	pods      []*pod
}

type pod struct {
	i                   int
	name                string
	resp, raft, metrics int
	dir                 string
	srv                 *testproc.Server
	rdb                 *redis.Client
}

// newStatefulSet reads the manifest and gives each of its replicas ports
// and a data directory (its volume), without starting them.
func newStatefulSet(t *testing.T) *statefulSet {
	t.Helper()
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var ss appsv1.StatefulSet
	if err := yaml.UnmarshalStrict(raw, &ss); err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	s := &statefulSet{t: t, container: ss.Spec.Template.Spec.Containers[0], ports: map[string]int32{}}
	for _, p := range s.container.Ports {
		s.ports[p.Name] = p.ContainerPort
	}
	for i := range int(*ss.Spec.Replicas) {
		p := &pod{i: i, name: fmt.Sprintf("%s-%d", ss.Name, i), resp: testproc.FreePort(t), raft: testproc.FreePort(t),
			metrics: testproc.FreePort(t), dir: filepath.Join(t.TempDir(), "volume")}
		p.rdb = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p.resp), Password: password, MaxRetries: -1,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: 3 * time.Second, PoolSize: 2})
		t.Cleanup(func() { p.rdb.Close() })
		s.pods = append(s.pods, p)
	}
	s.env = append(serviceLinks(), "POD_NAMESPACE="+namespace)
	for _, e := range s.container.Env {
		switch {
		case e.ValueFrom == nil:
			s.env = append(s.env, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			s.env = append(s.env, e.Name+"="+password)
		}
	}
	return s
}

// serviceLinks is what the kubelet puts in a pod's environment for a
// Service named idserver with a cluster IP and for idserver-client, as it
// does unless the pod spec sets enableServiceLinks: false.
func serviceLinks() []string {
	var env []string
	for _, svc := range []struct {
		prefix string
		ports  []int
	}{{"IDSERVER", []int{6380, 16380, 9121}}, {"IDSERVER_CLIENT", []int{6380}}} {
		ip := "10.96.0.9"
		env = append(env, fmt.Sprintf("%s_SERVICE_HOST=%s", svc.prefix, ip), fmt.Sprintf("%s_SERVICE_PORT=%d", svc.prefix, svc.ports[0]),
			fmt.Sprintf("%s_SERVICE_PORT_RESP=%d", svc.prefix, svc.ports[0]), fmt.Sprintf("%s_PORT=tcp://%s:%d", svc.prefix, ip, svc.ports[0]))
		for _, port := range svc.ports {
			pre := fmt.Sprintf("%s_PORT_%d_TCP", svc.prefix, port)
			env = append(env, fmt.Sprintf("%s=tcp://%s:%d", pre, ip, port), pre+"_PROTO=tcp",
				fmt.Sprintf("%s_PORT=%d", pre, port), pre+"_ADDR="+ip)
		}
	}
	return env
}

// args is the container's arguments for pod i, as the kubelet expands
// them, with every pod's DNS name and port, and the wildcard binds, mapped
// to 127.0.0.1 and the pod's own ports, and /data to its directory.
func (s *statefulSet) args(i int) ([]string, error) {
	p := s.pods[i]
	vars := map[string]string{"POD_NAME": p.name, "POD_NAMESPACE": namespace}
	for _, e := range s.container.Env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	var pairs []string
	for _, q := range s.pods {
		host := fmt.Sprintf("%s.idserver.%s.svc:", q.name, namespace)
		pairs = append(pairs, host+strconv.Itoa(int(s.ports["resp"])), fmt.Sprintf("127.0.0.1:%d", q.resp),
			host+strconv.Itoa(int(s.ports["raft"])), fmt.Sprintf("127.0.0.1:%d", q.raft))
	}
	pairs = append(pairs,
		fmt.Sprintf("0.0.0.0:%d", s.ports["raft"]), fmt.Sprintf("127.0.0.1:%d", p.raft),
		fmt.Sprintf("0.0.0.0:%d", s.ports["metrics"]), fmt.Sprintf("127.0.0.1:%d", p.metrics),
		"--bind=0.0.0.0", "--bind=127.0.0.1",
		fmt.Sprintf("--port=%d", s.ports["resp"]), fmt.Sprintf("--port=%d", p.resp),
		"--dir=/data", "--dir="+p.dir)
	mapping := strings.NewReplacer(pairs...)
	var out []string
	for _, a := range s.container.Args {
		for name, v := range vars {
			a = strings.ReplaceAll(a, "$("+name+")", v)
		}
		a = mapping.Replace(a)
		if strings.Contains(a, "0.0.0.0") || strings.Contains(a, ".svc") || strings.Contains(a, "$(") || strings.Contains(a, "/data") {
			return nil, fmt.Errorf("%s: argument %q is not mapped to loopback: the test does not know this form", manifest, a)
		}
		out = append(out, a)
	}
	return out, nil
}

// start starts pod i on its directory and returns once it listens
// (testproc.Launch's wait for its listening line), ready or not.
func (s *statefulSet) start(i int) error {
	p := s.pods[i]
	args, err := s.args(i)
	if err != nil {
		return err
	}
	srv, err := testproc.Start(s.t, testproc.Config{Binary: systest.Binary(s.t), Dir: p.dir, Args: args,
		Env: append([]string{"POD_NAME=" + p.name}, s.env...), Ready: []any{"AUTH", password}})
	p.srv = srv
	return err
}

// startAll starts every pod at once, as podManagementPolicy Parallel does.
func (s *statefulSet) startAll() {
	s.t.Helper()
	errs := make(chan error, len(s.pods))
	for i := range s.pods {
		go func() { errs <- s.start(i) }()
	}
	for range s.pods {
		if err := <-errs; err != nil {
			s.t.Fatal(err)
		}
	}
}

// probe GETs the path of one of the manifest's probes from pod i's
// metrics port, with the kubelet's default one-second timeout: the status
// (0 when nothing answered) and body.
func (s *statefulSet) probe(i int, pr *corev1.Probe) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.pods[i].metrics, pr.HTTPGet.Path))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// ready is the readiness probe of pod i: true on a 2xx, as the kubelet counts it.
func (s *statefulSet) ready(i int) (bool, string) {
	code, body := s.probe(i, s.container.ReadinessProbe)
	return code >= 200 && code < 400, body
}

// live is the liveness probe of pod i.
func (s *statefulSet) live(i int) (bool, string) {
	code, body := s.probe(i, s.container.LivenessProbe)
	return code >= 200 && code < 400, body
}

// waitReady waits until every pod in which passes its readiness probe.
func (s *statefulSet) waitReady(d time.Duration, which ...int) {
	s.t.Helper()
	waitFor(s.t, d, fmt.Sprintf("pods %v ready", which), func() (bool, string) {
		for _, i := range which {
			if ok, body := s.ready(i); !ok {
				return false, fmt.Sprintf("pod %d: %s", i, body)
			}
		}
		return true, ""
	})
}

// waitFor polls cond every 100 ms until it holds, failing the test with
// its last word once d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: %s", what, d, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nextID asks pod i for one ID.
func (s *statefulSet) nextID(i int) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return s.pods[i].rdb.Do(ctx, "NEXTID").Int64()
}

// ids collects every ID the pods answered, to find one answered twice.
type ids struct {
	mu   sync.Mutex
	seen map[int64]int
	dups int
}

func (c *ids) add(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[int64]int{}
	}
	c.seen[id]++
	if c.seen[id] == 2 {
		c.dups++
	}
}

// truth watches the readiness probes against NEXTID: every 200 ms, for
// each pod up, the probe, a NEXTID, and the probe again. When both probes
// agree, a ready pod must answer NEXTID, and a pod whose probe says it
// cannot issue NEXTID must not; the client Service sends only to ready
// pods, so every ID taken from a pod found ready counts as what a client
// got.
type truth struct {
	s          *statefulSet
	ids        *ids
	up         func(i int) bool
	mu         sync.Mutex
	violations []string
	readyOK    int // NEXTIDs answered by a pod found ready
	notReady   int // NEXTIDs refused by a pod found unable to issue
	stop       chan struct{}
	done       sync.WaitGroup
}

func (s *statefulSet) watchTruth(c *ids, up func(i int) bool) *truth {
	w := &truth{s: s, ids: c, up: up, stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for {
			for i := range s.pods {
				if up(i) {
					w.check(i)
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *truth) check(i int) {
	before, why := w.s.ready(i)
	id, err := w.s.nextID(i)
	after, _ := w.s.ready(i)
	if err == nil {
		w.ids.add(id)
	}
	if before != after {
		return // it changed meanwhile: no verdict
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var re redis.Error
	switch {
	case before && err == nil:
		w.readyOK++
	case before:
		w.violations = append(w.violations, fmt.Sprintf("%s pod %d ready, NEXTID: %v", time.Now().Format("15:04:05.000"), i, err))
	case strings.Contains(why, "cannot issue NEXTID") && err == nil:
		w.violations = append(w.violations, fmt.Sprintf("%s pod %d not ready (%s), NEXTID answered", time.Now().Format("15:04:05.000"), i, why))
	case strings.Contains(why, "cannot issue NEXTID") && errors.As(err, &re) && strings.HasPrefix(err.Error(), "TRYAGAIN"):
		w.notReady++
	}
}

// end stops the watch and fails the test on any disagreement.
func (w *truth) end() {
	w.s.t.Helper()
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.t.Logf("readiness against NEXTID: %d answered by ready pods, %d TRYAGAIN from pods not ready for it, %d disagreements",
		w.readyOK, w.notReady, len(w.violations))
	if len(w.violations) > 0 {
		w.s.t.Errorf("readiness disagreed with NEXTID %d times: %s", len(w.violations), strings.Join(w.violations, "; "))
	}
	if w.ids.dups > 0 {
		w.s.t.Errorf("%d IDs answered twice", w.ids.dups)
	}
}
