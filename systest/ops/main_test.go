// Package ops tests idserver as a real process the way an operator runs
// it: flags and layouts, logs, metrics, TLS and certificates, the cluster
// secret, versions, and bounded memory under clients that do not read.
package ops

import (
	"testing"

	"idserver/internal/systest"
)

func TestMain(m *testing.M) { systest.Main(m) }
