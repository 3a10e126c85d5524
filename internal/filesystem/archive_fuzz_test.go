package filesystem_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// tarEntry is one entry of a seed archive: "d/" a directory, "l -> t" a
// symbolic link, "h => t" a hard link, "name" a file holding data.
type tarEntry struct {
	name string
	mode int64
	data string
}

func tarSeed(entries ...tarEntry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: e.mode, Size: int64(len(e.data))}
		if name, target, ok := strings.Cut(e.name, " -> "); ok {
			h = &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: e.mode}
		} else if name, target, ok := strings.Cut(e.name, " => "); ok {
			h = &tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: e.mode}
		} else if strings.HasSuffix(e.name, "/") {
			h = &tar.Header{Name: e.name, Typeflag: tar.TypeDir, Mode: e.mode}
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(err)
		}
		tw.Write([]byte(e.data))
	}
	tw.Close()
	return b.Bytes()
}

// tarSeeds are archives envd unpacks, and archives it must refuse.
func tarSeeds() [][]byte {
	long := strings.Repeat("d", 120) + "/" + strings.Repeat("f", 120)
	seeds := [][]byte{
		tarSeed(tarEntry{"./", 0o755, ""}, tarEntry{"a/", 0o750, ""}, tarEntry{"a/f", 0o644, "data"}, tarEntry{"a/x", 0o4755, "#!/bin/sh\n"},
			tarEntry{"l -> a/f", 0o777, ""}, tarEntry{"a/up -> ../l", 0o777, ""}, tarEntry{"a/", 0o500, ""}),
		tarSeed(tarEntry{"d/", 0o755, ""}, tarEntry{"d/l -> .", 0o777, ""}, tarEntry{"up -> d/l/../..", 0o777, ""}),
		tarSeed(tarEntry{"a/", 0o755, ""}, tarEntry{"a/L -> ..", 0o777, ""}, tarEntry{"esc -> a/L/../../etc", 0o777, ""}),
		tarSeed(tarEntry{"top -> .", 0o777, ""}, tarEntry{"top/x", 0o644, "through a link"}),
		tarSeed(tarEntry{"../x", 0o644, "out"}),
		tarSeed(tarEntry{"/etc/x", 0o644, "out"}),
		tarSeed(tarEntry{"a/../../x", 0o644, "out"}),
		tarSeed(tarEntry{"abs -> /etc", 0o777, ""}),
		tarSeed(tarEntry{"f", 0o644, "1"}, tarEntry{"f", 0o644, "2"}),
		tarSeed(tarEntry{"f", 0o644, "1"}, tarEntry{"h => f", 0o644, ""}),
		tarSeed(tarEntry{"d/", 0, ""}, tarEntry{"d/f", 0, "locked"}),
		tarSeed(tarEntry{"missing/f", 0o644, "no parent"}),
		tarSeed(tarEntry{strings.Repeat("d", 120) + "/", 0o755, ""}, tarEntry{long, 0o644, "a PAX name"}),
		tarSeed(tarEntry{strings.Repeat("n", 300), 0o644, "too long a name"}),
		tarSeed(),
		[]byte("hello"),
	}
	var dev bytes.Buffer
	tw := tar.NewWriter(&dev)
	tw.WriteHeader(&tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666})
	tw.WriteHeader(&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o666})
	tw.Close()
	seeds = append(seeds, dev.Bytes())
	cut := tarSeed(tarEntry{"f", 0o644, strings.Repeat("x", 1000)})
	return append(seeds, cut[:700])
}

// archiveUser is who archives are unpacked as: the sandbox's user.
func archiveUser(tb testing.TB) *identity.User {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("unpacks as another user: run as root")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		tb.Skip("no account named user:", err)
	}
	return u
}

// FuzzExtractTar: any archive is unpacked or refused, within its
// directory: nothing is written anywhere else (the temporary directory
// holding it is walked), every symbolic link it made resolves inside it,
// no staging directory is left behind, a refused archive leaves the
// directory empty, and an unpacked one is exactly the archive as
// archive/tar reads it (every entry, with its content, mode and link
// target, and nothing more). Seeds: below, and archives GNU tar made in
// testdata/fuzz/FuzzExtractTar.
func FuzzExtractTar(f *testing.F) {
	u := archiveUser(f)
	files := filesystem.New(filesystem.Options{Logger: slog.New(slog.DiscardHandler)})
	f.Cleanup(func() { files.Close() })
	for _, s := range tarSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		extract(t, files, u, data)
	})
}

