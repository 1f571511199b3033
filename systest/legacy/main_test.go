package legacy

import (
	"testing"

	"idserver/internal/systest"
)

func TestMain(m *testing.M) { systest.Main(m) }
