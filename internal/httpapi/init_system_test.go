package httpapi_test

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nsVar marks a test binary re-executed in namespaces of its own: its
// value is the test to run there.
const nsVar = "ENVD_TEST_IN_NAMESPACE"

// inNamespace runs the calling test again in a re-executed test binary,
// in new mount, network and PID namespaces (unshare -mnpf), and returns
// false: the caller returns at once. In that binary it prepares the
// namespaces (private copies of the trust store and the hosts file,
// loopback up) and returns true: the caller then changes the machine
// freely; when the test ends, the namespaces and everything in them go.
func inNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(nsVar) == t.Name() {
		prepareNamespace(t)
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes namespaces")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-mnpf", "--mount-proc", "--kill-child",
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), nsVar+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in its namespaces: %v\n%s", t.Name(), err, out)
	}
	t.Logf("in its namespaces:\n%s", out)
	return false
}

// prepareNamespace gives the namespace tmpfs copies of what /init
// changes, so that the real files stay as they are, and loopback.
func prepareNamespace(t *testing.T) {
	t.Helper()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make the mounts private: %v", err)
	}
	scratch := t.TempDir()
	if err := unix.Mount("tmpfs", scratch, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detachUnder(scratch) })
	for i, dir := range []string{"/etc/ssl", "/usr/local/share/ca-certificates"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(scratch, "d"+string(rune('0'+i)))
		if _, err := exec.Command("cp", "-a", dir+"/.", cp+"/").CombinedOutput(); err != nil {
			os.MkdirAll(cp, 0o755)
			if out, err := exec.Command("cp", "-a", dir+"/.", cp+"/").CombinedOutput(); err != nil {
				t.Fatalf("copy %s: %v %s", dir, err, out)
			}
		}
		if err := unix.Mount(cp, dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s: %v", dir, err)
		}
	}
	// /etc/hosts as in a container: a file mounted on its own.
	hosts := filepath.Join(scratch, "hosts")
	b, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(hosts, b, 0o644)
	if err := unix.Mount(hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind /etc/hosts: %v", err)
	}
	// Loopback up.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("loopback up: %v", err)
	}
}

// detachUnder detaches every mount at or under root, the deepest first, so
// that a TempDir can be removed.
func detachUnder(root string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == root || strings.HasPrefix(f[4], root+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		unix.Unmount(points[i], unix.MNT_DETACH)
	}
}

// certCount is how many different certificates a bundle holds.
func certCount(t *testing.T, path string) int {
	t.Helper()
	rest := []byte(read(t, path))
	seen := map[string]bool{}
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return len(seen)
		}
		seen[string(b.Bytes)] = true
	}
}

// clientEnv is an environment for curl and Python that trusts the system's
// store only, and uses no proxy.
func clientEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// trusted tells whether curl and Python, started now, trust url's
// certificate; it fails the test when they disagree.
func trusted(t *testing.T, url string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	curl := exec.CommandContext(ctx, "curl", "-sS", "-o", "/dev/null", "--max-time", "60", url)
	curl.Env = clientEnv()
	curlOut, curlErr := curl.CombinedOutput()
	py := exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=60).read()", url)
	py.Env = clientEnv()
	pyOut, pyErr := py.CombinedOutput()
	if (curlErr == nil) != (pyErr == nil) {
		t.Fatalf("curl and Python disagree on %s: curl %v %s; python %v %s", url, curlErr, curlOut, pyErr, pyOut)
	}
	if curlErr != nil && (!strings.Contains(string(curlOut), "certificate") || !strings.Contains(string(pyOut), "CERTIFICATE_VERIFY_FAILED")) {
		t.Fatalf("curl and Python failed, not for the certificate: curl %v %s; python %v %s", curlErr, curlOut, pyErr, pyOut)
	}
	return curlErr == nil
}

