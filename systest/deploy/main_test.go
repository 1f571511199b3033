package deploy

import (
	"testing"

	"idserver/internal/systest"
)

func TestMain(m *testing.M) { systest.Main(m) }

// long skips a test under -short: each starts processes and waits for
// worker leases to run out.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts idserver processes and waits on leases (seconds); skipped under -short")
	}
}
