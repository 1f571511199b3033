package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles idserver's cmd/idserver into a new temporary directory,
// from the idserver module wherever the calling test's module is (the
// bench module requires it through a replace), and returns the binary's
// path and a function that removes the directory. A TestMain calls it once.
// The binary records the checkout's Git revision (idserver --version),
// whatever GOFLAGS says of -buildvcs, unless Git cannot read the checkout.
func Build() (binary string, remove func(), err error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "idserver").Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list -m idserver: %v", err)
	}
	dir, err := os.MkdirTemp("", "idserver-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	binary = filepath.Join(dir, "idserver")
	goBuild := func(vcs string) ([]byte, error) {
		build := exec.Command("go", "build", "-buildvcs="+vcs, "-o", binary, "./cmd/idserver")
		build.Dir = strings.TrimSpace(string(out))
		return build.CombinedOutput()
	}
	msg, err := goBuild("auto")
	if err != nil && strings.Contains(string(msg), "-buildvcs=false") {
		msg, err = goBuild("false") // Git cannot read the checkout: no revision
	}
	if err != nil {
		os.Stderr.Write(msg)
		remove()
		return "", nil, fmt.Errorf("building idserver: %v", err)
	}
	return binary, remove, nil
}
