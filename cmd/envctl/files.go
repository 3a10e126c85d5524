package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

type lsOpts struct {
	depth int
	json  bool
}

var lsCommand = &command{
	name:         "ls",
	args:         "[--depth N] [--json] [PATH]",
	summary:      "list a directory in the sandbox (default: the user's home)",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &lsOpts{}
		fs.IntVar(&o.depth, "depth", 1, "list `N` levels deep")
		fs.BoolVar(&o.json, "json", false, "print JSON (snake_case names)")
		return o
	},
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		o := opts.(*lsOpts)
		if len(args) > 1 {
			return usageError{"ls: give at most one PATH (usage: envctl ls [--depth N] [--json] [PATH])"}
		}
		if o.depth < 1 {
			return usageError{fmt.Sprintf("ls: --depth %d: want 1 or more", o.depth)}
		}
		dir := ""
		if len(args) == 1 {
			dir = args[0]
		}
		fi, err := e.c.Stat(ctx, dir)
		if err != nil {
			return err
		}
		entries := []client.FileInfo{*fi}
		root := fi.Path
		if fi.Type == client.TypeDir {
			if entries, err = e.c.ListDir(ctx, dir, o.depth); err != nil {
				return err
			}
		} else {
			root = path.Dir(fi.Path)
		}
		if o.json {
			out := make([]fileJSON, len(entries))
			for i, f := range entries {
				out[i] = toFileJSON(f)
			}
			return printJSON(e.stdout, out)
		}
		// Columns as ls -l: permissions, owner, group, size (right-aligned),
		// time, name (relative to the listed directory).
		rows := make([][6]string, len(entries))
		var width [6]int
		for i, f := range entries {
			name := strings.TrimPrefix(strings.TrimPrefix(f.Path, root), "/")
			if name == "" {
				name = f.Name
			}
			if f.Type == client.TypeDir {
				name += "/"
			}
			if f.SymlinkTarget != "" {
				name += " -> " + f.SymlinkTarget
			}
			perm := f.Permissions
			if f.SymlinkTarget != "" && perm != "" {
				perm = "l" + perm[1:] // as ls -l marks a link
			}
			rows[i] = [6]string{perm, f.Owner, f.Group, strconv.FormatInt(f.Size, 10), f.ModTime.Local().Format("2006-01-02 15:04"), name}
			for j, v := range rows[i] {
				width[j] = max(width[j], len(v))
			}
		}
		for _, r := range rows {
			fmt.Fprintf(e.stdout, "%-*s %-*s %-*s %*s %s %s\n", width[0], r[0], width[1], r[1], width[2], r[2], width[3], r[3], r[4], r[5])
		}
		return nil
	},
}

var catCommand = &command{
	name:    "cat",
	args:    "PATH...",
	summary: "print files of the sandbox",
	run: func(ctx context.Context, e *env, _ any, args []string) error {
		if len(args) == 0 {
			return usageError{"cat: no PATH given (usage: envctl cat PATH...)"}
		}
		for _, p := range args {
			r, err := e.c.Download(ctx, p)
			if err != nil {
				return err
			}
			_, err = io.Copy(e.stdout, r)
			r.Close()
			if err != nil {
				return fmt.Errorf("cat %s: %w", p, err)
			}
		}
		return nil
	},
}

const remotePrefix = "envd:"

type cpOpts struct{ recursive, verbose bool }

