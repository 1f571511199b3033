// Package autopilot tests idserver as a StatefulSet would run it, real
// processes on 127.0.0.1 replaced, restarted, grown and shrunk under load
// while autopilot keeps the voters, and spread over regions with delays.
package autopilot

import (
	"testing"

	"idserver/internal/systest"
)

func TestMain(m *testing.M) { systest.Main(m) }
