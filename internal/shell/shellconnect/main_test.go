package shellconnect_test

import (
	"testing"

	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestMain: see processtest.Main.
func TestMain(m *testing.M) { processtest.Main(m) }
