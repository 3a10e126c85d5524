package reaper_test

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/reaper"
)

// TestJupyterServerThroughReaper: in a subreaper (this test binary, as envd),
// the Jupyter supervisor learns how its server ended. A server started and
// waited for with exec.Cmd would race the reap loop for its status and lose
// it ("waitid: no child processes").
//
// Other children end all the while, so that the reap loop is busy.
func TestJupyterServerThroughReaper(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ch, err := reaper.Start(exec.Command("/bin/true")); err == nil {
					<-ch
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for i := range 20 {
		s := jupyter.New(jupyter.Options{
			Command:    []string{"/bin/sh", "-c", "exit 3", "sh"},
			MinBackoff: time.Millisecond,
			MaxBackoff: time.Millisecond,
			Logger:     slog.New(slog.DiscardHandler),
		})
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err := s.Start(ctx)
		cancel()
		if stopErr := s.Stop(context.Background()); stopErr != nil {
			t.Errorf("run %d: Stop: %v", i, stopErr)
		}
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("run %d: start error = %v, want one saying the server ended with exit status 3", i, err)
		}
	}
}
