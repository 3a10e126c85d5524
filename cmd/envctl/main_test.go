package main

import (
	"bytes"
	"flag"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/buildinfo"
	pb "github.com/envd-dev/envd/gen/process"
)

func TestParseVsock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		cid, port uint32
		wantErr   bool
	}{
		{in: "3:49983", cid: 3, port: 49983},
		{in: "4294967295:1", cid: 4294967295, port: 1},
		{in: "3", wantErr: true},
		{in: "3:", wantErr: true},
		{in: ":49983", wantErr: true},
		{in: "x:1", wantErr: true},
		{in: "3:0", wantErr: true},
		{in: "3:4294967296", wantErr: true},
		{in: "-1:5", wantErr: true},
	}
	for _, tt := range tests {
		cid, port, err := parseVsock(tt.in)
		if (err != nil) != tt.wantErr || cid != tt.cid || port != tt.port {
			t.Errorf("parseVsock(%q) = %d, %d, %v", tt.in, cid, port, err)
		}
	}
}

func TestParseFCUDS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		path    string
		port    uint32
		wantErr bool
	}{
		{in: "/srv/v.sock:49983", path: "/srv/v.sock", port: 49983},
		{in: "/odd:name/v.sock:52", path: "/odd:name/v.sock", port: 52},
		{in: "/srv/v.sock", wantErr: true},
		{in: ":52", wantErr: true},
		{in: "/srv/v.sock:port", wantErr: true},
	}
	for _, tt := range tests {
		path, port, err := parseFCUDS(tt.in)
		if (err != nil) != tt.wantErr || path != tt.path || port != tt.port {
			t.Errorf("parseFCUDS(%q) = %q, %d, %v", tt.in, path, port, err)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		pos     []string
		sig     string
		verbose bool
	}{
		{args: []string{"12", "--signal", "KILL"}, pos: []string{"12"}, sig: "KILL"},
		{args: []string{"--signal=KILL", "12", "-v"}, pos: []string{"12"}, sig: "KILL", verbose: true},
		{args: []string{"a", "b", "--", "-v", "c"}, pos: []string{"a", "b", "-v", "c"}, sig: "TERM"},
		{args: []string{"--", "--signal", "x"}, pos: []string{"--signal", "x"}, sig: "TERM"},
		{args: nil, pos: nil, sig: "TERM"},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		sig := fs.String("signal", "TERM", "")
		v := fs.Bool("v", false, "")
		pos, err := parse(fs, tt.args, true)
		if err != nil || !slices.Equal(pos, tt.pos) || *sig != tt.sig || *v != tt.verbose {
			t.Errorf("parse(%q) = %q, signal %s, v %v, %v", tt.args, pos, *sig, *v, err)
		}
	}
	// Without interspersing, the first positional argument ends the flags.
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("pty", false, "")
	pos, err := parse(fs, []string{"--pty", "ls", "-la"}, false)
	if err != nil || !slices.Equal(pos, []string{"ls", "-la"}) {
		t.Errorf("parse for run: %q, %v", pos, err)
	}
}

func TestReadBlock(t *testing.T) {
	t.Parallel()
	var prompts bytes.Buffer
	lines := newPlainLines(strings.NewReader("x = 1\nfor i in range(3):\n    print(i)\n\nlast"), &prompts)
	var got []string
	for {
		b, err := readBlock(lines)
		if err != nil {
			break
		}
		got = append(got, b)
	}
	want := []string{"x = 1\n", "for i in range(3):\n    print(i)\n", "last\n"}
	if !slices.Equal(got, want) {
		t.Errorf("blocks %q, want %q", got, want)
	}
	if prompts.String() != ">>> >>> ... ... >>> >>> " {
		t.Errorf("prompts %q", prompts.String())
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	if got := oneLine("a\nb\r\n  c  "); got != "a; b; c" {
		t.Errorf("oneLine = %q", got)
	}
}

func TestBytesText(t *testing.T) {
	t.Parallel()
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1 << 30: "1.0 GiB", 3 << 39: "1.5 TiB"} {
		if got := bytesText(n); got != want {
			t.Errorf("bytesText(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRunFlags(t *testing.T) {
	t.Setenv("ENVCTL_TEST_LOCAL", "from here")
	var env envFlag
	for _, v := range []string{"A=1", "ENVCTL_TEST_LOCAL", "ENVCTL_TEST_UNSET_XYZ", "B="} {
		if err := env.Set(v); err != nil {
			t.Fatalf("--env %s: %v", v, err)
		}
	}
	if want := (envFlag{"A": "1", "ENVCTL_TEST_LOCAL": "from here", "B": ""}); !maps.Equal(env, want) {
		t.Errorf("env %v, want %v", env, want)
	}
	if err := env.Set("=x"); err == nil {
		t.Error("--env =x accepted")
	}
	var d time.Duration
	f := durationFlag{&d}
	for v, want := range map[string]string{"1": "has no unit: write e.g. 30s", "abc": "want a duration, e.g. 30s", "-5s": "want a positive duration"} {
		if err := f.Set(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--timeout %s: %v, want %q", v, err, want)
		}
	}
	if err := f.Set("90s"); err != nil || d != 90*time.Second {
		t.Errorf("--timeout 90s: %v, %v", d, err)
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"--version"}, strings.NewReader(""), &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "envctl "+buildinfo.Version()+" (commit ") || errb.Len() != 0 {
		t.Errorf("--version: exit %d, %q %q", code, out.String(), errb.String())
	}
}

// TestSignalNames: every name envctl takes is in envd's Signal enum, with
// the same number.
func TestSignalNames(t *testing.T) {
	for name, sig := range signalNames {
		if got, ok := pb.Signal_value["SIGNAL_SIG"+name]; !ok || got != int32(sig) {
			t.Errorf("%s (%d): envd's enum has %d, %v", name, sig, got, ok)
		}
		for _, in := range []string{name, "SIG" + name, strings.ToLower(name)} {
			if got, err := parseSignal(in); err != nil || got != sig {
				t.Errorf("parseSignal(%q) = %v, %v", in, got, err)
			}
		}
	}
	if _, err := parseSignal("BOGUS"); err == nil || !strings.Contains(err.Error(), "USR1") {
		t.Errorf("parseSignal(BOGUS): %v", err)
	}
}
