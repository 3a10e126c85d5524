package ports_test

import (
	"testing"

	"github.com/envd-dev/envd/internal/ports/portstest"
)

func TestMain(m *testing.M) { portstest.Main(m) }