var cpCommand = &command{
	name:         "cp",
	args:         "[-r] [-v] SRC DST",
	summary:      "copy files into or out of the sandbox (-r: directories too); write the sandbox side envd:PATH (- is stdin or stdout)",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &cpOpts{}
		fs.BoolVar(&o.recursive, "r", false, "copy directories: their files with their permission bits, empty directories, and symlinks as symlinks (never followed)")
		fs.BoolVar(&o.recursive, "R", false, "the same as -r")
		fs.BoolVar(&o.verbose, "v", false, "with -r, name each file as it is copied")
		return o
	},
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		o := opts.(*cpOpts)
		if len(args) != 2 {
			return usageError{"cp: give SRC and DST, one of them envd:PATH (usage: envctl cp [-r] SRC DST)"}
		}
		src, dst := args[0], args[1]
		srcRemote, dstRemote := strings.HasPrefix(src, remotePrefix), strings.HasPrefix(dst, remotePrefix)
		switch {
		case srcRemote && dstRemote:
			return usageError{"cp: both SRC and DST are in the sandbox: one must be a local path"}
		case !srcRemote && !dstRemote:
			return usageError{"cp: neither SRC nor DST is in the sandbox: write the sandbox side envd:PATH"}
		case dstRemote:
			dst = strings.TrimPrefix(dst, remotePrefix)
			if src != "-" {
				// The directory named is followed if it is a link; links
				// inside it are not.
				if fi, err := os.Stat(src); err == nil && fi.IsDir() {
					if !o.recursive {
						return fmt.Errorf("cp: -r not specified; omitting directory '%s'", src)
					}
					return uploadTree(ctx, e, o, src, dst)
				}
			}
			return upload(ctx, e, src, dst)
		default:
			src = strings.TrimPrefix(src, remotePrefix)
			if o.recursive {
				fi, err := e.c.Stat(ctx, src)
				if err != nil {
					return err
				}
				if fi.Type == client.TypeDir {
					return downloadTree(ctx, e, o, src, fi, dst)
				}
			}
			err := download(ctx, e, src, dst)
			if !o.recursive && errors.Is(err, client.ErrInvalidArgument) {
				if fi, serr := e.c.Stat(ctx, src); serr == nil && fi.Type == client.TypeDir {
					return fmt.Errorf("cp: -r not specified; omitting directory 'envd:%s'", src)
				}
			}
			return err
		}
	},
}

var statCommand = &command{
	name:         "stat",
	args:         "[--json] PATH...",
	summary:      "describe files of the sandbox (a symlink itself, not what it points to)",
	interspersed: true,
	flags:        jsonFlag,
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		if len(args) == 0 {
			return usageError{"stat: no PATH given (usage: envctl stat [--json] PATH...)"}
		}
		for _, p := range args {
			fi, err := e.c.Stat(ctx, p)
			if err != nil {
				return err
			}
			if opts.(*jsonOpts).json {
				if err := printJSON(e.stdout, toFileJSON(*fi)); err != nil {
					return err
				}
				continue
			}
			printStat(e.stdout, fi)
		}
		return nil
	},
}

// printStat describes a file as stat(1) does, a field a line.
func printStat(w io.Writer, fi *client.FileInfo) {
	name, kind := fi.Path, fi.Type.String()
	if strings.HasPrefix(fi.Permissions, "L") {
		// envd resolves the link; one that resolves to nothing has its
		// own path as target.
		if fi.SymlinkTarget == fi.Path {
			name += " -> (resolves to nothing)"
		} else {
			name += " -> " + fi.SymlinkTarget
		}
		kind = "symlink"
		if fi.Type != client.TypeOther {
			kind += " to a " + map[client.FileType]string{client.TypeFile: "file", client.TypeDir: "directory"}[fi.Type]
		}
	} else if fi.Type == client.TypeDir {
		kind = "directory"
	}
	fmt.Fprintf(w, "  File: %s\n", name)
	fmt.Fprintf(w, "  Type: %s\n", kind)
	fmt.Fprintf(w, "  Size: %d\n", fi.Size)
	fmt.Fprintf(w, "  Mode: %04o (%s)\n", uint32(fi.Mode.Perm()), fi.Permissions)
	fmt.Fprintf(w, " Owner: %s\n", fi.Owner)
	fmt.Fprintf(w, " Group: %s\n", fi.Group)
	fmt.Fprintf(w, "Modify: %s\n", fi.ModTime.Local().Format("2006-01-02 15:04:05.000000000 -0700"))
	for _, k := range slices.Sorted(maps.Keys(fi.Metadata)) {
		fmt.Fprintf(w, "  Meta: %s=%s\n", k, fi.Metadata[k])
	}
}

