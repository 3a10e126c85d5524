package packages

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestNamesAndVersions: what each manager's rules accept and refuse (the
// refusals' codes and messages are in pkgconnect's tests).
func TestNamesAndVersions(t *testing.T) {
	t.Parallel()
	names := map[Manager][2][]string{ // valid, invalid
		PIP: {{"numpy", "Django", "zope.interface", "ruamel.yaml.clib", "a", "requests[socks]", "pkg[a,b_c]", "x_1-2.3"},
			{"-e", "a b", "a/b", "foo_", ".x", "x[", "x[]", "x[a b]", "x[-a]", "x;y", "x==1"}},
		NPM: {{"lodash", "@types/node", "left-pad", "JSONStream", "a.b_c~d", "@a/b.c"},
			{".x", "_x", "-x", "@/x", "@s/", "a b", "a:b", "node_modules", "x@1", "é", "left-pad.tgz", "x.tar", "x.TAR.GZ"}},
		R: {{"ggplot2", "data.table", "Rcpp", "R6", "xx"},
			{"a", "1a", "a_b", "a.", ".a", "a-b"}},
		APT: {{"curl", "libc6", "g++", "python3.11", "libc6:amd64", "0ad"},
			{"a", "Curl", "-y", "a_b", "a:", "a:AMD64", "a b", "curl-", "curl-:amd64"}},
	}
	for m, c := range names {
		for _, n := range c[0] {
			if err := validateName(m, "name", n, true); err != nil {
				t.Errorf("%s name %q refused: %v", m, n, err)
			}
		}
		for _, n := range c[1] {
			if err := validateName(m, "name", n, true); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s name %q: %v, want refused", m, n, err)
			}
		}
	}
	versions := map[Manager][2][]string{
		PIP: {{"1", "1.2.3", "2.0rc1", "1!2.0.post1.dev3+local.7", "1.0a1", "v1.0", "2024.1", "1.0.post2", "1.0-1"},
			{"-1", "1.0 beta", ">=1", "1.*", "latest", "1..2", "1.0+", "==1"}},
		NPM: {{"1.2.3", "^1.2.3", "~1.2", ">=1.0.0 <2", ">= 1.2", "1.x", "*", "1 - 2", "^1||^2", "1.0.0-rc.1+build.5", "latest", "next", "v1.2.3", "=1.2.3", "~>1.2"},
			{"-1", "1.2.3.4", ">=", "^", "a b", "1 -", "||", "^1 ||", "01.2.3", "not a range!"}},
		APT: {{"1.0", "1:2.3-1", "2.36-9+deb12u4", "1.0~rc1-1", "7.88.1-10+deb12u5"},
			{"a1", "-1", "1.0-", "1:", "1.0 1", "1_0"}},
	}
	for m, c := range versions {
		for _, v := range c[0] {
			if err := validateVersion(m, "version", v, false); err != nil {
				t.Errorf("%s version %q refused: %v", m, v, err)
			}
		}
		for _, v := range c[1] {
			if err := validateVersion(m, "version", v, false); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s version %q: %v, want refused", m, v, err)
			}
		}
	}
	if err := validateVersion(R, "version", "0.4-1", true); err != nil {
		t.Errorf("R version with a source: %v", err)
	}
	for _, v := range []string{"1", "a.b", "1.0a"} {
		if err := validateVersion(R, "version", v, true); !errors.Is(err, ErrInvalid) {
			t.Errorf("R version %q: %v", v, err)
		}
	}
	for in, want := range map[string]string{"Foo.Bar": "foo-bar", "foo__bar": "foo-bar", "Foo-_.Bar": "foo-bar", "x": "x"} {
		if got := pipKey(in); got != want {
			t.Errorf("pipKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDCF(t *testing.T) {
	t.Parallel()
	d := dcf([]byte("Package: abc\nVersion: 1.0-2\nDescription: one\n  two\r\nBad line\nAuthors@R: person()\n"))
	if d["Package"] != "abc" || d["Version"] != "1.0-2" || d["Description"] != "one two" || d["Authors@R"] != "person()" {
		t.Errorf("dcf: %q", d)
	}
}

func TestTailLines(t *testing.T) {
	t.Parallel()
	tl := &tail{max: 32}
	tl.write([]byte("first line that is cut\nsecond\n\nthird\r\n"))
	tl.write([]byte("fourth"))
	if got := tl.lines(); got != "second\nthird\nfourth" {
		t.Errorf("lines = %q", got)
	}
	tl = &tail{max: 1 << 10}
	for i := range 20 {
		tl.write([]byte(strings.Repeat("x", i) + "\n"))
	}
	if got := strings.Split(tl.lines(), "\n"); len(got) != 19 || got[len(got)-1] != strings.Repeat("x", 19) {
		t.Errorf("lines = %q", got)
	}
}

// TestChanges: a listing's changes are the versions as used (the first on
// the path), so a copy that shadows Debian's changes the version from
// Debian's, and removing it changes it back.
func TestChanges(t *testing.T) {
	t.Parallel()
	deb := Package{Name: "six", Version: "1.16.0", System: true}
	mine := Package{Name: "six", Version: "9.0"}
	shadowed := deb
	shadowed.Shadowed = true
	cases := []struct {
		before, after []Package
		want          []Change
	}{
		{[]Package{deb}, []Package{mine, shadowed}, []Change{{"six", "1.16.0", "9.0"}}},
		{[]Package{mine, shadowed}, []Package{deb}, []Change{{"six", "9.0", "1.16.0"}}},
		{nil, []Package{{Name: "B", Version: "1"}, {Name: "a", Version: "2"}}, []Change{{"a", "", "2"}, {"B", "", "1"}}},
		{[]Package{{Name: "Foo_Bar", Version: "1"}}, []Package{{Name: "foo-bar", Version: "1"}}, nil},
		{[]Package{{Name: "x", Version: "1"}}, nil, []Change{{"x", "1", ""}}},
	}
	for i, c := range cases {
		if got := changes(PIP, c.before, c.after); !slices.Equal(got, c.want) {
			t.Errorf("%d: changes = %v, want %v", i, got, c.want)
		}
	}
}

func TestStaleMessage(t *testing.T) {
	t.Parallel()
	up := &staleChange{Change: Change{"numpy", "1.24.2", "1.26.0"}}
	gone := &staleChange{Change: Change{"pandas", "1.5.3", ""}}
	for _, c := range []struct {
		lang string
		chs  []*staleChange
		want string
	}{
		{"python", []*staleChange{up}, "package numpy changed from 1.24.2 to 1.26.0 after this context imported it; restart the context to use the new version"},
		{"r", []*staleChange{gone}, "package pandas 1.5.3 was removed after this context loaded it; restart the context to unload it"},
		{"python", []*staleChange{up, gone}, "packages changed after this context imported them: numpy changed from 1.24.2 to 1.26.0, pandas 1.5.3 was removed; restart the context to use what is installed now"},
	} {
		if got := staleMessage(c.lang, c.chs); got != c.want {
			t.Errorf("staleMessage = %q\nwant %q", got, c.want)
		}
	}
}
