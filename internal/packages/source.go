package packages

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/envd-dev/envd/internal/identity"
)

// source is a local source of packages, as a request gives it.
type source struct {
	path string
	dir  bool // a directory (pip: --find-links)
	// name and version are what the file holds, when envd can tell
	// (always but for an sdist whose file name it cannot split).
	name, version string
}

// sourceKinds says which files each manager installs, for messages.
var sourceKinds = map[Manager]string{
	PIP: "a wheel (.whl) or an sdist (.tar.gz, .zip), or a directory of them",
	NPM: "an npm tarball (.tgz, .tar.gz, as npm pack makes)",
	R:   "an R source package (.tar.gz, as R CMD build makes)",
	APT: "a Debian package (.deb)",
}

// Bounds of what envd reads of an archive to find its package's name and
// version: those files come first in the archives the tools make.
const (
	maxArchiveBytes   = 256 << 20
	maxArchiveEntries = 100000
	maxMetadataBytes  = 1 << 20
)

// checkSource checks a request's source and reads what package it holds.
// u is who asks: with strict users, the file is opened as u.
func (in *Installer) checkSource(ctx context.Context, m Manager, u *identity.User, p string) (*source, error) {
	p, err := validatePath("source", p)
	if err != nil {
		return nil, err
	}
	fi, err := in.stat(u, p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errorf(ErrInvalid, "source %s: no such file or directory", p)
	case err != nil:
		return nil, errorf(ErrInvalid, "source %s: %v", p, bare(err))
	case fi.IsDir():
		if m != PIP {
			return nil, errorf(ErrInvalid, "source %s: a directory: %s installs %s", p, m, sourceKinds[m])
		}
		return &source{path: p, dir: true}, nil
	case !fi.Mode().IsRegular():
		return nil, errorf(ErrInvalid, "source %s: not a regular file", p)
	}
	base := path.Base(p)
	s := &source{path: p}
	wrong := errorf(ErrInvalid, "source %s: not %s", p, sourceKinds[m])
	switch m {
	case PIP:
		switch {
		case strings.HasSuffix(base, ".whl"):
			// {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl
			f := strings.Split(strings.TrimSuffix(base, ".whl"), "-")
			if len(f) < 5 {
				return nil, errorf(ErrInvalid, "source %s: not a wheel's file name (name-version-python-abi-platform.whl)", p)
			}
			s.name, s.version = f[0], f[1]
		case strings.HasSuffix(base, ".tar.gz") || strings.HasSuffix(base, ".zip"):
			// {name}-{version}.tar.gz: a version holds no '-'.
			stem := strings.TrimSuffix(strings.TrimSuffix(base, ".tar.gz"), ".zip")
			if i := strings.LastIndexByte(stem, '-'); i > 0 {
				s.name, s.version = stem[:i], stem[i+1:]
			}
		default:
			return nil, wrong
		}
	case NPM:
		if !strings.HasSuffix(base, ".tgz") && !strings.HasSuffix(base, ".tar.gz") {
			return nil, wrong
		}
		b, err := in.fromArchive(u, p, "package.json")
		if err != nil {
			return nil, err
		}
		var pj struct{ Name, Version string }
		if err := json.Unmarshal(b, &pj); err != nil || pj.Name == "" {
			return nil, errorf(ErrInvalid, "source %s: its package.json has no name: not an npm package", p)
		}
		s.name, s.version = pj.Name, pj.Version
	case R:
		if !strings.HasSuffix(base, ".tar.gz") {
			return nil, wrong
		}
		b, err := in.fromArchive(u, p, "DESCRIPTION")
		if err != nil {
			return nil, err
		}
		d := dcf(b)
		if s.name, s.version = d["Package"], d["Version"]; s.name == "" {
			return nil, errorf(ErrInvalid, "source %s: its DESCRIPTION has no Package field: not an R source package", p)
		}
	case APT:
		if !strings.HasSuffix(base, ".deb") {
			return nil, wrong
		}
		as := u
		if !in.opts.StrictUsers {
			as = nil // envd reads it, as it reads the others
		}
		if err := s.readDeb(ctx, as); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// fromArchive returns the file called name at the top of a gzipped tar's
// one directory (package/package.json, PKG/DESCRIPTION).
func (in *Installer) fromArchive(u *identity.User, p, name string) ([]byte, error) {
	f, err := in.open(u, p)
	if err != nil {
		return nil, errorf(ErrInvalid, "source %s: %v", p, bare(err))
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, errorf(ErrInvalid, "source %s: not a gzipped tar: %v", p, err)
	}
	tr := tar.NewReader(io.LimitReader(zr, maxArchiveBytes))
	for range maxArchiveEntries {
		h, err := tr.Next()
		if err != nil {
			break
		}
		dir, base := path.Split(strings.TrimPrefix(h.Name, "./"))
		if base != name || dir == "" || strings.Count(dir, "/") != 1 || h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxMetadataBytes))
		if err != nil {
			return nil, errorf(ErrInvalid, "source %s: %s: %v", p, h.Name, err)
		}
		return b, nil
	}
	return nil, errorf(ErrInvalid, "source %s: no DIR/%s in it: not %s", p, name, map[string]string{"package.json": "an npm package", "DESCRIPTION": "an R source package"}[name])
}

