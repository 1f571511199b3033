package ops

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"idserver/internal/systest"
	"idserver/internal/testproc"
)

// headCommit is the Git revision of the checkout the binary was built from
// (testproc.Build builds it from there); the test is skipped without Git.
func headCommit(t *testing.T) string {
	t.Helper()
	git := testproc.Need(t, "git")
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "idserver").Output()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(git, "-C", strings.TrimSpace(string(dir)), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no Git revision to compare with (git rev-parse HEAD: %v): test from a Git checkout", err)
	}
	return strings.TrimSpace(string(out))
}

// builtVersion is what --version says: the version and the commit.
func builtVersion(t *testing.T) (version, commit string) {
	t.Helper()
	code, out := systest.RunToExit(t, "--version")
	m := regexp.MustCompile(`^idserver (\S+) commit (\S+) go\S+ \S+/\S+\n$`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	return m[1], m[2]
}

// TestVersionNamesTheCommit: a binary built from a checkout says, in
// --version and INFO server, the commit it was built from.
func TestVersionNamesTheCommit(t *testing.T) {
	head := headCommit(t)
	version, commit := builtVersion(t)
	if strings.TrimSuffix(commit, "-dirty") != head {
		t.Fatalf("--version names commit %q, the checkout is at %s", commit, head)
	}
	info, err := systest.StartProc(t, t.TempDir()).Client().Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	dirty := "0"
	if strings.HasSuffix(commit, "-dirty") {
		dirty = "1"
	}
	for _, line := range []string{"idserver_version:" + version, "idserver_git_sha1:" + head, "idserver_git_dirty:" + dirty} {
		if !strings.Contains(info, line+"\r\n") {
			t.Fatalf("INFO server lacks %q:\n%s", line, info)
		}
	}
}

// TestClusterInfoNamesEachMembersBuild: CLUSTER INFO on each of three
// processes names every member's version and commit.
func TestClusterInfoNamesEachMembersBuild(t *testing.T) {
	version, commit := builtVersion(t)
	members := systest.StartMembers(t, 3)
	want := ",version=" + version + ",commit=" + commit
	for _, m := range members {
		rdb := m.P.Client()
		var listed []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			info := systest.ClusterInfo(t, rdb)
			listed = listed[:0]
			for _, k := range []string{"member0", "member1", "member2"} {
				if strings.HasSuffix(info[k], want) {
					listed = append(listed, info[k])
				}
			}
			if len(listed) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CLUSTER INFO on %s does not name every member's build %q within 30s: %v", m.Port, want, info)
			}
		}
	}
}
