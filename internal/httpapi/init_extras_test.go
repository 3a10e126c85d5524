package httpapi_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/mmds"
)

// testCA is a CA made for a test, and a server certificate it signed for
// 127.0.0.1.
type testCA struct {
	pem    string // the CA's certificate
	server tls.Certificate
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{
		pem:    string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		server: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
	}
}

// jsonString quotes s for a JSON body.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fileSum is a file's checksum, "" when it is missing.
func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return string(s[:])
}

// TestInitBadExtras: a bad caBundle, hyperloopIP, volumeMounts or
// lifecycleID is refused with a precise message, and nothing changes: not
// the env, not the trust store, not the hosts file.
func TestInitBadExtras(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{mounter: &recordMounter{}})
	ca := newTestCA(t, "bad extras")
	watched := []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/hosts", "/usr/local/share/ca-certificates/envd-init"}
	before := map[string]string{}
	for _, p := range watched {
		before[p] = fileSum(t, p)
	}
	key := "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"
	notCert := "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n"
	truncated := strings.Join(strings.Split(ca.pem, "\n")[:3], "\n") + "\n"
	tests := []struct {
		name, body string
		status     int
		msg        string
	}{
		{"caBundle not PEM", `{"caBundle":"hello"}`, 400, "caBundle: no PEM certificate in it"},
		{"caBundle with a key", `{"caBundle":` + jsonString(ca.pem+key) + `}`, 400, `caBundle: PEM block 2 is a "PRIVATE KEY", want CERTIFICATE`},
		{"caBundle not a certificate", `{"caBundle":` + jsonString(notCert) + `}`, 400, "caBundle: certificate 1 does not parse"},
		{"caBundle truncated", `{"caBundle":` + jsonString(ca.pem+truncated) + `}`, 400, "caBundle: PEM block 2 is not complete PEM"},
		{"caBundle broken then good", `{"caBundle":` + jsonString(truncated+ca.pem) + `}`, 400, "caBundle: PEM block 1 is not complete PEM"},
		{"caBundle not a string", `{"caBundle":1}`, 400, "invalid /init body"},
		{"hyperloopIP not an IP", `{"hyperloopIP":"events.example"}`, 400, `hyperloopIP "events.example" is not an IP address`},
		{"hyperloopIP with a zone", `{"hyperloopIP":"fe80::1%eth0"}`, 400, "has a zone"},
		{"hyperloopIP unspecified", `{"hyperloopIP":"0.0.0.0"}`, 400, "not an address a host can be reached at"},
		{"hyperloopIP multicast", `{"hyperloopIP":"224.0.0.1"}`, 400, "not an address a host can be reached at"},
		{"relative path", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"mnt/x"}]}`, 400, `volumeMounts[0]: path "mnt/x": want a clean absolute path`},
		{"unclean path", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/mnt/../etc"}]}`, 400, "want a clean absolute path"},
		{"empty path", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x"}]}`, 400, `path "": empty`},
		{"root", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/"}]}`, 400, "the root directory cannot be"},
		{"system dir", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/usr"}]}`, 400, "/usr is the system's, and so is everything in it: mount the volume elsewhere, such as /mnt/data"},
		{"home dir", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/home"}]}`, 400, "/home is the system's: mount the volume in a directory of its own under it, such as /home/data"},
		{"inside /etc", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/etc/ssl"}]}`, 400, `volumeMounts[0]: path "/etc/ssl": it is inside /etc, which the system needs: mount the volume in a directory of its own elsewhere, such as /mnt/data`},
		{"inside /usr", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/usr/local/bin"}]}`, 400, "it is inside /usr, which the system needs"},
		{"inside /var/lib", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/var/lib/dpkg"}]}`, 400, "it is inside /var/lib, which the system needs"},
		{"inside /lib64", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/lib64/x"}]}`, 400, "it is inside /lib64, which the system needs"},
		{"under /proc", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/proc/self/x"}]}`, 400, "nothing may be mounted in /proc"},
		{"twice", `{"volumeMounts":[{"nfs_target":"10.0.0.1:/x","path":"/mnt/x"},{"nfs_target":"10.0.0.1:/y","path":"/mnt/x"}]}`, 400, `volumeMounts[1]: path "/mnt/x" is in the list twice`},
		{"target without export", `{"volumeMounts":[{"nfs_target":"10.0.0.1","path":"/mnt/x"}]}`, 400, `nfs_target "10.0.0.1": want HOST:/EXPORT`},
		{"target without host", `{"volumeMounts":[{"nfs_target":":/x","path":"/mnt/x"}]}`, 400, "want HOST:/EXPORT"},
		{"target with a comma", `{"volumeMounts":[{"nfs_target":"h:/x,ro","path":"/mnt/x"}]}`, 400, "no spaces, commas or control characters"},
		{"target with a bad host", `{"volumeMounts":[{"nfs_target":"a_b:/x","path":"/mnt/x"}]}`, 400, `host "a_b" is not a host name`},
		{"target with a bad IPv6", `{"volumeMounts":[{"nfs_target":"[10.0.0.1]:/x","path":"/mnt/x"}]}`, 400, "a bracketed host must be an IPv6 address"},
		{"target unclean export", `{"volumeMounts":[{"nfs_target":"h:/a/../b","path":"/mnt/x"}]}`, 400, `export "/a/../b" is not a clean absolute path`},
		{"too many", `{"volumeMounts":[` + strings.TrimSuffix(strings.Repeat(`{"nfs_target":"h:/x","path":"/mnt/x"},`, 65), ",") + `]}`, 400, "volumeMounts: 65 mounts, at most 64"},
		{"lifecycleID with a newline", `{"lifecycleID":"a\nb"}`, 400, "lifecycleID: at most 256 bytes, no control characters"},
		{"lifecycleID too long", `{"lifecycleID":"` + strings.Repeat("l", 257) + `"}`, 400, "lifecycleID: at most 256 bytes"},
		{"volumeMounts not a list", `{"volumeMounts":{}}`, 400, "invalid /init body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each also carries an env var and a token: neither is applied.
			body := strings.Replace(tt.body, "{", `{"envVars":{"BAD":"1"},"accessToken":"never",`, 1)
			wantError(t, e.do(t, "POST", "/init", nil, hdr("Content-Type", "application/json"), strings.NewReader(body)), tt.status, tt.msg)
		})
	}
	if e.defs.Env()["BAD"] != "" || e.token.IsSet() {
		t.Error("a refused /init changed the env or the token")
	}
	for _, p := range watched {
		if fileSum(t, p) != before[p] {
			t.Errorf("a refused /init changed %s", p)
		}
	}
	// Empty strings change nothing, and are no error.
	if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"caBundle":"","hyperloopIP":""}`)); r.status != 204 {
		t.Errorf("empty caBundle and hyperloopIP: %d %s", r.status, r.body)
	}
	for _, p := range watched {
		if fileSum(t, p) != before[p] {
			t.Errorf("an /init of empty fields changed %s", p)
		}
	}
}

// recordMounter is a Mounter for tests: it records its calls, fails with
// fail, and mounts a tmpfs named after the export (in a test's own mount
// namespace) when tmpfs is set.
type recordMounter struct {
	mu       sync.Mutex
	calls    []string
	checkErr error
	fail     error
	mount    func(target, path string) error
}

func (m *recordMounter) Check() error { return m.checkErr }

func (m *recordMounter) Mount(ctx context.Context, target, path string) error {
	m.mu.Lock()
	m.calls = append(m.calls, target+" "+path)
	fail, mount := m.fail, m.mount
	m.mu.Unlock()
	if fail != nil {
		return fail
	}
	if mount != nil {
		return mount(target, path)
	}
	return nil
}

func (m *recordMounter) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// TestInitNoNFS: without a way to mount NFS, volumeMounts is refused (501,
// saying what to install) before anything changes.
func TestInitNoNFS(t *testing.T) {
	t.Parallel()
	m := &recordMounter{checkErr: errors.New("NFS volume mounts need mount.nfs (Debian's nfs-common)")}
	e := newEnv(t, envOpts{mounter: m})
	dir := t.TempDir()
	r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"envVars":{"A":"1"},"volumeMounts":[{"nfs_target":"nfs.internal:/data","path":"`+dir+`/vol"}]}`))
	wantError(t, r, 501, "volumeMounts: NFS volume mounts need mount.nfs (Debian's nfs-common)")
	if e.defs.Env()["A"] != "" || len(m.Calls()) != 0 {
		t.Errorf("a refused /init changed something: env %v, mounts %v", e.defs.Env(), m.Calls())
	}
	if _, err := os.Stat(dir + "/vol"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused /init made the mount point: %v", err)
	}
}

// fakeBoot is the host's metadata, as a test sets it.
type fakeBoot struct {
	mu   sync.Mutex
	hash string
	ok   bool
}

func (b *fakeBoot) set(hash string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hash, b.ok = hash, ok
}

func (b *fakeBoot) AccessTokenHash(context.Context) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hash, b.ok
}

// TestInitMMDSToken: once the host published a token's hash, /init takes
// that token only, whatever envd holds; the empty token's hash lets an
// /init without a token clear envd's.
func TestInitMMDSToken(t *testing.T) {
	t.Parallel()
	boot := &fakeBoot{}
	e := newEnv(t, envOpts{boot: boot})
	init := func(body string) response {
		return e.do(t, "POST", "/init", nil, nil, strings.NewReader(body))
	}
	// No hash yet: the first token is taken.
	if r := init(`{"accessToken":"first"}`); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// The host publishes the hash of another token (a resumed sandbox):
	// the old token is refused, the new one taken.
	boot.set(mmds.HashToken("second"), true)
	wantError(t, init(`{"accessToken":"first","envVars":{"X":"1"}}`), 401, "access token validation failed: the token is not the one whose hash the host published (MMDS accessTokenHash)")
	wantError(t, init(`{"envVars":{"X":"1"}}`), 401, "access token reset not authorized: the host's metadata (MMDS) names a token and this /init carries none")
	wantError(t, init(`{"accessToken":"third"}`), 401, "access token validation failed")
	if !e.token.Match("first") || e.defs.Env()["X"] != "" {
		t.Fatal("a refused /init changed the token or the env")
	}
	if r := init(`{"accessToken":"second","envVars":{"X":"2"}}`); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !e.token.Match("second") || e.defs.Env()["X"] != "2" {
		t.Fatal("the published token was not taken")
	}
	// The hash of the empty token authorizes an /init without one, which
	// clears the token.
	boot.set(mmds.HashToken(""), true)
	wantError(t, init(`{"accessToken":"second"}`), 401, "access token validation failed")
	if r := init(`{}`); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if e.token.IsSet() {
		t.Error("the token was not cleared")
	}
	// A hash that is not SHA-512 hex matches nothing.
	boot.set("not-a-hash", true)
	wantError(t, init(`{"accessToken":"x"}`), 401, "the host's metadata (MMDS) is unusable: accessTokenHash is not a SHA-512 digest in hex")
	wantError(t, init(`{}`), 401, "unusable")
	// Upper case hex is the same hash.
	boot.set(strings.ToUpper(mmds.HashToken("fourth")), true)
	if r := init(`{"accessToken":"fourth"}`); r.status != 204 || !e.token.Match("fourth") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// Without a hash again (the metadata unknown): the token envd holds.
	boot.set("", false)
	wantError(t, init(`{"accessToken":"fifth"}`), 401, "access token validation failed")
	if r := init(`{"accessToken":"fourth"}`); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
}
