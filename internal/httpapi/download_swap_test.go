package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/testutil"
)

// Sandbox code swapping a FIFO for the file being downloaded, between
// envd's stat and its open, must not leave the download hanging: with the
// FIFO's write end held open, a gzip download read it forever.
func TestDownloadOfSwappedFIFOEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	target := testutil.WorkDir(t) + "/out.txt"
	testutil.SwapFIFO(t, target) // its end lets a hung handler end
	for i := range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/files?path="+target, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		res, err := e.hc.Do(req)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		hung := ctx.Err() != nil
		cancel()
		if hung {
			t.Fatalf("download %d still had not ended after 5 s: %v", i, err)
		}
	}
}
