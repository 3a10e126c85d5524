package httpapi

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// testCertPEM is a self-signed CA certificate, PEM-encoded.
func testCertPEM(tb testing.TB) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fuzz CA"}, IsCA: true,
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0), BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// FuzzInitBody: any /init body is decoded as handleInit decodes it, and
// its fields checked as checkInit checks them (but the default user,
// looked up in /etc/passwd), without a panic. What is accepted can be
// used as it will be: environment variables execve takes, certificates
// that parse, a hyperloop address a hosts file can hold, NFS volumes
// whose export and mount point mount(8) cannot take for options and
// that stay out of the system's directories.
func FuzzInitBody(f *testing.F) {
	cert := testCertPEM(f)
	js, _ := json.Marshal(map[string]any{
		"envVars": map[string]string{"A": "1", "PATH": "/x"}, "accessToken": "tok", "defaultUser": "user",
		"defaultWorkdir": "/home/user", "timestamp": "2026-12-01T10:00:00.123456789Z",
		"caBundle": "# Mozilla's comment\n" + cert + "trailing text\n" + cert, "hyperloopIP": "192.0.2.1",
		"volumeMounts": []map[string]string{{"nfs_target": "10.0.0.1:/data", "path": "/mnt/data"}, {"nfs_target": "[fd00::1]:/", "path": "/home/user/v"}},
		"lifecycleID":  "life-1",
	})
	f.Add(js)
	for _, s := range []string{
		`{"envVars": {"": "x", "A=B": "y", "N\u0000": "z", "V": "nul\u0000"}}`,
		`{"caBundle": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}`,
		`{"caBundle": "-----BEGIN CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}`,
		`{"hyperloopIP": "fe80::1%eth0"}`, `{"hyperloopIP": "::ffff:10.0.0.1"}`, `{"hyperloopIP": "224.0.0.1"}`,
		`{"volumeMounts": [{"nfs_target": "-o:/x", "path": "/mnt/a"}, {"nfs_target": "h:/a,b", "path": "/etc/cron.d"}]}`,
		`{"volumeMounts": [{"nfs_target": "h:/a/../b", "path": "/mnt/a/"}, {"nfs_target": "[10.0.0.1]:/a", "path": "/proc/x"}]}`,
		`{"volumeMounts": [{"nfs_target": "h:/a", "path": "/mnt/x"}, {"nfs_target": "h:/b", "path": "/mnt/x"}], "lifecycleID": "\n"}`,
		`{"volumeMounts": null, "lifecycleID": "x"}`,
		`{"timestamp": "yesterday"}`, `[]`, `null`, ``, `{"envVars": {"A": 1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req initRequest
		if len(strings.TrimSpace(string(body))) > 0 && json.Unmarshal(body, &req) != nil {
			return // 400
		}
		if req.EnvVars != nil && checkEnvVars(*req.EnvVars) == nil {
			for name, value := range *req.EnvVars {
				if name == "" || strings.ContainsAny(name, "=\x00") || strings.Contains(value, "\x00") {
					t.Fatalf("envVars %q=%q accepted", name, value)
				}
			}
		}
		if req.CABundle != nil {
			if certs, err := parseCABundle(*req.CABundle); err == nil {
				if len(certs) == 0 || len(certs) > strings.Count(*req.CABundle, "-----BEGIN") {
					t.Fatalf("%d certificates from %q", len(certs), *req.CABundle)
				}
				var again bytes.Buffer
				for _, c := range certs {
					pem.Encode(&again, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
				}
				back, err := parseCABundle(again.String())
				if err != nil || !slices.EqualFunc(back, certs, func(a, b *x509.Certificate) bool { return a.Equal(b) }) {
					t.Fatalf("certificates written again read back as %d, %v", len(back), err)
				}
			}
		}
		if req.HyperloopIP != nil {
			if ip, err := parseHyperloopIP(*req.HyperloopIP); err == nil {
				if !ip.IsValid() || ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() || ip.Is4In6() ||
					strings.ContainsFunc(ip.String(), func(r rune) bool { return unicode.IsSpace(r) || r == '#' }) {
					t.Fatalf("hyperloopIP %q accepted as %v", *req.HyperloopIP, ip)
				}
				if !strings.HasPrefix(eventsAddress(ip), "http://") {
					t.Fatalf("eventsAddress(%v) = %q", ip, eventsAddress(ip))
				}
			}
		}
		var vols []volumeMount
		if req.VolumeMounts != nil {
			vols = *req.VolumeMounts
		}
		lifecycle := ""
		if req.LifecycleID != nil {
			lifecycle = *req.LifecycleID
		}
		if checkVolumes(vols, lifecycle) != nil {
			return
		}
		seen := map[string]bool{}
		for _, v := range vols {
			host, _, _ := strings.Cut(v.NFSTarget, ":/")
			switch {
			case host == "", strings.HasPrefix(v.NFSTarget, "-"), strings.ContainsAny(v.NFSTarget, ", \t\n"):
				t.Fatalf("nfs_target %q accepted", v.NFSTarget)
			case !filepath.IsAbs(v.Path) || filepath.Clean(v.Path) != v.Path || v.Path == "/" || strings.Contains(v.Path, ","):
				t.Fatalf("path %q accepted", v.Path)
			case seen[v.Path]:
				t.Fatalf("path %q accepted twice", v.Path)
			}
			seen[v.Path] = true
			for _, d := range append(append([]string{}, systemTrees...), sysTrees...) {
				if v.Path == d || strings.HasPrefix(v.Path, d+"/") {
					t.Fatalf("path %q accepted, in %s", v.Path, d)
				}
			}
		}
	})
}

// lineEnds is b with the carriage returns that end its lines removed:
// editHosts and editBundle read lines with a bufio.Scanner, which takes
// one off each line it reads, so a line ending in several loses one a
// pass.
func lineEnds(b []byte) string {
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	return strings.Join(lines, "\n")
}

// FuzzEditHosts: whatever /etc/hosts holds (root in the sandbox may write
// it), editHosts leaves events.e2b.local on one line, its last, at the
// hyperloop address, keeps every other name of every line, and changes
// nothing when applied again (but carriage returns: lineEnds).
func FuzzEditHosts(f *testing.F) {
	for _, s := range [][2]string{
		{"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n", "192.0.2.1"},
		{"10.0.0.9 events.e2b.local other # comment\n10.0.0.8\tevents.e2b.local\n", "fd00::1"},
		{"# only a comment events.e2b.local\r\n  \n\t10.0.0.1 a events.e2b.local b events.e2b.local", "10.0.0.1"},
		{"no newline at the end", "::ffff:10.0.0.2"},
		{"", "1.2.3.4"},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	f.Fuzz(func(t *testing.T, data []byte, addr string) {
		ip, err := parseHyperloopIP(addr)
		if err != nil {
			ip = netip.MustParseAddr("192.0.2.1")
		}
		out := editHosts(data, ip)
		if again := editHosts(out, ip); lineEnds(again) != lineEnds(out) {
			t.Fatalf("editHosts(%q) = %q, then %q", data, out, again)
		}
		names := func(b []byte) (all []string, events []int) {
			for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				entry, _, _ := strings.Cut(line, "#")
				fields := strings.Fields(strings.TrimSuffix(entry, "\r"))
				if len(fields) < 2 {
					continue
				}
				for _, n := range fields[1:] {
					if n == eventsHost {
						events = append(events, i)
					} else {
						all = append(all, n)
					}
				}
			}
			return all, events
		}
		lines := strings.Count(string(out), "\n")
		outNames, events := names(out)
		if !bytes.HasSuffix(out, []byte("\n"+ip.String()+"\t"+eventsHost+"\n")) && !bytes.Equal(out, []byte(ip.String()+"\t"+eventsHost+"\n")) || !slices.Equal(events, []int{lines - 1}) {
			t.Fatalf("editHosts(%q) = %q: %s on lines %v of %d", data, out, eventsHost, events, lines)
		}
		inNames, _ := names(data)
		if !slices.Equal(outNames, inNames) {
			t.Fatalf("editHosts(%q) = %q: names %q, were %q", data, out, outNames, inNames)
		}
	})
}

// FuzzEditBundle: whatever the CA bundle holds (root in the sandbox may
// write it), editBundle puts an /init's certificates in it once, between
// its markers, drops those of the /init before wherever they are, keeps
// every other line, and changes nothing when the same /init comes again
// (but carriage returns: lineEnds).
func FuzzEditBundle(f *testing.F) {
	cert := testCertPEM(f)
	der, _ := pem.Decode([]byte(cert))
	for _, s := range []string{
		"# Mozilla's bundle\n" + cert,
		caBegin + "\n" + cert + caEnd + "\n" + cert + "tail\n",
		caBegin + "\nnever ended\n",
		"-----BEGIN CERTIFICATE-----\ncut short",
		"  " + caBegin + "  \r\n" + caEnd + "\r\n",
		"",
	} {
		f.Add([]byte(s), der.Bytes, []byte("new certificate"))
	}
	f.Fuzz(func(t *testing.T, data, old, fresh []byte) {
		var olds [][]byte
		if len(old) > 0 {
			olds = append(olds, old)
		}
		var pems []byte
		if len(fresh) > 0 {
			pems = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fresh})
		}
		out := editBundle(data, olds, pems)
		// The same /init again: its certificates are the old ones now.
		var now [][]byte
		if len(fresh) > 0 {
			now = append(now, fresh)
		}
		if again := editBundle(out, now, pems); lineEnds(again) != lineEnds(out) {
			t.Fatalf("editBundle(%q) = %q, then %q", data, out, again)
		}
		if len(pems) > 0 && bytes.Count(out, []byte(caBegin+"\n"+string(pems)+caEnd+"\n")) != 1 {
			t.Fatalf("editBundle(%q) = %q: the certificates not once between the markers", data, out)
		}
	})
}
