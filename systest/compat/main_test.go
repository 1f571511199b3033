// Package compat tests idserver as a real process against what Redis
// clients expect: redis-server's replies side by side, redis-cli,
// redis-benchmark, the client libraries of several languages, and
// clients across restarts.
package compat

import (
	"testing"

	"idserver/internal/systest"
)

func TestMain(m *testing.M) { systest.Main(m) }
