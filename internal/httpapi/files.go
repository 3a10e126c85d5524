package httpapi

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
)

// authorizeFiles checks a /files request once a token is set: either the
// X-Access-Token header, or a signature over path, operation and username.
// A signature binds the exact path query parameter: with one, a multipart
// upload writes every part there, never to the parts' filenames; one made
// for an empty path authorizes nothing (auth.ErrSignatureNoPath). signed
// tells that the signature authorized the request: it covers the one
// operation it names (reading or writing a file), nothing more.
func (a *API) authorizeFiles(r *http.Request, operation string) (signed bool, err error) {
	if !a.o.Token.IsSet() {
		return false, nil
	}
	if h := r.Header.Get("X-Access-Token"); h != "" {
		if a.o.Token.Match(h) {
			return false, nil
		}
		return false, errors.New(server.TokenError(true))
	}
	q := r.URL.Query()
	if q.Get("signature") == "" {
		// Signatures are for URLs handed to others: a client that gave
		// none learns about the token first.
		return false, fmt.Errorf("%s, or sign the URL (signature and signature_expiration query parameters)", server.TokenError(false))
	}
	if err := a.o.Token.CheckSignature(q.Get("signature"), q.Get("path"), operation, q.Get("username"), q.Get("signature_expiration"), a.o.Now()); err != nil {
		return false, err
	}
	return true, nil
}

// filesUser is the user a /files request acts as: ?username=, else the
// default user.
func (a *API) filesUser(r *http.Request) (*identity.User, error) {
	name := r.URL.Query().Get("username")
	if name == "" {
		name = a.o.Defaults.UserName()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		if errors.Is(err, identity.ErrUnknownUser) {
			return nil, fmt.Errorf("error looking up user '%s': user: unknown user %s", name, name)
		}
		return nil, fmt.Errorf("error looking up user '%s': %w", name, err)
	}
	return u, nil
}

// begin does what every /files request starts with: authorization and the
// user. It writes the error and returns nil when the request must stop;
// signed tells that a signature, not the token, authorized it.
func (a *API) begin(w http.ResponseWriter, r *http.Request, operation string) (u *identity.User, signed bool) {
	signed, err := a.authorizeFiles(r, operation)
	if err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, auth.ErrSignatureNoPath) {
			// Authenticated enough to know it cannot be allowed.
			status = http.StatusForbidden
		}
		server.WriteError(w, status, err.Error())
		return nil, false
	}
	u, err = a.filesUser(r)
	if err != nil {
		server.WriteError(w, http.StatusUnauthorized, err.Error())
		return nil, false
	}
	return u, signed
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// download serves GET /files: the file, gzip-compressed when the client
// prefers it, else with Range and conditional requests (http.ServeContent).
// Memory use does not depend on the file's size.
func (a *API) download(w http.ResponseWriter, r *http.Request) {
	u, _ := a.begin(w, r, "read")
	if u == nil {
		return
	}
	p, err := u.Resolve(r.URL.Query().Get("path"), a.o.Defaults.Workdir())
	if err != nil {
		writeErr(w, err)
		return
	}
	if kind := archiveKind(r.Header.Get("Accept")); kind != "" {
		a.sendTree(w, r, u, p, kind)
		return
	}
	f, err := a.o.Files.Open(u, p)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("stat %s: %v", p, err))
		return
	}
	gz, ok := wantGzip(r.Header.Get("Accept-Encoding"))
	if !ok {
		server.WriteError(w, http.StatusNotAcceptable, "error parsing Accept-Encoding: no acceptable encoding found, supported: [gzip]")
		return
	}
	// Ranges and validators address the file's bytes: serve those as they are.
	for _, h := range []string{"Range", "If-Range", "If-Modified-Since", "If-None-Match", "If-Match", "If-Unmodified-Since"} {
		if r.Header.Get(h) != "" {
			gz = false
		}
	}
	name := filepath.Base(p)
	h := w.Header()
	h.Set("Vary", "Accept-Encoding")
	h.Set("Content-Disposition", contentDisposition(name))
	if filesystem.SizeUnknown(f) {
		a.streamUnsized(w, r, p, f, gz)
		return
	}
	if !gz {
		http.ServeContent(withReadFrom(w), r, name, fi.ModTime(), f)
		return
	}
	ct := mime.TypeByExtension(filepath.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Encoding", "gzip")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	if _, err := io.CopyBuffer(zw, onlyReader{f}, *buf); err != nil {
		a.log.Debug("download ended early", "path", p, "error", err)
		return
	}
	zw.Close()
}

