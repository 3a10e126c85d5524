package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
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
	dir := testutil.WorkDir(t)
	target := dir + "/out.txt"
	testutil.WriteFile(t, dir+"/reg", "data", 0o644)
	if err := syscall.Mkfifo(dir+"/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(dir+"/fifo", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // first of the cleanups: lets a hung handler end
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			os.Link(dir+"/reg", dir+"/tmp1")
			os.Rename(dir+"/tmp1", target)
			os.Link(dir+"/fifo", dir+"/tmp2")
			os.Rename(dir+"/tmp2", target)
		}
	}()
	defer func() { stop.Store(true); <-done }()
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