func tlsServer(t *testing.T, ca testCA) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // clients refusing the certificate
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestInitCABundle: curl and Python started after /init trust a server
// whose CA came in caBundle, and not before; another caBundle replaces it
// and leaves the system's certificates alone; sending the same again
// writes nothing.
func TestInitCABundle(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	e := newEnv(t, envOpts{})
	ca1, ca2, ca3 := newTestCA(t, "envd test CA 1"), newTestCA(t, "envd test CA 2"), newTestCA(t, "envd test CA 3")
	url1, url2, url3 := tlsServer(t, ca1), tlsServer(t, ca2), tlsServer(t, ca3)
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	systemCerts := certCount(t, bundle)
	if trusted(t, url1) || trusted(t, url2) {
		t.Fatal("the test CAs are trusted before /init")
	}
	init := func(body string) {
		t.Helper()
		if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(body)); r.status != 204 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// Two certificates, with a comment between them as bundles have.
	init(`{"caBundle":` + jsonString("# first\n"+ca1.pem+"# second\n"+ca2.pem) + `}`)
	if !trusted(t, url1) || !trusted(t, url2) || trusted(t, url3) {
		t.Fatal("after /init: want CA 1 and 2 trusted, 3 not")
	}
	if got := certCount(t, bundle); got != systemCerts+2 {
		t.Errorf("the bundle has %d certificates, want the system's %d and 2", got, systemCerts)
	}
	files, _ := filepath.Glob("/usr/local/share/ca-certificates/envd-init/*.crt")
	if len(files) != 2 {
		t.Errorf("update-ca-certificates' files: %v", files)
	}
	st, _ := os.Stat(bundle)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v", st.Mode())
	}
	// The same again: nothing written.
	sum := fileSum(t, bundle)
	mtime := st.ModTime()
	init(`{"caBundle":` + jsonString(ca1.pem+ca2.pem) + `}`)
	if st, _ := os.Stat(bundle); fileSum(t, bundle) != sum || !st.ModTime().Equal(mtime) {
		t.Error("the same caBundle again rewrote the bundle")
	}
	// Another replaces ours.
	init(`{"caBundle":` + jsonString(ca3.pem) + `}`)
	if trusted(t, url1) || trusted(t, url2) || !trusted(t, url3) {
		t.Fatal("after another /init: want CA 3 trusted only")
	}
	if got := certCount(t, bundle); got != systemCerts+1 {
		t.Errorf("the bundle has %d certificates, want the system's %d and 1", got, systemCerts)
	}
	// update-ca-certificates (a package install) rebuilds the bundle from
	// the files, without our markers: the next caBundle still replaces
	// ours, and the system's are kept.
	if out, err := exec.Command("update-ca-certificates", "--hooksdir", t.TempDir()).CombinedOutput(); err != nil {
		t.Fatalf("update-ca-certificates: %v %s", err, out)
	}
	if !trusted(t, url3) {
		t.Fatal("CA 3 lost by update-ca-certificates")
	}
	afterUpdate := certCount(t, bundle)
	init(`{"caBundle":` + jsonString(ca1.pem) + `}`)
	if !trusted(t, url1) || trusted(t, url3) {
		t.Fatal("after update-ca-certificates and another /init: want CA 1 trusted only")
	}
	if got := certCount(t, bundle); got != afterUpdate {
		t.Errorf("the bundle has %d certificates, want %d (CA 3 replaced by CA 1)", got, afterUpdate)
	}
}

// TestInitHyperloop: hyperloopIP puts events.e2b.local in /etc/hosts (a
// file mounted on its own, as in a container) and E2B_EVENTS_ADDRESS in
// every process's env; again the same changes nothing, another address
// replaces it, and other names keep their lines.
func TestInitHyperloop(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	e := newEnv(t, envOpts{})
	os.WriteFile("/etc/hosts", []byte("127.0.0.1\tlocalhost\n10.9.9.9\tevents.e2b.local other.local # kept\n"), 0o644)
	init := func(ip string) {
		t.Helper()
		if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"hyperloopIP":"`+ip+`","envVars":{"A":"1"}}`)); r.status != 204 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	init("192.0.2.10")
	want := "127.0.0.1\tlocalhost\n10.9.9.9\tother.local # kept\n192.0.2.10\tevents.e2b.local\n"
	if got := read(t, "/etc/hosts"); got != want {
		t.Errorf("/etc/hosts:\n%s\nwant\n%s", got, want)
	}
	if env := e.defs.Env(); env["E2B_EVENTS_ADDRESS"] != "http://192.0.2.10" || env["A"] != "1" {
		t.Errorf("env %v", env)
	}
	// The name resolves so for a new process.
	out, err := exec.Command("getent", "hosts", "events.e2b.local").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "192.0.2.10") {
		t.Errorf("getent: %v %s", err, out)
	}
	st, _ := os.Stat("/etc/hosts")
	init("192.0.2.10")
	if st2, _ := os.Stat("/etc/hosts"); !st2.ModTime().Equal(st.ModTime()) || read(t, "/etc/hosts") != want {
		t.Error("the same hyperloopIP again rewrote /etc/hosts")
	}
	// A later /init's envVars keep it.
	if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"envVars":{"B":"2"}}`)); r.status != 204 || e.defs.Env()["E2B_EVENTS_ADDRESS"] != "http://192.0.2.10" {
		t.Errorf("envVars dropped E2B_EVENTS_ADDRESS: %d %v", r.status, e.defs.Env())
	}
	init("2001:db8::7")
	want = "127.0.0.1\tlocalhost\n10.9.9.9\tother.local # kept\n2001:db8::7\tevents.e2b.local\n"
	if got := read(t, "/etc/hosts"); got != want {
		t.Errorf("/etc/hosts:\n%s\nwant\n%s", got, want)
	}
	if got := e.defs.Env()["E2B_EVENTS_ADDRESS"]; got != "http://[2001:db8::7]" {
		t.Errorf("E2B_EVENTS_ADDRESS %q", got)
	}
}

