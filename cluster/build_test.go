package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"idserver/cluster"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	idnode "idserver/node"
)

// TestMembersShowTheirBuild: CLUSTER INFO on every member lists each
// member's version and commit, as the leader collects them; a member that
// sends none (one older than the field, here a node with no version)
// shows "unknown".
func TestMembersShowTheirBuild(t *testing.T) {
	testproc.Long(t)
	builds := map[string][2]string{"n1": {"1.0.0", "aaaa"}, "n2": {"1.1.0", "bbbb-dirty"}, "n3": {"", ""}}
	var nodes testcluster.Cluster
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		var via *testcluster.Node
		if i > 1 {
			via = nodes[0]
		}
		n, err := testcluster.Open(t, id, t.TempDir(), via, func(c *idnode.Config) { c.Version, c.Commit = builds[id][0], builds[id][1] })
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	want := func(id string) string {
		v, c := builds[id][0], builds[id][1]
		if v == "" {
			v, c = "unknown", "unknown"
		}
		return fmt.Sprintf("version=%s,commit=%s", v, c)
	}
	wait.For(t, 30*time.Second, "every node lists every member's build", func() (bool, string) {
		for _, n := range nodes {
			lines := memberLines(n.Cluster.Status())
			for id := range builds {
				if !strings.HasSuffix(lines[id], want(id)) {
					return false, fmt.Sprintf("node %s lists %s as %q, want it to end in %q", n.ID, id, lines[id], want(id))
				}
			}
		}
		return true, ""
	})
}

// memberLines is each member's line of CLUSTER INFO, by node ID.
func memberLines(st cluster.Status) map[string]string {
	out := map[string]string{}
	for _, p := range st.Pairs() {
		if strings.HasPrefix(p[0], "member") && strings.HasPrefix(p[1], "id=") {
			id, _, _ := strings.Cut(strings.TrimPrefix(p[1], "id="), ",")
			out[id] = p[1]
		}
	}
	return out
}