func upload(ctx context.Context, e *env, src, dst string) error {
	var r io.Reader = e.stdin
	size := int64(-1)
	name := "stdin"
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		if fi.IsDir() {
			return fmt.Errorf("cp: -r not specified; omitting directory '%s'", src)
		}
		r, size, name = f, fi.Size(), filepath.Base(src)
	}
	// A directory as destination gets the file inside it, as cp does.
	if dst == "" || strings.HasSuffix(dst, "/") {
		if src == "-" {
			return usageError{"cp: copying stdin needs a file name for DST, not a directory"}
		}
		dst = path.Join(dst, name)
	} else if fi, err := e.c.Stat(ctx, dst); err == nil && fi.Type == client.TypeDir {
		if src == "-" {
			return usageError{"cp: copying stdin needs a file name for DST, not a directory"}
		}
		dst = path.Join(dst, name)
	}
	bar := newProgress(e.stderr, "upload "+name, size)
	defer bar.done()
	if _, err := e.c.Upload(ctx, dst, bar.reader(r)); err != nil {
		return err
	}
	return nil
}

func download(ctx context.Context, e *env, src, dst string) error {
	r, err := e.c.Download(ctx, src)
	if err != nil {
		return err
	}
	defer r.Close()
	bar := newProgress(e.stderr, "download "+path.Base(src), r.Size)
	defer bar.done()
	if dst == "-" {
		if _, err := io.Copy(e.stdout, bar.reader(r)); err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		return nil
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	} else if strings.HasSuffix(dst, string(filepath.Separator)) {
		return fmt.Errorf("cp: directory %s does not exist", dst)
	}
	// Write beside the destination, then rename: a failed copy leaves no
	// half-written file.
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".envctl-*")
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, bar.reader(r)); err != nil {
		tmp.Close()
		return fmt.Errorf("cp: %w", err)
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(dst); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("cp: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return nil
}

// progress draws a progress bar on a terminal; on anything else it does
// nothing.
type progress struct {
	w     io.Writer
	label string
	total int64
	n     atomic.Int64
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newProgress(w io.Writer, label string, total int64) *progress {
	p := &progress{w: w, label: label, total: total, start: time.Now()}
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return p
	}
	p.stop = make(chan struct{})
	p.wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw(false)
			case <-p.stop:
				p.draw(true)
				return
			}
		}
	})
	return p
}

func (p *progress) reader(r io.Reader) io.Reader {
	if p.stop == nil {
		return r
	}
	return &countingReader{r: r, n: &p.n}
}

func (p *progress) draw(final bool) {
	n := p.n.Load()
	secs := time.Since(p.start).Seconds()
	rate := ""
	if secs > 0 {
		rate = bytesText(uint64(float64(n)/secs)) + "/s"
	}
	line := fmt.Sprintf("%s %s %s", p.label, bytesText(uint64(n)), rate)
	if p.total > 0 {
		const width = 30
		frac := min(float64(n)/float64(p.total), 1)
		fill := int(frac * width)
		line = fmt.Sprintf("%s [%s%s] %5.1f%% %s of %s %s", p.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
			frac*100, bytesText(uint64(n)), bytesText(uint64(p.total)), rate)
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\033[K%s%s", line, end)
}

func (p *progress) done() {
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
		p.stop = nil
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

type watchOpts struct{ recursive, json bool }

var watchCommand = &command{
	name:         "watch",
	args:         "[--recursive] [--json] PATH",
	summary:      "print the changes in a directory of the sandbox until interrupted",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &watchOpts{}
		fs.BoolVar(&o.recursive, "recursive", false, "watch subdirectories too")
		fs.BoolVar(&o.json, "json", false, "print each change as a line of JSON")
		return o
	},
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		if len(args) != 1 {
			return usageError{"watch: give one PATH (usage: envctl watch [--recursive] PATH)"}
		}
		w, err := e.c.Watch(ctx, args[0], client.WatchOptions{Recursive: opts.(*watchOpts).recursive})
		if err != nil {
			return err
		}
		defer w.Close()
		fmt.Fprintf(e.stderr, "watching %s\n", args[0])
		for ev, err := range w.Events() {
			if err != nil {
				return err
			}
			var werr error
			if opts.(*watchOpts).json {
				werr = printJSON(e.stdout, toWatchEventJSON(ev))
			} else {
				_, werr = fmt.Fprintf(e.stdout, "%-6s %s\n", ev.Op, ev.Name)
			}
			if werr != nil {
				return nil // stdout closed: nobody is reading any more
			}
		}
		// The iteration ends without error once ctx is cancelled (Ctrl-C).
		if ctx.Err() == nil {
			return errors.New("watch " + args[0] + ": the watch ended")
		}
		return nil
	},
}
