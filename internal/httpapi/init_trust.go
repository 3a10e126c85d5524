package httpapi

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Where /init's caBundle goes in Debian's trust store. The bundle is what
// OpenSSL (curl, Python's ssl, Ruby), GnuTLS and Go read; the directory
// keeps the certificates for update-ca-certificates, which rebuilds the
// bundle from it when a package runs it later. Hooks of the store (Java's
// keystore) run only then: running update-ca-certificates from /init
// takes seconds to tens of seconds.
const (
	caBundleFile = "/etc/ssl/certs/ca-certificates.crt"
	caLocalDir   = "/usr/local/share/ca-certificates/envd-init"
)

// The lines around /init's certificates in the bundle: the next caBundle
// replaces what is between them, and nothing else.
const (
	caBegin = "# envd /init caBundle: begin (the next /init caBundle replaces what is up to its end)"
	caEnd   = "# envd /init caBundle: end"
)

// caFilePrefix names each certificate's file in caLocalDir. The prefix
// keeps the names update-ca-certificates derives in /etc/ssl/certs
// (NAME.pem) apart from everyone else's.
const caFilePrefix = "envd-init-"

// parseCABundle checks caBundle: one or more PEM blocks, each a
// CERTIFICATE that parses; text outside the blocks (comments, as in
// Mozilla's bundle) is allowed.
func parseCABundle(s string) ([]*x509.Certificate, error) {
	data := []byte(s)
	var certs []*x509.Certificate
	begin := []byte("-----BEGIN")
	for {
		i := bytes.Index(data, begin)
		if i < 0 {
			break
		}
		n := len(certs) + 1
		block, rest := pem.Decode(data[i:])
		// pem.Decode skips a block it cannot read and goes on to the
		// next: one BEGIN per decoded block, or a block was broken.
		if block == nil || bytes.Count(data[i:len(data)-len(rest)], begin) != 1 {
			return nil, fmt.Errorf("caBundle: PEM block %d is not complete PEM (a BEGIN line, base64, an END line of the same type)", n)
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("caBundle: PEM block %d is a %q, want CERTIFICATE: send only the CA certificates, never a key", n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("caBundle: certificate %d does not parse: %v", n, err)
		}
		certs = append(certs, c)
		data = rest
	}
	if len(certs) == 0 {
		return nil, errors.New("caBundle: no PEM certificate in it (want -----BEGIN CERTIFICATE----- blocks)")
	}
	return certs, nil
}

// installCAs makes certs the trusted certificates /init added, in place
// of those an earlier /init added (and of no one else's): in dir, one file
// each, and in bundle between caBegin and caEnd. Each file is replaced
// atomically; nothing is written when nothing changes.
func installCAs(certs []*x509.Certificate, bundle, dir string) error {
	old, err := readCADir(dir)
	if err != nil {
		return err
	}
	var ders [][]byte
	var pems bytes.Buffer
	for _, c := range certs {
		if slices.ContainsFunc(ders, func(d []byte) bool { return bytes.Equal(d, c.Raw) }) {
			continue // the same certificate twice
		}
		ders = append(ders, c.Raw)
		pem.Encode(&pems, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	if !slices.EqualFunc(old, ders, bytes.Equal) {
		if err := writeCADir(dir, ders); err != nil {
			return err
		}
	}
	data, mode, err := readFileMode(bundle)
	if err != nil {
		return fmt.Errorf("read the CA bundle: %w", err)
	}
	edited := editBundle(data, old, pems.Bytes())
	if bytes.Equal(edited, data) {
		return nil
	}
	if err := writeFileAtomic(bundle, edited, mode); err != nil {
		return fmt.Errorf("write the CA bundle: %w", err)
	}
	return nil
}

// readCADir returns the certificates (DER) of an earlier /init, in their
// files' order.
func readCADir(dir string) ([][]byte, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), caFilePrefix) && strings.HasSuffix(e.Name(), ".crt") {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool { return caFileIndex(names[i]) < caFileIndex(names[j]) })
	var ders [][]byte
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		for {
			var block *pem.Block
			if block, b = pem.Decode(b); block == nil {
				break
			}
			if block.Type == "CERTIFICATE" {
				ders = append(ders, block.Bytes)
			}
		}
	}
	return ders, nil
}