// FuzzExtractTarEntries is FuzzExtractTar for archives written by
// archive/tar from a list of entries, one a line: a type ('d' directory,
// 'f' file, 'l' symbolic link, 'h' hard link, 'c' character device, 'p'
// FIFO, any other byte as the type flag itself), the name, then,
// tab-separated, a file's content or a link's target, and the mode in
// octal. The archive is in format (USTAR, PAX, GNU, or the writer's
// choice) and cut after cut bytes, if that is shorter. Its inputs are a
// few bytes where a tar's are kilobytes: each run tries more of what the
// entries say.
func FuzzExtractTarEntries(f *testing.F) {
	u := archiveUser(f)
	files := filesystem.New(filesystem.Options{Logger: slog.New(slog.DiscardHandler)})
	f.Cleanup(func() { files.Close() })
	for _, s := range []string{
		"d./\t\t755\nda\t\t750\nfa/f\tdata\t644\nfa/x\t#!/bin/sh\t4755\nll\ta/f\nla/up\t../l\nda\t\t500",
		"dd\nld/l\t.\nlup\td/l/../..",
		"da\nla/L\t..\nlesc\ta/L/../../etc",
		"ltop\t.\nftop/x\tthrough a link",
		"f../x\tout\nf/etc/x\tout\nfa/../../x\tout",
		"labs\t/etc",
		"ff\t1\nff\t2",
		"ff\t1\nhh\tf",
		"dd\t\t0\nfd/f\tlocked\t0",
		"dro\t\t555\ndro/sub\t\t555\nfro/sub/f\tx\t444",
		"fmissing/f\tno parent",
		"cnull\npfifo\nSsparse\nxunknown",
		"d" + strings.Repeat("d", 120) + "\nf" + strings.Repeat("d", 120) + "/" + strings.Repeat("f", 150) + "\tlong",
	} {
		f.Add(s, uint8(0), uint16(0))
	}
	f.Add("fa\t"+strings.Repeat("x", 600), uint8(2), uint16(700))
	f.Add("da\nda/b\nfa/b/c\tc", uint8(3), uint16(0))
	f.Fuzz(func(t *testing.T, spec string, format uint8, cut uint16) {
		data := tarOfSpec(spec, format)
		if cut > 0 && int(cut) < len(data) {
			data = data[:cut]
		}
		extract(t, files, u, data)
	})
}

// tarOfSpec writes the archive spec describes (FuzzExtractTarEntries);
// entries the writer refuses are left out.
func tarOfSpec(spec string, format uint8) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for line := range strings.SplitSeq(spec, "\n") {
		if line == "" {
			continue
		}
		fields := strings.SplitN(line[1:], "\t", 3)
		h := &tar.Header{Name: fields[0], Typeflag: line[0], Format: []tar.Format{tar.FormatUnknown, tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU}[format%4]}
		var data string
		if len(fields) > 1 {
			data = fields[1]
		}
		mode := int64(0o644)
		switch line[0] {
		case 'd':
			h.Typeflag, mode = tar.TypeDir, 0o755
		case 'f':
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		case 'l':
			h.Typeflag, h.Linkname, mode = tar.TypeSymlink, data, 0o777
		case 'h':
			h.Typeflag, h.Linkname = tar.TypeLink, data
		case 'c':
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeChar, 1, 3
		case 'p':
			h.Typeflag = tar.TypeFifo
		}
		h.Mode = mode
		if len(fields) > 2 {
			if m, err := strconv.ParseInt(fields[2], 8, 64); err == nil {
				h.Mode = m
			}
		}
		if tw.WriteHeader(h) != nil {
			continue
		}
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, data)
		}
	}
	tw.Close()
	return b.Bytes()
}

