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
	build := exec.Command("go", "build", "-o", binary, "./cmd/idserver")
	build.Dir = strings.TrimSpace(string(out))
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		remove()
		return "", nil, fmt.Errorf("building idserver: %v", err)
	}
	return binary, remove, nil
}
