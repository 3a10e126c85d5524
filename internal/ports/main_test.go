package ports_test

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/ports/portstest"
)

// holdFDsEnv runs the test binary as a helper that holds that many open
// descriptors (TestPrivateManyFDs).
const holdFDsEnv = "ENVD_PORTS_TEST_HOLD_FDS"

// held are the helper's descriptors.
var held []*os.File

func TestMain(m *testing.M) {
	if v := os.Getenv(holdFDsEnv); v != "" {
		n, _ := strconv.Atoi(v)
		for range n {
			f, err := os.Open(os.DevNull)
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			held = append(held, f) // not collected: a finalizer would close it
		}
		fmt.Println("ready")
		for {
			syscall.Pause()
		}
	}
	portstest.Main(m)
}
