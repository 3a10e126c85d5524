package packages

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Each manager says which indexes it would use, as the request's user and
// with the installer's environment: its own configuration is the truth
// (files of the user, of the system, variables), not envd's reading of it.
// A nil list means "do not check": the configuration names a local source
// (find-links, a file: repository) that may hold what is asked, or the
// manager works offline.

// configLimit bounds what a configuration listing may print.
const configLimit = 4 << 20

// defaultPipIndex is pip's index when its configuration names none.
const defaultPipIndex = "https://pypi.org/simple"

// pipIndexes are the indexes `pip install` would use: index-url (or
// PyPI), extra-index-url, and find-links when it names URLs, from `pip
// config list`.
func (t *target) pipIndexes(ctx context.Context) ([]index, error) {
	c := t.command("/", nil, t.exe, "-m", "pip", "config", "list")
	out, err := capture(ctx, "pip config list", c, configLimit)
	if err != nil {
		return nil, err
	}
	cfg := pipConfig(string(out))
	if truthy(cfg["no-index"]) {
		return nil, nil
	}
	urls := []string{cmp.Or(cfg["index-url"], defaultPipIndex)}
	urls = append(urls, strings.Fields(cfg["extra-index-url"])...)
	urls = append(urls, strings.Fields(cfg["find-links"])...)
	p := envProxies(envMap(c.env))
	if px := cfg["proxy"]; px != "" {
		p.http, p.https = px, px
	}
	idx, _ := remoteIndexes(p, urls)
	return idx, nil
}

// pipConfig reads `pip config list` (lines of section.name='value', the
// variables as :env:.name) into the values `pip install` sees: a
// variable over the [install] section over [global].
func pipConfig(out string) map[string]string {
	rank := map[string]int{"global": 1, "install": 2, ":env:": 3}
	cfg, at := map[string]string{}, map[string]int{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			continue
		}
		section, name := k[:i], strings.ReplaceAll(strings.ToLower(k[i+1:]), "_", "-")
		r := rank[section]
		if r == 0 || r < at[name] {
			continue
		}
		cfg[name], at[name] = pyString(v), r
	}
	return cfg
}

// pyString undoes Python's repr of a string ('x', or "x" when it holds a
// quote); anything else is returned as it is.
func pyString(s string) string {
	if len(s) < 2 || (s[0] != '\'' && s[0] != '"') || s[len(s)-1] != s[0] {
		return s
	}
	var b strings.Builder
	in := s[1 : len(s)-1]
	for i := 0; i < len(in); i++ {
		if in[i] == '\\' && i+1 < len(in) {
			i++
			switch in[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(in[i])
			}
			continue
		}
		b.WriteByte(in[i])
	}
	return b.String()
}

// truthy reads a boolean setting as pip and npm do.
func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "true", "yes", "on", "y", "t":
			return true
		}
	}
	return false
}

// defaultNpmRegistry is npm's registry when its configuration names none.
const defaultNpmRegistry = "https://registry.npmjs.org/"

// npmIndexes are the registries `npm install` would fetch names from:
// a scoped name's scope registry, else the registry, from `npm config list
// --json` in the project directory (so its .npmrc counts too). npm in
// offline or prefer-offline mode installs from its cache: not checked.
func (t *target) npmIndexes(ctx context.Context, names []string) ([]index, error) {
	c := t.command(t.where, nil, t.exe, "config", "list", "--json")
	out, err := capture(ctx, "npm config list", c, configLimit)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		return nil, fmt.Errorf("npm config list: %w", err)
	}
	if truthy(cfg["offline"]) || truthy(cfg["prefer-offline"]) {
		return nil, nil
	}
	str := func(k string) string { s, _ := cfg[k].(string); return s }
	registry := cmp.Or(str("registry"), defaultNpmRegistry)
	var urls []string
	for _, n := range names {
		u := registry
		if scope, _, ok := strings.Cut(n, "/"); ok && strings.HasPrefix(scope, "@") {
			u = cmp.Or(str(scope+":registry"), registry)
		}
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		urls = []string{registry}
	}
	// npm's proxy settings, else the environment's, as npm's agent does.
	p := envProxies(envMap(c.env))
	if px := str("proxy"); px != "" {
		p.http, p.https = px, px
	}
	if px := str("https-proxy"); px != "" {
		p.https = px
	}
	switch no := cfg["noproxy"].(type) {
	case string:
		p.no = cmp.Or(no, p.no)
	case []any:
		var hosts []string
		for _, h := range no {
			if s, ok := h.(string); ok && s != "" {
				hosts = append(hosts, s)
			}
		}
		if len(hosts) > 0 {
			p.no = strings.Join(hosts, ",")
		}
	}
	idx, _ := remoteIndexes(p, urls)
	return idx, nil
}