// extract unpacks data as u in a new directory and checks the outcome
// (FuzzExtractTar).
func extract(t *testing.T, files *filesystem.Files, u *identity.User, data []byte) {
	top := testutil.WorkDir(t)
	dir := filepath.Join(top, "out")
	n, err := files.ExtractTar(u, dir, bytes.NewReader(data))
	if err != nil && !errors.Is(err, filesystem.ErrArchive) && !errors.Is(err, filesystem.ErrInvalid) {
		t.Fatalf("ExtractTar: %v: neither a refused archive nor an invalid name", err)
	}
	checkTree(t, top, dir)
	if err != nil {
		if des, _ := os.ReadDir(dir); len(des) != 0 {
			t.Fatalf("a refused archive (%v) left %d entries", err, len(des))
		}
		return
	}
	want, headers := tarTree(t, data)
	if n != headers {
		t.Errorf("%d entries unpacked, the archive has %d", n, headers)
	}
	compareTree(t, dir, want)
}

// checkTree fails t if anything was written in the temporary directory
// of top (its parent, which the test's TempDir made) but in dir, below
// top; if any link under dir resolves out of it; if a staging directory
// is left in dir.
func checkTree(t *testing.T, top, dir string) {
	t.Helper()
	root := filepath.Dir(top)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walk %s: %v", p, err)
			return nil
		}
		if p != root && p != top && p != dir && !strings.HasPrefix(p, dir+"/") {
			t.Errorf("%s was written, out of %s", p, dir)
		}
		if strings.HasPrefix(d.Name(), ".envd-untar-") {
			t.Errorf("staging directory %s left behind", p)
		}
		return nil
	})
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // no directory: nothing in it
	}
	defer unix.Close(dfd)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type() != fs.ModeSymlink {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
		if err == nil {
			unix.Close(fd)
		}
		if errors.Is(err, unix.EXDEV) {
			target, _ := os.Readlink(p)
			t.Errorf("link %s -> %s resolves out of %s", rel, target, dir)
		}
		return nil
	})
}

// treeEntry is what an archive says one entry is.
type treeEntry struct {
	Type byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Mode fs.FileMode
	Data string // a file's content, a link's target
}

// tarTree is the tree the archive data describes, by cleaned name (a
// directory given twice has its last mode), and how many entries it has.
func tarTree(t *testing.T, data []byte) (map[string]treeEntry, int) {
	t.Helper()
	tree := map[string]treeEntry{}
	tr := tar.NewReader(bytes.NewReader(data))
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tree, n
		}
		if err != nil {
			t.Fatalf("unpacked, but archive/tar reads: %v", err)
		}
		n++
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		e := treeEntry{Type: h.Typeflag, Mode: fs.FileMode(h.Mode & 0o777), Data: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("unpacked, but archive/tar reads %s: %v", name, err)
			}
			e.Data = string(b)
		}
		tree[name] = e
	}
}

// compareTree fails t unless dir holds exactly want.
func compareTree(t *testing.T, dir string, want map[string]treeEntry) {
	t.Helper()
	seen := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		w, ok := want[rel]
		if !ok {
			t.Errorf("%s is not in the archive", rel)
			return nil
		}
		seen++
		fi, err := os.Lstat(p)
		if err != nil {
			t.Error(err)
			return nil
		}
		switch w.Type {
		case tar.TypeDir:
			if !fi.IsDir() || fi.Mode().Perm() != w.Mode {
				t.Errorf("%s: %v, want a directory of mode %v", rel, fi.Mode(), w.Mode)
			}
		case tar.TypeReg:
			b, _ := os.ReadFile(p)
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != w.Mode || string(b) != w.Data {
				t.Errorf("%s: %v holding %q, want a file of mode %v holding %q", rel, fi.Mode(), b, w.Mode, w.Data)
			}
		case tar.TypeSymlink:
			target, _ := os.Readlink(p)
			if fi.Mode().Type() != fs.ModeSymlink || target != w.Data {
				t.Errorf("%s: %v -> %q, want a link to %q", rel, fi.Mode(), target, w.Data)
			}
		default:
			t.Errorf("%s: unpacked from an entry of type %q", rel, w.Type)
		}
		return nil
	})
	if seen != len(want) {
		t.Errorf("%d of the archive's %d entries unpacked", seen, len(want))
	}
}
