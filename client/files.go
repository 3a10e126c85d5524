package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/envd-dev/envd/gen/filesystem"
)

// FileType is the kind of a file.
type FileType int

const (
	// TypeOther is anything but a file or a directory: a fifo, a socket, a
	// device, a dangling symlink.
	TypeOther FileType = iota
	TypeFile
	TypeDir
)

func (t FileType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	}
	return "other"
}

// FileInfo describes a file in the sandbox. For a symlink, Type and Mode are
// its target's.
type FileInfo struct {
	Name          string // base name
	Path          string // absolute path, as asked (symlinks not resolved)
	Type          FileType
	Size          int64
	Mode          fs.FileMode // permission bits only
	Permissions   string      // "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx"
	Owner, Group  string
	ModTime       time.Time
	SymlinkTarget string            // the resolved target of a symlink; "" otherwise
	Metadata      map[string]string // user metadata set at upload
}

func fileInfo(e *fspb.EntryInfo) FileInfo {
	fi := FileInfo{
		Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(),
		Mode: fs.FileMode(e.GetMode()) & fs.ModePerm, Permissions: e.GetPermissions(),
		Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(), Metadata: e.GetMetadata(),
	}
	switch e.GetType() {
	case fspb.FileType_FILE_TYPE_FILE:
		fi.Type = TypeFile
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		fi.Type = TypeDir
	}
	if t := e.GetModifiedTime(); t != nil {
		fi.ModTime = t.AsTime()
	}
	return fi
}

// Stat describes the file at path (relative paths start from the user's
// home). It does not follow a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (*FileInfo, error) {
	c.init()
	resp, err := c.fs.Stat(ctx, request(c, &fspb.StatRequest{Path: path}, ""))
	if err != nil {
		return nil, fileRPCError("stat "+path, err)
	}
	fi := fileInfo(resp.Msg.GetEntry())
	return &fi, nil
}

// ListDir lists the directory at path, depth levels deep (0 and 1: its
// entries only), in lexical order, each directory's entries right after it.
func (c *Client) ListDir(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	c.init()
	if depth < 0 {
		return nil, &Error{Op: "list " + path, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("depth %d: want 0 or more", depth)}
	}
	resp, err := c.fs.ListDir(ctx, request(c, &fspb.ListDirRequest{Path: path, Depth: uint32(depth)}, ""))
	if err != nil {
		return nil, fileRPCError("list "+path, err)
	}
	out := make([]FileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, fileInfo(e))
	}
	return out, nil
}

// MakeDir creates the directory at path and its missing parents. It fails
// with ErrAlreadyExists if the directory exists.
func (c *Client) MakeDir(ctx context.Context, path string) (*FileInfo, error) {
	c.init()
	resp, err := c.fs.MakeDir(ctx, request(c, &fspb.MakeDirRequest{Path: path}, ""))
	if err != nil {
		return nil, fileRPCError("make directory "+path, err)
	}
	fi := fileInfo(resp.Msg.GetEntry())
	return &fi, nil
}

// Move renames src to dst, creating dst's missing parents and replacing a
// file at dst.
func (c *Client) Move(ctx context.Context, src, dst string) (*FileInfo, error) {
	c.init()
	resp, err := c.fs.Move(ctx, request(c, &fspb.MoveRequest{Source: src, Destination: dst}, ""))
	if err != nil {
		return nil, fileRPCError("move "+src+" to "+dst, err)
	}
	fi := fileInfo(resp.Msg.GetEntry())
	return &fi, nil
}

// Remove removes path and everything under it. A missing path is not an
// error.
func (c *Client) Remove(ctx context.Context, path string) error {
	c.init()
	_, err := c.fs.Remove(ctx, request(c, &fspb.RemoveRequest{Path: path}, ""))
	return fileRPCError("remove "+path, err)
}

// filesURL is the /files URL of path, for the client's user.
func (c *Client) filesURL(path string) string {
	q := url.Values{"path": {path}}
	if c.opts.User != "" {
		q.Set("username", c.opts.User)
	}
	return c.base + "/files?" + q.Encode()
}

// Upload writes everything r yields to the file at path, streaming it:
// memory use does not depend on the size. Missing parent directories are
// created; an existing file is replaced. It returns the file's absolute
// path.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader) (string, error) {
	c.init()
	op := "upload " + path
	if path == "" {
		return "", &Error{Op: "upload", Code: connect.CodeInvalidArgument, Message: "no destination path"}
	}
	// Hide any WriterTo/Len from net/http so the body is streamed, and
	// give it a size when one is known.
	body, size := uploadBody(r)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.filesURL(path), body)
	if err != nil {
		return "", &Error{Op: op, Code: connect.CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	c.setToken(req.Header)
	resp, err := c.bulkHC.Do(req)
	if err != nil {
		return "", transportError(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fileHTTPError(op, resp)
	}
	defer resp.Body.Close()
	var written []struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&written); err != nil || len(written) == 0 {
		return "", &Error{Op: op, Code: connect.CodeInternal, Message: "envd's answer names no written file", Err: err}
	}
	return written[0].Path, nil
}

// uploadBody wraps r so that net/http streams it, and tells its size when
// r knows it (-1 otherwise: chunked).
func uploadBody(r io.Reader) (io.Reader, int64) {
	type lener interface{ Len() int }
	type stater interface{ Stat() (fs.FileInfo, error) }
	size := int64(-1)
	switch v := r.(type) {
	case lener:
		size = int64(v.Len())
	case stater:
		if fi, err := v.Stat(); err == nil && fi.Mode().IsRegular() {
			if s, ok := r.(io.Seeker); ok {
				if off, err := s.Seek(0, io.SeekCurrent); err == nil {
					size = fi.Size() - off
				}
			}
		}
	}
	if size == 0 {
		return http.NoBody, 0
	}
	return struct{ io.Reader }{r}, size
}

// FileReader is a file being downloaded: read it, then close it.
type FileReader struct {
	// Size is the file's size in bytes, -1 if envd did not say.
	Size int64
	body io.ReadCloser
	op   string
}

// Read reads the file; a download cut short fails with ErrUnavailable.
func (f *FileReader) Read(p []byte) (int, error) {
	n, err := f.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, transportError(f.op, err)
	}
	return n, err
}