// open opens p for reading: as u with strict users (a file u may not read
// is not read for it), else as envd.
func (in *Installer) open(u *identity.User, p string) (*os.File, error) {
	var f *os.File
	err := in.asUser(u, func() error {
		var err error
		f, err = os.Open(p)
		return err
	})
	return f, err
}

// stat stats p: as u with strict users (u learns nothing of a path it may
// not reach), else as envd.
func (in *Installer) stat(u *identity.User, p string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := in.asUser(u, func() error {
		var err error
		fi, err = os.Stat(p)
		return err
	})
	return fi, err
}

// asUser runs fn with exactly u's rights with strict users, else as envd.
func (in *Installer) asUser(u *identity.User, fn func() error) error {
	if !in.opts.StrictUsers || u == nil {
		return fn()
	}
	return u.DoStrict(fn)
}

// dcf parses the fields of a Debian control file (R's DESCRIPTION):
// "Name: value" lines, continued by lines that start with whitespace.
func dcf(b []byte) map[string]string {
	out := map[string]string{}
	last := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\r\n")
		if line != "" && (line[0] == ' ' || line[0] == '\t') {
			if last != "" {
				out[last] += " " + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			last = ""
			continue
		}
		last = strings.TrimSpace(k)
		out[last] = strings.TrimSpace(v)
	}
	return out
}

// readDeb reads a .deb's Package and Version with dpkg-deb, as u (nil:
// as envd).
func (s *source) readDeb(ctx context.Context, u *identity.User) error {
	exe, err := lookPath(APT, "dpkg-deb")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := command{argv: []string{exe, "--field", s.path, "Package", "Version"}, dir: "/", user: u, env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}, m: APT}
	out, err := capture(ctx, "dpkg-deb --field", c, maxMetadataBytes)
	if err != nil {
		return errorf(ErrInvalid, "source %s: not a Debian package: %v", s.path, err)
	}
	d := dcf(out)
	if s.name, s.version = d["Package"], d["Version"]; s.name == "" {
		return errorf(ErrInvalid, "source %s: no Package field: not a Debian package", s.path)
	}
	return nil
}

// check checks the spec a request gives with a file source: the file's
// package, and its version when one is given.
func (s *source) check(m Manager, i int, spec Spec) error {
	name, _, _ := strings.Cut(spec.Name, "[")
	if s.name != "" && nameKey(m, name) != nameKey(m, s.name) {
		return errorf(ErrInvalid, "%s %q: source %s holds %s", field("packages", i, "name"), spec.Name, s.path, s.name)
	}
	if spec.Version != "" && s.version != "" && normVersion(m, spec.Version) != normVersion(m, s.version) {
		return errorf(ErrInvalid, "%s %q: source %s holds version %s", field("packages", i, "version"), spec.Version, s.path, s.version)
	}
	return nil
}

// normVersion is what two versions of m compare as: pip's are
// case-insensitive, with an optional leading v.
func normVersion(m Manager, v string) string {
	if m == PIP || m == NPM {
		return strings.TrimPrefix(strings.ToLower(v), "v")
	}
	return v
}
