package httpapi_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/testutil"
)

// generated is size bytes of deterministic, non-repeating data, made on the
// fly so the source is never stored: a random 1 MiB block with the block's
// number stamped in front of each copy.
type generated struct {
	block []byte
	size  int64
	off   int64
}

func newGenerated(size int64) *generated {
	b := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return &generated{block: b, size: size}
}

func (g *generated) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && g.off < g.size {
		in := int(g.off % int64(len(g.block)))
		if in == 0 {
			binary.LittleEndian.PutUint64(g.block, uint64(g.off/int64(len(g.block))))
		}
		c := copy(p[n:], g.block[in:])
		c = int(min(int64(c), g.size-g.off))
		n += c
		g.off += int64(c)
	}
	return n, nil
}

// startEnvd builds cmd/envd and runs it on a port the kernel picks; it
// returns once envd logged that it started (every listener open), and is
// stopped with SIGTERM at the end of the test.
func startEnvd(t *testing.T) (url string, pid int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "envd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/envd")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	log := &startLog{started: make(chan struct{})}
	cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", "0", "-code-port", "0", "-no-jupyter", "-default-user", "user")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("envd exited with %v\n%s", err, log)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("envd did not stop on SIGTERM\n%s", log)
		}
	})
	select {
	case <-log.started:
	case err := <-exited:
		exited <- err
		t.Fatalf("envd exited at start: %v\n%s", err, log)
	case <-time.After(30 * time.Second):
		t.Fatalf("envd did not start\n%s", log)
	}
	m := regexp.MustCompile(`msg=listening addr=(\S+)`).FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("envd logged no address\n%s", log)
	}
	return "http://" + m[1], cmd.Process.Pid
}

// startLog collects envd's log and closes started once envd logged that it
// started.
type startLog struct {
	started chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer // guarded by mu
	seen bool         // guarded by mu: started is closed
}

func (l *startLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if !l.seen && strings.Contains(l.buf.String(), `msg="envd started"`) {
		l.seen = true
		close(l.started)
	}
	return len(p), nil
}

func (l *startLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// peakRSS is VmHWM of pid, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// A 5 GiB file up and down through the real daemon, which streams it with
// memory that does not grow with the file.
func TestFiveGiBTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 5 GiB transfer")
	}
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const size = 5 << 30
	const maxRSS = 64 << 20
	dir := testutil.WorkDir(t)
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) == nil && st.Bavail*uint64(st.Bsize) < size+(2<<30) {
		t.Skip("not enough free disk space for 5 GiB")
	}
	url, pid := startEnvd(t)
	target := dir + "/big.bin"
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer hc.CloseIdleConnections()

	want := sha256.New()
	start := time.Now()
	req, _ := http.NewRequest("POST", url+"/files?path="+target, io.TeeReader(newGenerated(size), want))
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	t.Logf("upload: %.0f MB/s", float64(size)/time.Since(start).Seconds()/1e6)
	sum := hex.EncodeToString(want.Sum(nil))

	f, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	f.Close()
	if err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != sum {
		t.Fatalf("written file: %d bytes (want %d), checksum match %v, %v", n, int64(size), hex.EncodeToString(h.Sum(nil)) == sum, err)
	}

	start = time.Now()
	res, err = hc.Get(url + "/files?path=" + target)
	if err != nil {
		t.Fatal(err)
	}
	h.Reset()
	n, err = io.Copy(h, res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || n != size || hex.EncodeToString(h.Sum(nil)) != sum {
		t.Fatalf("download: status %d, %d bytes, checksum match %v, %v", res.StatusCode, n, hex.EncodeToString(h.Sum(nil)) == sum, err)
	}
	t.Logf("download: %.0f MB/s", float64(size)/time.Since(start).Seconds()/1e6)
	rss := peakRSS(t, pid)
	t.Logf("envd peak RSS: %.1f MiB", float64(rss)/(1<<20))
	if rss > maxRSS {
		t.Errorf("envd's peak RSS %.1f MiB, want under %d MiB", float64(rss)/(1<<20), maxRSS>>20)
	}
	os.Remove(target)
}

// rss is VmRSS of pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// The real daemon refuses a 64 MiB unary Connect body with
// resource_exhausted and never holds it: its peak RSS grows by far less
// than the body (it grew by twice the body before Connect messages were
// capped).
func TestDaemonRefusesHugeConnectBody(t *testing.T) {
	t.Parallel()
	url, pid := startEnvd(t)
	const size = 64 << 20
	before := rss(t, pid)
	req, _ := http.NewRequest("POST", url+"/process.Process/List", newGenerated(size))
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"code":"resource_exhausted"`) {
		t.Errorf("%d %s; want 429 resource_exhausted", res.StatusCode, body)
	}
	peak := peakRSS(t, pid)
	t.Logf("envd RSS %.1f MiB before, peak %.1f MiB after a %d MiB body", float64(before)/(1<<20), float64(peak)/(1<<20), size>>20)
	if grew := peak - before; grew > size/2 {
		t.Errorf("envd's peak RSS grew by %.1f MiB for a %d MiB body", float64(grew)/(1<<20), size>>20)
	}
}