// streamUnsized sends a file whose size stat does not tell (procfs, sysfs:
// filesystem.SizeUnknown) as reading it goes: no Content-Length, no ranges
// (a Range header is ignored: the whole file is sent, with 200), gzip when
// negotiated. Its type comes from its extension, else from its first bytes.
func (a *API) streamUnsized(w http.ResponseWriter, r *http.Request, p string, f *os.File, gz bool) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	const sniffLen = 512 // as http.DetectContentType
	head := (*buf)[:sniffLen]
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		server.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("read %s: %v", p, err))
		return
	}
	head = head[:n]
	h := w.Header()
	ct := mime.TypeByExtension(filepath.Ext(p))
	if ct == "" {
		ct = http.DetectContentType(head)
	}
	h.Set("Content-Type", ct)
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	out := io.Writer(w)
	var zw *gzip.Writer
	if gz {
		zw, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		out = zw
	}
	if _, err := out.Write(head); err != nil {
		a.log.Debug("download ended early", "path", p, "error", err)
		return
	}
	if n == sniffLen { // else the file ended within it
		if _, err := io.CopyBuffer(out, onlyReader{f}, (*buf)[sniffLen:]); err != nil {
			// The status is sent: the client sees a body cut short.
			a.log.Debug("download ended early", "path", p, "error", err)
			return
		}
	}
	if zw != nil {
		zw.Close()
	}
}

type onlyReader struct{ io.Reader }

