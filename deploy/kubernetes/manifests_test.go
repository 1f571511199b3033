package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's Kustomization these manifests
// use; a field beyond it fails the strict decoding.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Resources       []string `json:"resources"`
}

// manifests is every document of every *.yaml file here, decoded strictly
// into the API type of its kind: a field the type does not have, a field
// given twice or a value of the wrong type fails, as kubectl apply
// --validate=strict refuses it.
type manifests struct {
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet // by file
	pdbs         []*policyv1.PodDisruptionBudget
	kustomize    *kustomization
}

func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := manifests{services: map[string]*corev1.Service{}, statefulSets: map[string]*appsv1.StatefulSet{}}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s document %d", f, i+1)
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var into any
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 Service":
				into = &corev1.Service{}
			case "apps/v1 StatefulSet":
				s := &appsv1.StatefulSet{}
				into = s
				m.statefulSets[f] = s
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				into = p
				m.pdbs = append(m.pdbs, p)
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				m.kustomize = &kustomization{}
				into = m.kustomize
			default:
				t.Fatalf("%s: unexpected kind %q of %q", where, meta.Kind, meta.APIVersion)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if s, ok := into.(*corev1.Service); ok {
				m.services[s.Name] = s
			}
		}
	}
	return m
}

// stripComments drops comment lines, so that a file's leading comment is
// not taken for a document.
func stripComments(doc string) string {
	var b bytes.Buffer
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestManifestsDecodeStrictly: every document is one of the kinds
// expected, and decodes with no field unknown to its type.
func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if len(m.statefulSets) != 2 || len(m.services) != 2 || len(m.pdbs) != 1 || m.kustomize == nil {
		t.Fatalf("want 2 StatefulSets, 2 Services, 1 PodDisruptionBudget and a Kustomization; have %d, %d, %d, %v",
			len(m.statefulSets), len(m.services), len(m.pdbs), m.kustomize != nil)
	}
}

// TestKustomizationNamesItsFiles: kubectl apply -k applies the Services,
// the budget and one StatefulSet, each a file here.
func TestKustomizationNamesItsFiles(t *testing.T) {
	m := load(t)
	want := []string{"pdb.yaml", "service.yaml", "statefulset-persistent.yaml"}
	got := slices.Sorted(slices.Values(m.kustomize.Resources))
	if !slices.Equal(got, want) {
		t.Fatalf("kustomization.yaml resources %v, want %v", got, want)
	}
}

// TestServices: the headless Service publishes pods before they are
// ready (a starting pod must reach its peers, and pod 0 them), and the
// StatefulSets name it.
func TestServices(t *testing.T) {
	m := load(t)
	h := m.services["idserver"]
	if h == nil {
		t.Fatal("no Service idserver")
	}
	if h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses {
		t.Errorf("Service idserver: clusterIP %q publishNotReadyAddresses %v, want None and true", h.Spec.ClusterIP, h.Spec.PublishNotReadyAddresses)
	}
	c := m.services["idserver-client"]
	if c == nil || c.Spec.ClusterIP == corev1.ClusterIPNone || c.Spec.PublishNotReadyAddresses {
		t.Errorf("Service idserver-client must send clients to ready pods only: %+v", c)
	}
	for f, s := range m.statefulSets {
		if s.Spec.ServiceName != h.Name {
			t.Errorf("%s: serviceName %q, want %q", f, s.Spec.ServiceName, h.Name)
		}
		ports := map[string]int32{}
		for _, p := range s.Spec.Template.Spec.Containers[0].Ports {
			ports[p.Name] = p.ContainerPort
		}
		for _, svc := range []*corev1.Service{h, c} {
			for _, p := range svc.Spec.Ports {
				if ports[p.Name] != p.Port {
					t.Errorf("%s: Service %s port %s is %d, the container's %d", f, svc.Name, p.Name, p.Port, ports[p.Name])
				}
			}
		}
	}
}

