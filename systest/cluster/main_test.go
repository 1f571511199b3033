// Package cluster tests idserver clusters as real processes on 127.0.0.1:
// joins and refusals, leader loss and quorum loss, damaged and
// restored data directories, and clock jumps.
package cluster

import (
	"testing"

	"idserver/internal/systest"
)

func TestMain(m *testing.M) { systest.Main(m) }