// rRepos is the repositories envd's R scripts install from: R's repos
// option (Rprofile.site sets it), or CRAN's cloud mirror where it is
// unset or left to be chosen (@CRAN@, which would ask).
const rRepos = `local({ r <- getOption("repos"); if (is.null(r) || any(r == "@CRAN@")) r <- c(CRAN = "https://cloud.r-project.org"); r })`

// rIndexes are the repositories install.packages would use.
func (t *target) rIndexes(ctx context.Context) ([]index, error) {
	c := t.command("/", nil, t.exe, "--no-init-file", "-e", `cat(`+rRepos+`, sep = "\n")`)
	out, err := capture(ctx, "R's repositories", c, configLimit)
	if err != nil {
		return nil, err
	}
	idx, _ := remoteIndexes(envProxies(envMap(c.env)), strings.Fields(string(out)))
	return idx, nil
}

// aptIndexes are the archives apt's sources name, reached through apt's
// proxy (Acquire::http::Proxy, Acquire::https::Proxy), else the
// environment's. A proxy chosen per host, or detected by a program, is
// not checked.
func (t *target) aptIndexes(ctx context.Context) ([]index, error) {
	exe, err := lookPath(APT, "apt-config")
	if err != nil {
		return nil, err
	}
	c := t.command("/", nil, exe, "dump")
	out, err := capture(ctx, "apt-config dump", c, configLimit)
	if err != nil {
		return nil, err
	}
	cfg := aptConfig(string(out))
	for k := range cfg {
		if strings.HasPrefix(k, "acquire::http::proxy::") || strings.HasPrefix(k, "acquire::https::proxy::") || strings.HasPrefix(k, "acquire::http::proxy-auto-detect") || strings.HasPrefix(k, "acquire::http::proxyautodetect") {
			return nil, nil
		}
	}
	etc := filepath.Join("/", cfg["dir"], cfg["dir::etc"])
	list := cmp.Or(cfg["dir::etc::sourcelist"], "sources.list")
	parts := cmp.Or(cfg["dir::etc::sourceparts"], "sources.list.d")
	if !filepath.IsAbs(list) {
		list = filepath.Join(etc, list)
	}
	if !filepath.IsAbs(parts) {
		parts = filepath.Join(etc, parts)
	}
	uris := aptSources(list, parts)
	p := envProxies(envMap(c.env))
	if px := cfg["acquire::http::proxy"]; px != "" {
		p.http, p.https = px, px
	}
	if px := cfg["acquire::https::proxy"]; px != "" {
		p.https = px
	}
	idx, _ := remoteIndexes(p, uris)
	return idx, nil
}

// aptConfig reads `apt-config dump` (Key::Sub "value";) into lower-cased
// keys.
func aptConfig(out string) map[string]string {
	cfg := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		v = strings.TrimSuffix(strings.TrimSpace(v), ";")
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		cfg[strings.ToLower(k)] = v
	}
	return cfg
}

// aptSources are the URIs of the enabled sources in list (one-line
// format) and in parts' *.list (one-line) and *.sources (deb822) files,
// as apt reads them.
func aptSources(list, parts string) []string {
	var uris []string
	add := func(u string) {
		if !slices.Contains(uris, u) {
			uris = append(uris, u)
		}
	}
	oneLine := func(p string) {
		f, err := os.Open(p)
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			fs := strings.Fields(line)
			if len(fs) < 2 || (fs[0] != "deb" && fs[0] != "deb-src") {
				continue
			}
			fs = fs[1:]
			if strings.HasPrefix(fs[0], "[") { // [ options ]
				for len(fs) > 0 && !strings.HasSuffix(fs[0], "]") {
					fs = fs[1:]
				}
				if len(fs) < 2 {
					continue
				}
				fs = fs[1:]
			}
			add(fs[0])
		}
	}
	deb822 := func(p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			return
		}
		for _, stanza := range strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n\n") {
			var kept []byte
			for line := range strings.Lines(stanza) {
				if !strings.HasPrefix(strings.TrimSpace(line), "#") {
					kept = append(kept, line...)
				}
			}
			d := dcf(kept)
			if strings.EqualFold(d["Enabled"], "no") {
				continue
			}
			for _, u := range strings.Fields(d["URIs"]) {
				add(u)
			}
		}
	}
	oneLine(list)
	entries, _ := os.ReadDir(parts)
	for _, e := range entries {
		name := e.Name()
		if strings.IndexFunc(name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
		}) >= 0 {
			continue // apt ignores such names
		}
		switch filepath.Ext(name) {
		case ".list":
			oneLine(filepath.Join(parts, name))
		case ".sources":
			deb822(filepath.Join(parts, name))
		}
	}
	return uris
}
