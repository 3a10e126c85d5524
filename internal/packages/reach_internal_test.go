package packages

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/testutil"
)

// TestLastError: a failure's message carries the one line of the
// manager's output that says why, from outputs the managers print.
func TestLastError(t *testing.T) {
	t.Parallel()
	retry := "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError(...)': /simple/tinydb/"
	for _, c := range []struct {
		m    Manager
		out  string
		want string
	}{
		{PIP, retry + "\nERROR: Could not find a version that satisfies the requirement tinydb (from versions: none)\nERROR: No matching distribution found for tinydb",
			"ERROR: No matching distribution found for tinydb"},
		{PIP, "Traceback (most recent call last):\nKeyError: 'x'", "KeyError: 'x'"},
		{NPM, "npm error code ECONNREFUSED\nnpm error syscall connect\nnpm error errno ECONNREFUSED\n" +
			"npm error FetchError: request to http://127.0.0.1:9/x failed, reason: connect ECONNREFUSED 127.0.0.1:9\n" +
			"npm error     at ClientRequest.<anonymous> (/usr/lib/node_modules/npm/node_modules/minipass-fetch/lib/index.js:130:14)\n" +
			"npm error }\nnpm error\nnpm error If you are behind a proxy, please make sure that the 'proxy' config is set properly.  See: 'npm help config'\n" +
			"npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log",
			"FetchError: request to http://127.0.0.1:9/x failed, reason: connect ECONNREFUSED 127.0.0.1:9"},
		{NPM, "npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/nope\nnpm error 404\nnpm error 404 Note that you can also install from a\n" +
			"npm error A complete log of this run can be found in: /root/.npm/_logs/x.log", "404 Not Found - GET https://registry.npmjs.org/nope"},
		{NPM, "npm ERR! code ETARGET\nnpm ERR! notarget No matching version found for left-pad@99.\nnpm ERR! A complete log of this run can be found in: x",
			"notarget No matching version found for left-pad@99."},
		{R, "Warning: package ‘tinydb’ is not available for this version of R\n\nA version of this package for your version of R might be available elsewhere,\n" +
			"envd: package ‘tinydb’ is not available for this version of R", "package ‘tinydb’ is not available for this version of R"},
		{APT, "Err:1 http://deb.debian.org/debian bookworm/main amd64 htop amd64 3.2.2-2\n  Temporary failure resolving 'deb.debian.org'\n" +
			"E: Failed to fetch http://deb.debian.org/debian/pool/main/h/htop/htop_3.2.2-2_amd64.deb  Temporary failure resolving 'deb.debian.org'\n" +
			"E: Unable to fetch some archives, maybe run apt-get update or try with --fix-missing?",
			"E: Failed to fetch http://deb.debian.org/debian/pool/main/h/htop/htop_3.2.2-2_amd64.deb  Temporary failure resolving 'deb.debian.org'"},
		{APT, "", ""},
	} {
		if got := lastError(c.m, c.out); got != c.want {
			t.Errorf("%s: lastError = %q\nwant %q", c.m, got, c.want)
		}
	}
}

// TestPipConfig: the values pip install sees, from `pip config list`: a
// variable over [install] over [global], names normalized, Python's
// quoting undone.
func TestPipConfig(t *testing.T) {
	t.Parallel()
	cfg := pipConfig(":env:.index_url='http://env/simple'\nglobal.index-url='http://global/simple'\ninstall.index-url='http://install/simple'\n" +
		"global.extra-index-url='http://a/simple http://b/simple'\nglobal.cert=\"it's\"\ninstall.no-index='1'\nfreeze.find-links='/x'\n")
	want := map[string]string{"index-url": "http://env/simple", "extra-index-url": "http://a/simple http://b/simple", "cert": "it's", "no-index": "1"}
	if len(cfg) != len(want) {
		t.Errorf("pipConfig = %q, want %q", cfg, want)
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("pipConfig[%s] = %q, want %q", k, cfg[k], v)
		}
	}
	if !truthy(cfg["no-index"]) || truthy("0") || !truthy(true) {
		t.Error("truthy")
	}
}

// TestAptSources: the URIs of enabled sources, in both formats, in the
// files apt reads.
func TestAptSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	list := filepath.Join(dir, "sources.list")
	parts := filepath.Join(dir, "sources.list.d")
	os.Mkdir(parts, 0o755)
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(list, "# comment\ndeb http://one/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] https://two/apt stable main # end\ndeb-src http://one/debian bookworm main\n")
	write(filepath.Join(parts, "a.sources"), "Types: deb\n# http://commented/out\nURIs: http://three/debian http://four/debian\nSuites: bookworm\n\nTypes: deb\nURIs: http://off/debian\nEnabled: no\n")
	write(filepath.Join(parts, "b.list.disabled"), "deb http://disabled/debian bookworm main\n")
	write(filepath.Join(parts, "c d.list"), "deb http://badname/debian bookworm main\n")
	want := []string{"http://one/debian", "https://two/apt", "http://three/debian", "http://four/debian"}
	if got := aptSources(list, parts); !slices.Equal(got, want) {
		t.Errorf("aptSources = %q, want %q", got, want)
	}
	cfg := aptConfig("Dir \"/\";\nDir::Etc \"etc/apt/\";\nAcquire::http::Proxy \"http://p:3128\";\n")
	if cfg["dir::etc"] != "etc/apt/" || cfg["acquire::http::proxy"] != "http://p:3128" {
		t.Errorf("aptConfig = %q", cfg)
	}
}

