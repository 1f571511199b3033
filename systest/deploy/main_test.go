package deploy

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"idserver/internal/testproc"
)

// binary is idserver, built once for the package.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // every test skips
	}
	bin, remove, err := testproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	remove()
	os.Exit(code)
}

// long skips a test under -short: each starts processes and waits for
// worker leases to run out.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts idserver processes and waits on leases (seconds); skipped under -short")
	}
}