// contentDisposition is `inline; filename=<name>`, quoted or RFC 2231
// encoded when the name needs it (spaces, quotes, unicode, newlines).
func contentDisposition(name string) string {
	if v := mime.FormatMediaType("inline", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "inline"
}

// wantGzip negotiates Accept-Encoding: gzip when the client accepts it at
// least as much as the identity; ok is false when it accepts neither.
func wantGzip(header string) (gz, ok bool) {
	if strings.TrimSpace(header) == "" {
		return false, true
	}
	qGzip, qIdentity, qAny := -1.0, -1.0, -1.0
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		q := 1.0
		for param := range strings.SplitSeq(params, ";") {
			k, v, found := strings.Cut(strings.TrimSpace(param), "=")
			if found && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		switch coding {
		case "gzip", "x-gzip":
			qGzip = max(qGzip, q)
		case "identity":
			qIdentity = max(qIdentity, q)
		case "*":
			qAny = max(qAny, q)
		}
	}
	if qGzip < 0 {
		qGzip = max(qAny, 0)
	}
	if qIdentity < 0 {
		qIdentity = 1 // acceptable unless excluded
		if qAny >= 0 {
			qIdentity = qAny
		}
	}
	switch {
	case qGzip > 0 && qGzip >= qIdentity:
		return true, true
	case qIdentity > 0:
		return false, true
	}
	return false, false
}

// withReadFrom lets http.ServeContent reach the connection's ReadFrom,
// which sends a file with sendfile(2), through middleware that wraps the
// ResponseWriter and only exposes the original through Unwrap.
func withReadFrom(w http.ResponseWriter) http.ResponseWriter {
	if _, ok := w.(io.ReaderFrom); ok {
		return w
	}
	for inner := w; ; {
		u, ok := inner.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		inner = u.Unwrap()
		if rf, ok := inner.(io.ReaderFrom); ok {
			return readFromWriter{ResponseWriter: w, rf: rf}
		}
	}
}

// readFromWriter writes headers through the outer writer (so middleware
// sees the status) and the body through the inner one.
type readFromWriter struct {
	http.ResponseWriter
	rf io.ReaderFrom
}

func (w readFromWriter) ReadFrom(r io.Reader) (int64, error) { return w.rf.ReadFrom(r) }

func (w readFromWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// written is one element of POST /files' answer.
type written struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func badRequest(format string, args ...any) *server.StatusError {
	return server.Errorf(http.StatusBadRequest, format, args...)
}

// upload serves POST /files: one raw body (application/octet-stream, path
// required) or the "file" parts of a multipart body, each written atomically.
// The body may be gzip-compressed (Content-Encoding) and sent chunked.
func (a *API) upload(w http.ResponseWriter, r *http.Request) {
	u, signed := a.begin(w, r, "write")
	if u == nil {
		return
	}
	out, err := a.receive(u, r, signed)
	if err != nil {
		var se *server.StatusError
		if errors.As(err, &se) {
			server.WriteError(w, se.Status, se.Msg)
		} else {
			writeErr(w, err)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(out)
}

// errSignedArchive refuses an archive upload authorized by a signature: the
// signature format (upstream's) names only "read" or "write", and a URL
// signed to write one file must not unpack a tree of them.
var errSignedArchive = &server.StatusError{Status: http.StatusForbidden,
	Msg: "a signed URL authorizes writing one file, not unpacking an archive: send the archive with the X-Access-Token header, or upload it as a file (application/octet-stream)"}

// receive writes the body of an upload as u; signed tells that a signature
// authorized it, which an archive upload is refused.
func (a *API) receive(u *identity.User, r *http.Request, signed bool) ([]written, error) {
	body := io.Reader(r.Body)
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, badRequest("error decompressing request body: %v", err)
		}
		defer zr.Close()
		body = zr
	default:
		return nil, badRequest("error decompressing request body: unsupported Content-Encoding %q: send gzip or identity", ce)
	}
	md := metadataHeaders(r.Header)
	if err := filesystem.ValidateMetadata(md); err != nil {
		return nil, err
	}
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil {
		return nil, badRequest("unsupported content type: %s, expected multipart/form-data or application/octet-stream", ct)
	}
	query := r.URL.Query().Get("path")
	switch {
	case mt == "application/x-tar":
		if signed {
			return nil, errSignedArchive
		}
		if query == "" {
			return nil, badRequest("path query parameter is required for a tar upload: the directory to unpack it in")
		}
		p, err := a.uploadTarget(u, query)
		if err != nil {
			return nil, err
		}
		if _, err := a.o.Files.ExtractTar(u, p, body); err != nil {
			return nil, err
		}
		return []written{{Name: filepath.Base(p), Path: p, Type: "directory"}}, nil
	case mt == "application/octet-stream":
		if query == "" {
			return nil, badRequest("path query parameter is required for raw body upload")
		}
		p, err := a.uploadTarget(u, query)
		if err != nil {
			return nil, err
		}
		res, err := a.writeFile(u, p, body, md)
		if err != nil {
			return nil, err
		}
		return []written{res}, nil
	case strings.HasPrefix(mt, "multipart/"):
		if params["boundary"] == "" {
			return nil, badRequest("malformed multipart body: the Content-Type has no boundary")
		}
		// multipart reads through a bufio.Reader; a large one lets each part
		// be read in large pieces rather than the default 4 KiB.
		return a.receiveParts(u, multipart.NewReader(bufio.NewReaderSize(body, 1024<<10), params["boundary"]), query, md)
	}
	return nil, badRequest("unsupported content type: %s, expected multipart/form-data or application/octet-stream", mt)
}

// uploadTarget resolves where an upload goes. The answer names the written
// path in JSON, and every other route (Connect's strings) takes UTF-8 only,
// so a name that is not UTF-8 is refused before anything is written: once
// written, no client could name the file it got back.
func (a *API) uploadTarget(u *identity.User, target string) (string, error) {
	if !utf8.ValidString(target) {
		return "", badRequest("the upload path %q is not valid UTF-8: name the file in UTF-8", target)
	}
	return u.Resolve(target, a.o.Defaults.Workdir())
}

// receiveParts writes each "file" part, in order. A part's target is the
// path query parameter when given, else its filename, taken as a path.
// Parts written before a failure stay written.
func (a *API) receiveParts(u *identity.User, mr *multipart.Reader, query string, md map[string]string) ([]written, error) {
	var out []written
	seen := map[string]bool{}
	for n := 1; ; n++ {
		part, err := mr.NextRawPart()
		if err == io.EOF { // exactly: a body cut short gives a wrapped io.EOF
			break
		}
		if err != nil {
			return nil, badRequest("malformed multipart body: %v", err)
		}
		_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil {
			return nil, badRequest("malformed multipart body: part %d has a bad Content-Disposition: %v", n, err)
		}
		if params["name"] != "file" {
			continue // other form fields are ignored, as upstream
		}
		target := query
		if target == "" {
			target = params["filename"]
		}
		if target == "" {
			return nil, badRequest("part %d has no filename: name the file in the part's filename, or give the path query parameter", n)
		}
		p, err := a.uploadTarget(u, target)
		if err != nil {
			return nil, err
		}
		if seen[p] {
			return nil, badRequest("you cannot upload multiple files to the same path '%s' in one upload request, only the first specified file was uploaded", p)
		}
		seen[p] = true
		res, err := a.writeFile(u, p, part, md)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	if len(out) == 0 {
		return nil, badRequest("no file in the multipart body: send each file in a part named \"file\"")
	}
	return out, nil
}

// writeFile copies src to path atomically. A body that ends early (a
// dropped connection, a truncated or malformed body) leaves path unchanged.
func (a *API) writeFile(u *identity.User, p string, src io.Reader, md map[string]string) (written, error) {
	up, err := a.o.Files.Create(u, p, md)
	if err != nil {
		return written{}, err
	}
	buf := copyBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(up, onlyReader{src}, *buf)
	copyBufs.Put(buf)
	if err != nil {
		up.Abort()
		if werr := up.Err(); werr != nil {
			return written{}, werr
		}
		return written{}, badRequest("upload of %s ended early, nothing was written: %v", p, err)
	}
	if err := up.Commit(); err != nil {
		return written{}, err
	}
	res := written{Name: filepath.Base(p), Path: p, Type: "file"}
	if up.MetadataStored() {
		res.Metadata = md
	}
	return res, nil
}

// metadataHeaders collects X-Metadata-<Key>: <value> headers; keys are
// lowercased, and the first value of a key wins.
func metadataHeaders(h map[string][]string) map[string]string {
	const prefix = "x-metadata-"
	var md map[string]string
	for k, vs := range h {
		lk := strings.ToLower(k)
		if !strings.HasPrefix(lk, prefix) || len(vs) == 0 {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		key := lk[len(prefix):]
		if _, dup := md[key]; !dup {
			md[key] = vs[0]
		}
	}
	return md
}