// TestStatefulSets checks what each StatefulSet must keep: a pinned image
// of the version deploy/image/build makes, probes on the endpoints
// docs/operations.md names, a locked-down pod, Parallel start and the
// spread over zones.
func TestStatefulSets(t *testing.T) {
	m := load(t)
	raw, err := os.ReadFile(filepath.Join("..", "image", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	image := "idserver:" + strings.TrimSpace(string(raw))
	for f, s := range m.statefulSets {
		t.Run(f, func(t *testing.T) {
			spec := s.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(spec.Containers))
			}
			c := spec.Containers[0]
			check := func(ok bool, format string, args ...any) {
				t.Helper()
				if !ok {
					t.Errorf(format, args...)
				}
			}
			check(c.Image == image, "image %q, want %q (deploy/image/VERSION)", c.Image, image)
			check(s.Spec.PodManagementPolicy == appsv1.ParallelPodManagement,
				"podManagementPolicy %q: a whole-set restart needs Parallel (no pod is ready before a quorum is back)", s.Spec.PodManagementPolicy)
			check(s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType, "updateStrategy %q", s.Spec.UpdateStrategy.Type)

			metricsPort := false
			for _, p := range c.Ports {
				metricsPort = metricsPort || p.Name == "metrics"
			}
			check(metricsPort, "no container port named metrics")
			check(slices.Contains(c.Args, "--metrics-addr=0.0.0.0:9121"), "no --metrics-addr=0.0.0.0:9121 for the probes: %v", c.Args)
			probe := func(name string, p *corev1.Probe, path string) {
				t.Helper()
				if p == nil || p.HTTPGet == nil {
					t.Errorf("%s: none, or not an HTTP GET", name)
					return
				}
				check(p.HTTPGet.Path == path && p.HTTPGet.Port.String() == "metrics", "%s: %s on port %s, want %s on metrics",
					name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
			}
			probe("startupProbe", c.StartupProbe, "/healthz")
			probe("readinessProbe", c.ReadinessProbe, "/healthz?ready=1")
			probe("livenessProbe", c.LivenessProbe, "/healthz")
			if c.StartupProbe != nil {
				// A join waits up to a minute before the process gives up.
				budget := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold
				check(budget >= 120, "startupProbe allows %d s, want at least 120", budget)
			}

			pod := spec.SecurityContext
			if pod == nil {
				t.Fatal("no pod securityContext")
			}
			check(pod.RunAsNonRoot != nil && *pod.RunAsNonRoot, "pod runAsNonRoot not true")
			check(pod.RunAsUser != nil && *pod.RunAsUser != 0, "pod runAsUser not set to a user")
			check(pod.FSGroup != nil, "pod fsGroup not set: the volume would not be the user's")
			check(pod.SeccompProfile != nil && pod.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "pod seccompProfile not RuntimeDefault")
			sc := c.SecurityContext
			if sc == nil {
				t.Fatal("no container securityContext")
			}
			check(sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "container runAsNonRoot not true")
			check(sc.RunAsUser != nil && *sc.RunAsUser != 0, "container runAsUser not set to a user")
			check(sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem not true")
			check(sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "allowPrivilegeEscalation not false")
			check(sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0,
				"capabilities: want drop [ALL] and nothing added, have %+v", sc.Capabilities)
			check(spec.EnableServiceLinks != nil && !*spec.EnableServiceLinks, "enableServiceLinks not false")
			check(spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken, "automountServiceAccountToken not false")

			zones := false
			for _, tsc := range spec.TopologySpreadConstraints {
				zones = zones || tsc.TopologyKey == "topology.kubernetes.io/zone" && tsc.LabelSelector != nil &&
					tsc.LabelSelector.MatchLabels["app"] == "idserver"
			}
			check(zones, "no topologySpreadConstraint over topology.kubernetes.io/zone for app=idserver")

			req, lim := c.Resources.Requests, c.Resources.Limits
			check(!req.Cpu().IsZero() && !req.Memory().IsZero(), "resources: no cpu or memory request: %v", req)
			check(!lim.Memory().IsZero(), "resources: no memory limit: %v", lim)

			check(slices.Contains(c.Args, "--dir=/data"), "no --dir=/data: %v", c.Args)
			mounted := false
			for _, v := range c.VolumeMounts {
				mounted = mounted || v.MountPath == "/data" && !v.ReadOnly
			}
			check(mounted, "nothing writable mounted on /data (the root file system is read-only)")
			var join string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--join="); ok {
					join = v
				}
			}
			pods := strings.Split(join, ",")
			check(s.Spec.Replicas != nil && len(pods) == int(*s.Spec.Replicas), "--join names %d pods, replicas %v", len(pods), s.Spec.Replicas)
			for i, p := range pods {
				want := fmt.Sprintf("idserver-%d.idserver.$(POD_NAMESPACE).svc:6380", i)
				check(p == want, "--join entry %d is %q, want %q (pod 0 first)", i, p, want)
			}
		})
	}
}

// TestDisruptionBudget: one pod away at a time, of these pods.
func TestDisruptionBudget(t *testing.T) {
	m := load(t)
	p := m.pdbs[0]
	if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("maxUnavailable %v, want 1", p.Spec.MaxUnavailable)
	}
	if p.Spec.Selector == nil || p.Spec.Selector.MatchLabels["app"] != "idserver" {
		t.Errorf("selector %v, want app=idserver", p.Spec.Selector)
	}
}