// Close ends the download.
func (f *FileReader) Close() error { return f.body.Close() }

// Download opens the file at path for reading, streaming it: memory use
// does not depend on the size. A missing file fails with ErrNotFound, a
// directory with ErrInvalidArgument.
func (c *Client) Download(ctx context.Context, path string) (*FileReader, error) {
	return c.openFile(ctx, "download "+path, path, "")
}

// openFile opens GET /files for path (accept: the Accept header, "" for none)
// as a FileReader.
func (c *Client) openFile(ctx context.Context, op, path, accept string) (*FileReader, error) {
	c.init()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.filesURL(path), nil)
	if err != nil {
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	// Never gzip: a file is moved as it is, as fast as the link goes.
	req.Header.Set("Accept-Encoding", "identity")
	c.setToken(req.Header)
	resp, err := c.bulkHC.Do(req)
	if err != nil {
		return nil, transportError(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fileHTTPError(op, resp)
	}
	return &FileReader{Size: resp.ContentLength, body: resp.Body, op: op}, nil
}

// FileOp is what happened to a watched file.
type FileOp int

const (
	OpCreate FileOp = iota + 1
	OpWrite
	OpRemove
	OpRename
	OpChmod
)

func (o FileOp) String() string {
	switch o {
	case OpCreate:
		return "create"
	case OpWrite:
		return "write"
	case OpRemove:
		return "remove"
	case OpRename:
		return "rename"
	case OpChmod:
		return "chmod"
	}
	return "FileOp(" + strconv.Itoa(int(o)) + ")"
}

// FileEvent is one change in a watched directory.
type FileEvent struct {
	// Name is the path relative to the watched directory ("a/b.txt"; "."
	// for the directory itself).
	Name string
	Op   FileOp
	// Entry describes the file after the change (with IncludeEntry, for
	// create, write and chmod only).
	Entry *FileInfo
}

// WatchOptions configures Watch.
type WatchOptions struct {
	// Recursive watches subdirectories too, new ones included.
	Recursive bool
	// IncludeEntry attaches a FileInfo to create, write and chmod events.
	IncludeEntry bool
}

// Watch watches the directory at path and returns once the watch is in
// place: every change after it is reported. Read them with Events; end the
// watch with Close or by cancelling ctx.
func (c *Client) Watch(ctx context.Context, path string, o WatchOptions) (*Watcher, error) {
	c.init()
	op := "watch " + path
	sctx, cancel := streamContext(ctx, 0)
	stream, err := c.fs.WatchDir(sctx, request(c, &fspb.WatchDirRequest{Path: path, Recursive: o.Recursive, IncludeEntry: o.IncludeEntry}, ""))
	if err != nil {
		cancel()
		return nil, fileRPCError(op, err)
	}
	w := &Watcher{op: op, cancel: cancel, close: stream.Close, stream: stream}
	for {
		if !stream.Receive() {
			err := stream.Err()
			w.release()
			if err == nil {
				err = errors.New("the watch ended before it started")
			}
			return nil, fileRPCError(op, err)
		}
		if stream.Msg().GetStart() != nil {
			return w, nil
		}
	}
}

// Watcher is a watch on a directory.
type Watcher struct {
	op        string
	cancel    context.CancelFunc
	close     func() error
	stream    serverStream[fspb.WatchDirResponse]
	closeOnce sync.Once
}

// Events iterates over the changes until the watch ends. It ends with an
// error, yielded last, unless Close or the context of Watch ended it.
func (w *Watcher) Events() iter.Seq2[FileEvent, error] {
	return func(yield func(FileEvent, error) bool) {
		for w.stream.Receive() {
			e := w.stream.Msg().GetFilesystem()
			if e == nil {
				continue
			}
			ev := FileEvent{Name: e.GetName(), Op: FileOp(e.GetType())}
			if e.Entry != nil {
				fi := fileInfo(e.Entry)
				ev.Entry = &fi
			}
			if !yield(ev, nil) {
				return
			}
		}
		err := w.stream.Err()
		w.release()
		if err != nil && connect.CodeOf(err) != connect.CodeCanceled {
			yield(FileEvent{}, fileRPCError(w.op, err))
		} else if err == nil {
			yield(FileEvent{}, &Error{Op: w.op, Code: connect.CodeUnavailable, Message: "envd ended the watch"})
		}
	}
}

// Close ends the watch.
func (w *Watcher) Close() error {
	w.cancel()
	return nil
}

func (w *Watcher) release() {
	w.closeOnce.Do(func() {
		w.cancel()
		w.close()
	})
}

// fileRPCError and fileHTTPError are rpcError and httpError for file
// operations: their errors match fs.ErrNotExist and the like.
func fileRPCError(op string, err error) error { return concerning(aboutFile, rpcError(op, err)) }

func fileHTTPError(op string, resp *http.Response) error {
	return concerning(aboutFile, httpError(op, resp))
}
