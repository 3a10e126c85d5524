package httpapi

import (
	"archive/tar"
	"archive/zip"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
)

// Archive types GET /files sends a directory as, when Accept asks for one.
const (
	typeTar = "application/x-tar"
	typeZip = "application/zip"
)

// archiveKind is the archive type Accept asks for ("" for none): the first
// of typeTar and typeZip it lists with a non-zero q.
func archiveKind(accept string) string {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" || params["q"] == "0.0" {
			continue
		}
		if mt == typeTar || mt == typeZip {
			return mt
		}
	}
	return ""
}

// sendTree streams the directory p as a tar or zip archive (kind), entries
// relative to p: directories, regular files and symbolic links (as links),
// with their modes. Read as u, as a single file is (Files.WalkTree). An
// error before the first byte is an ordinary error answer; after it, the
// connection is cut so that the client sees a broken archive, never a
// short one that looks whole.
func (a *API) sendTree(w http.ResponseWriter, r *http.Request, u *identity.User, p, kind string) {
	// The first entry is only known once the walk runs: headers go out
	// with it, so that a directory that cannot be read is still an error.
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		ext := ".tar"
		if kind == typeZip {
			ext = ".zip"
		}
		w.Header().Set("Content-Type", kind)
		w.Header().Set("Content-Disposition", contentDisposition(filepath.Base(p)+ext))
		w.WriteHeader(http.StatusOK)
	}
	var aw archiveWriter = tarWriter{tar.NewWriter(w)}
	if kind == typeZip {
		aw = zipWriter{zip.NewWriter(w)}
	}
	err := a.sendArchive(aw, u, p, start)
	if err == nil {
		return
	}
	if !started {
		writeErr(w, err)
		return
	}
	a.log.Info("directory download cut short", "path", p, "error", err)
	panic(http.ErrAbortHandler)
}

// archiveWriter writes walked entries in one archive format.
type archiveWriter interface {
	// add writes e, whose tar header is h.
	add(e filesystem.TreeEntry, h *tar.Header) error
	Close() error
}

// sendArchive walks p as u into aw, calling start before the first byte.
func (a *API) sendArchive(aw archiveWriter, u *identity.User, p string, start func()) error {
	names := filesystem.NewNameCache()
	err := a.o.Files.WalkTree(u, p, func(e filesystem.TreeEntry) error {
		start()
		return aw.add(e, filesystem.TarHeader(e, names))
	})
	if err != nil {
		return err
	}
	start() // an empty directory is an empty archive
	return aw.Close()
}

type tarWriter struct{ *tar.Writer }

func (tw tarWriter) add(e filesystem.TreeEntry, h *tar.Header) error {
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if e.File != nil {
		// A file that shrank meanwhile cuts the archive (an error); one
		// that grew is sent as it was when listed.
		if _, err := io.CopyN(tw, e.File, h.Size); err != nil {
			return err
		}
	}
	return nil
}

type zipWriter struct{ *zip.Writer }

func (zw zipWriter) add(e filesystem.TreeEntry, th *tar.Header) error {
	zh, err := zip.FileInfoHeader(th.FileInfo())
	if err != nil {
		return err
	}
	zh.Name = th.Name
	switch {
	case e.File != nil:
		zh.Method = zip.Deflate
	case e.Link != "":
		zh.Method = zip.Store
		zh.SetMode(fs.ModeSymlink | 0o777)
	}
	fw, err := zw.CreateHeader(zh)
	if err != nil {
		return err
	}
	switch {
	case e.File != nil:
		_, err = io.CopyN(fw, e.File, th.Size)
	case e.Link != "":
		_, err = io.WriteString(fw, e.Link)
	}
	return err
}