func TestBypassProxy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host, port, no string
		want           bool
	}{
		{"pypi.org", "443", "", false},
		{"pypi.org", "443", "*", true},
		{"files.pypi.org", "443", "example.com, .pypi.org", true},
		{"pypi.org", "443", "pypi.org", true},
		{"notpypi.org", "443", "pypi.org", false},
		{"10.1.2.3", "80", "10.0.0.0/8", true},
		{"127.0.0.1", "8080", "127.0.0.1:8080", true},
		{"127.0.0.1", "9", "127.0.0.1:8080", false},
	} {
		if got := bypassProxy(c.host, c.port, c.no); got != c.want {
			t.Errorf("bypassProxy(%s, %s, %q) = %v", c.host, c.port, c.no, got)
		}
	}
}

// TestUnreachable: an index is reachable when it takes a connection, or
// its proxy gets through; one that answers is enough; the message names
// each index and why.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A proxy that tunnels to nothing: it answers CONNECT with 502, and a
	// plain request for a closed port's URL with 502 too, else 200.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				status := "502 Bad Gateway"
				if req.Method == http.MethodConnect && req.Host == "good:443" || req.Method == http.MethodHead && req.URL.Host == "good" {
					status = "200 OK"
				}
				c.Write([]byte("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\n\r\n"))
			}()
		}
	}()
	open := "http://" + ln.Addr().String() + "/simple"
	closed := "http://" + testutil.ClosedAddr(t) + "/simple"
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	proxy := mustURL("http://" + ln.Addr().String())

	if why := unreachable(ctx, []index{{url: mustURL(open)}}); why != "" {
		t.Errorf("open: %s", why)
	}
	if why := unreachable(ctx, []index{{url: mustURL(closed)}, {url: mustURL(open)}}); why != "" {
		t.Errorf("one of two open: %s", why)
	}
	why := unreachable(ctx, []index{{url: mustURL(closed)}})
	if want := "no package index reachable at " + closed + ": connection refused"; why != want {
		t.Errorf("closed: %q, want %q", why, want)
	}
	for _, c := range []struct {
		url, want string
	}{
		{"https://good/simple", ""},
		{"http://good/simple", ""},
		{"https://bad/simple", "no package index reachable at https://bad/simple (through the proxy " + proxy.String() + "): the proxy answered 502 Bad Gateway"},
		{"http://bad/simple", "no package index reachable at http://bad/simple (through the proxy " + proxy.String() + "): the proxy answered 502 Bad Gateway"},
	} {
		if got := unreachable(ctx, []index{{url: mustURL(c.url), proxy: proxy}}); got != c.want {
			t.Errorf("through the proxy, %s: %q, want %q", c.url, got, c.want)
		}
	}
	// Credentials in an index's URL are not repeated.
	secret := "http://me:s3cret@" + strings.TrimPrefix(closed, "http://")
	if got := unreachable(ctx, []index{{url: mustURL(secret)}}); strings.Contains(got, "s3cret") || !strings.Contains(got, "connection refused") {
		t.Errorf("with credentials: %q", got)
	}
	// A name that does not resolve says so.
	dnsErr := &net.DNSError{Err: "no such host", Name: "pypi.invalid", IsNotFound: true}
	if got := netReason(&net.OpError{Op: "dial", Net: "tcp", Err: dnsErr}); got != "the name pypi.invalid does not resolve (no such host)" {
		t.Errorf("netReason(dns) = %q", got)
	}
}

// TestProxiesForURL: the environment's proxies, lower-case first, by
// scheme; NO_PROXY; SOCKS is not checked.
func TestProxiesForURL(t *testing.T) {
	t.Parallel()
	p := envProxies(map[string]string{"https_proxy": "p1:3128", "HTTPS_PROXY": "ignored:1", "HTTP_PROXY": "http://p2:8080", "no_proxy": "local.test"})
	u, _ := url.Parse("https://pypi.org/simple")
	if ix, err := p.forURL(u); err != nil || ix.proxy == nil || ix.proxy.Host != "p1:3128" {
		t.Errorf("https: %+v %v", ix, err)
	}
	u, _ = url.Parse("http://pypi.org/simple")
	if ix, err := p.forURL(u); err != nil || ix.proxy == nil || ix.proxy.Host != "p2:8080" {
		t.Errorf("http: %+v %v", ix, err)
	}
	u, _ = url.Parse("http://local.test/simple")
	if ix, err := p.forURL(u); err != nil || ix.proxy != nil {
		t.Errorf("no_proxy: %+v %v", ix, err)
	}
	if _, ok := remoteIndexes(proxies{https: "socks5://s:1080"}, []string{"https://pypi.org/simple"}); ok {
		t.Error("socks: checked")
	}
	if _, ok := remoteIndexes(proxies{}, []string{"https://pypi.org/simple", "/opt/wheels"}); ok {
		t.Error("with a local find-links: checked")
	}
	if idx, ok := remoteIndexes(proxies{}, []string{"https://pypi.org/simple", "https://x.test/simple"}); !ok || len(idx) != 2 {
		t.Errorf("two remote: %v %v", idx, ok)
	}
}