func caFileName(i int) string { return fmt.Sprintf("%s%03d.crt", caFilePrefix, i+1) }

// caFileIndex orders caFileName's names by number, whatever their width.
func caFileIndex(name string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(name, caFilePrefix), "%d", &n)
	return n
}

// writeCADir replaces dir with one holding ders, one file each: a new
// directory beside it takes its place in one rename.
func writeCADir(dir string, ders [][]byte) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-")
	if err != nil {
		return fmt.Errorf("create a directory in %s: %w", parent, err)
	}
	defer os.RemoveAll(tmp) // the new one on failure, the old one on success
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for i, der := range ders {
		b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err := os.WriteFile(filepath.Join(tmp, caFileName(i)), b, 0o644); err != nil {
			return fmt.Errorf("write a certificate: %w", err)
		}
	}
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) { // no earlier one
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return fmt.Errorf("replace %s: %w", dir, err)
	}
	return nil
}

// editBundle returns the bundle data without the certificates of an
// earlier /init (between the markers, and those of old anywhere: a run of
// update-ca-certificates copies them in without the markers) and with
// pems between the markers: where the earlier ones were, else at the end.
// A certificate of old that pems adds again is kept where it stands
// outside the markers: it may have been there before any /init (the
// system's own), and dropping it would make the same /init, sent twice,
// change the bundle the second time. When that changes nothing it returns
// data itself.
func editBundle(data []byte, old [][]byte, pems []byte) []byte {
	var adding [][]byte
	for rest := pems; ; {
		var p *pem.Block
		if p, rest = pem.Decode(rest); p == nil {
			break
		}
		adding = append(adding, p.Bytes)
	}
	drop := func(der []byte) bool {
		same := func(d []byte) bool { return bytes.Equal(d, der) }
		return slices.ContainsFunc(old, same) && !slices.ContainsFunc(adding, same)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), len(data)+1)
	var block []string // the lines of a certificate being read
	inOurs := false
	at := -1 // where the earlier section was, in out
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case inOurs:
			inOurs = trimmed != caEnd
			continue
		case trimmed == caBegin:
			if block != nil { // a certificate cut short: keep it where it was
				out.WriteString(strings.Join(block, "\n") + "\n")
				block = nil
			}
			inOurs = true
			if at < 0 {
				at = out.Len()
			}
			continue
		case block == nil && trimmed == "-----BEGIN CERTIFICATE-----":
			block = []string{line}
			continue
		case block != nil:
			block = append(block, line)
			if trimmed != "-----END CERTIFICATE-----" {
				continue
			}
			text := strings.Join(block, "\n") + "\n"
			block = nil
			if p, _ := pem.Decode([]byte(text)); p != nil && drop(p.Bytes) {
				continue
			}
			out.WriteString(text)
			continue
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if block != nil { // a certificate cut short: keep it as it was
		out.WriteString(strings.Join(block, "\n") + "\n")
	}
	var section []byte
	if len(pems) > 0 {
		section = slices.Concat([]byte(caBegin+"\n"), pems, []byte(caEnd+"\n"))
	}
	rest := out.Bytes()
	if at < 0 {
		at = len(rest)
	}
	edited := slices.Concat(rest[:at], section, rest[at:])
	if bytes.Equal(edited, data) {
		return data
	}
	return edited
}

// readFileMode reads a file and its mode; a missing file is empty, 0644.
func readFileMode(path string) ([]byte, os.FileMode, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0o644, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	return b, st.Mode().Perm(), nil
}

// writeFileAtomic replaces path with data: a new file beside it, synced,
// renamed over it, so a reader sees the old file or the new one. A file
// that is a mount point of its own (a container's /etc/hosts) cannot be
// renamed over: it is rewritten in place.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	err = os.Rename(tmp, path)
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV) {
		os.Remove(tmp)
		ok = true
		return writeInPlace(path, data)
	}
	if err != nil {
		return err
	}
	ok = true
	return nil
}

// writeInPlace rewrites a file that cannot be replaced.
func writeInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