// TestInitVolumes: volumeMounts mounts each export at its path (a tmpfs
// named after the export stands in for NFS: no NFS server or client can
// run here), keeps a mount of the same lifecycle, replaces one of an older
// lifecycle, and refuses a path where something else is mounted.
func TestInitVolumes(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	m := &recordMounter{mount: func(target, path string) error {
		return unix.Mount(target, path, "tmpfs", 0, "size=1m")
	}}
	e := newEnv(t, envOpts{mounter: m})
	dir := t.TempDir()
	t.Cleanup(func() { detachUnder(dir) })
	a, b := dir+"/vol/a", dir+"/vol/b"
	body := func(lifecycle string) string {
		return `{"lifecycleID":"` + lifecycle + `","volumeMounts":[{"nfs_target":"nfs.internal:/a","path":"` + a + `"},{"nfs_target":"[fd00::1]:/b","path":"` + b + `"}]}`
	}
	init := func(body string) response {
		return e.do(t, "POST", "/init", nil, nil, strings.NewReader(body))
	}
	source := func(path string) string {
		t.Helper()
		out, _ := exec.Command("findmnt", "-n", "-o", "SOURCE", "--mountpoint", path).Output()
		return strings.TrimSpace(string(out))
	}
	if r := init(body("life-1")); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if source(a) != "nfs.internal:/a" || source(b) != "[fd00::1]:/b" {
		t.Fatalf("mounts: %q %q", source(a), source(b))
	}
	testWrite := func() {
		os.WriteFile(a+"/marker", []byte("x"), 0o644)
	}
	testWrite()
	// The same lifecycle: nothing is remounted.
	if r := init(body("life-1")); r.status != 204 || len(m.Calls()) != 2 {
		t.Fatalf("%d %s, calls %v", r.status, r.body, m.Calls())
	}
	if _, err := os.Stat(a + "/marker"); err != nil {
		t.Error("the same lifecycle remounted")
	}
	// A new lifecycle: each replaced, once (not stacked).
	if r := init(body("life-2")); r.status != 204 || len(m.Calls()) != 4 {
		t.Fatalf("%d %s, calls %v", r.status, r.body, m.Calls())
	}
	if _, err := os.Stat(a + "/marker"); !errors.Is(err, os.ErrNotExist) {
		t.Error("a new lifecycle did not replace the mount")
	}
	if out, _ := exec.Command("findmnt", "-n", "--mountpoint", a).Output(); strings.Count(string(out), "\n") != 1 {
		t.Errorf("mounts stacked at %s:\n%s", a, out)
	}
	// Something else mounted where a volume goes: 409, nothing mounted.
	other := dir + "/other"
	os.MkdirAll(other, 0o755)
	if err := unix.Mount("someone", other, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	r := init(`{"volumeMounts":[{"nfs_target":"h:/c","path":"` + dir + `/vol/c"},{"nfs_target":"h:/o","path":"` + other + `"}]}`)
	wantError(t, r, 409, "volumeMounts[1]: "+other+" is already the mount point of a tmpfs filesystem (someone) that envd did not mount")
	if len(m.Calls()) != 4 || source(other) != "someone" {
		t.Errorf("a refused /init mounted: %v", m.Calls())
	}
	// A mount point with a symbolic link on its way: refused.
	os.Mkdir(dir+"/elsewhere", 0o755)
	os.Symlink(dir+"/elsewhere", dir+"/link")
	r = init(`{"volumeMounts":[{"nfs_target":"h:/l","path":"` + dir + `/link/x"}]}`)
	wantError(t, r, 500, "volumeMounts: mount h:/l at "+dir+"/link/x: the mount point must have no symbolic link on its way ("+dir+"/link is one)")
	if _, err := os.Stat(dir + "/elsewhere/x"); !errors.Is(err, os.ErrNotExist) {
		t.Error("a directory was made through the link")
	}
	os.WriteFile(dir+"/file", nil, 0o644)
	r = init(`{"volumeMounts":[{"nfs_target":"h:/l","path":"` + dir + `/file/x"}]}`)
	wantError(t, r, 500, "the mount point must be a directory ("+dir+"/file is not one)")
	// A mount that fails: the error says why; the old mount is gone, and
	// the next /init of that lifecycle mounts again.
	m.mu.Lock()
	m.fail = errors.New("mount.nfs: Connection refused")
	m.mu.Unlock()
	r = init(body("life-3"))
	wantError(t, r, 500, "volumeMounts: mount nfs.internal:/a at "+a+": mount.nfs: Connection refused")
	if source(a) != "" {
		t.Errorf("the old lifecycle's mount is left: %q", source(a))
	}
	m.mu.Lock()
	m.fail = nil
	m.mu.Unlock()
	if r := init(body("life-3")); r.status != 204 || source(a) != "nfs.internal:/a" || source(b) != "[fd00::1]:/b" {
		t.Fatalf("%d %s: %q %q", r.status, r.body, source(a), source(b))
	}
}
