// Package repo_test checks the repository itself: it must stand alone, so
// no file may link to or cite anything outside it, and every link and
// citation inside it must lead somewhere.
package repo_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// forbidden are strings no file may contain: citations of documents kept
// outside the repository. They are split so that this file does not match.
var forbidden = []string{
	".." + "/shared",
	"shared" + "/contracts",
	"envd-wire" + ".md",
	"code-interpreter-http" + ".md",
	"envd-orchestrator" + ".md",
}

// contractCitation matches a citation by section number of a contract that
// is not in the repository: the word contract, then a section number, with
// or without a section sign or the word section between them. The
// repository's own documents are cited by file and heading.
var contractCitation = regexp.MustCompile(`(?i)\bcontract\s*\(?\s*(?:§\s*|section\s*)?\d`)

// docCitation matches a citation of one of the repository's documents by
// path, with the heading it names when it names one: the path followed by
// a comma and the heading in double quotes, or by the quoted heading in
// parentheses.
var docCitation = regexp.MustCompile(`\bdocs/([A-Za-z0-9_.-]+\.md)\b(?:,\s*"([^"]+)"|\s*\(\s*"([^"]+)"\s*\))?`)

func TestNoFileLinksOutside(t *testing.T) {
	root := repoRoot(t)
	files := repoFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("found only %d files under %s: is this the repository?", len(files), root)
	}
	headings := map[string]*anchors{} // by path relative to root, read on demand
	anchorsOf := func(rel string) *anchors {
		if a, ok := headings[rel]; ok {
			return a
		}
		a := readAnchors(t, filepath.Join(root, filepath.FromSlash(rel)))
		headings[rel] = a
		return a
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if isBinary(b) {
			continue
		}
		text := string(b)
		for _, s := range forbidden {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s:%d: cites %q, outside the repository: cite docs/ instead", rel, lineOf(text, i), s)
			}
		}
		// On the text without comment markers, so that a citation wrapped
		// in a comment is seen too.
		for _, m := range contractCitation.FindAllString(commentBreak.ReplaceAllString(text, " "), -1) {
			t.Errorf("%s: %q cites a contract by section number: cite the heading of a file in docs/ instead", rel, m)
		}
		checkDocCitations(t, root, rel, text, anchorsOf)
		if strings.HasSuffix(rel, ".md") {
			checkMarkdownLinks(t, root, rel, text, anchorsOf)
		}
	}
}

// checkDocCitations checks every mention of docs/<file>.md: the file must
// exist, and a heading named with it must be one of that file's. Comment
// markers at the start of lines are dropped first, so that a citation that
// wraps in a comment is read whole.
func checkDocCitations(t *testing.T, root, rel, text string, anchorsOf func(string) *anchors) {
	t.Helper()
	flat := commentBreak.ReplaceAllString(text, " ")
	for _, m := range docCitation.FindAllStringSubmatch(flat, -1) {
		target := "docs/" + m[1]
		if !isFile(filepath.Join(root, filepath.FromSlash(target))) {
			t.Errorf("%s: cites %s, which does not exist", rel, target)
			continue
		}
		heading := m[2] + m[3]
		if heading == "" {
			continue
		}
		if !anchorsOf(target).hasHeading(heading) {
			t.Errorf("%s: cites the heading %q of %s, which has no such heading", rel, heading, target)
		}
	}
}

// commentBreak is a line break with the comment marker of the next line.
var commentBreak = regexp.MustCompile(`\s*\n\s*(?://+|#+|\*+)?\s*`)

var (
	fence      = regexp.MustCompile("^ {0,3}(```|~~~)")
	inlineCode = regexp.MustCompile("`+[^`\n]*`+")
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	htmlAttr   = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// checkMarkdownLinks checks the links of one markdown file: a relative
// target must stay inside the repository and exist, and an anchor must name
// a heading of its markdown file.
func checkMarkdownLinks(t *testing.T, root, rel, text string, anchorsOf func(string) *anchors) {
	t.Helper()
	for _, link := range markdownLinks(text) {
		target := strings.TrimSuffix(strings.TrimPrefix(link.target, "<"), ">")
		if target == "" || scheme.MatchString(target) {
			continue // a web address: not a file of the repository
		}
		where := fmt.Sprintf("%s:%d: link %q", rel, link.line, link.target)
		p, frag, _ := strings.Cut(target, "#")
		p, _, _ = strings.Cut(p, "?")
		if up, err := url.PathUnescape(p); err == nil {
			p = up
		}
		var dest string // relative to root, slash-separated
		switch {
		case p == "":
			dest = rel
		case strings.HasPrefix(p, "/"):
			dest = path.Clean(strings.TrimPrefix(p, "/"))
		default:
			dest = path.Clean(path.Join(path.Dir(rel), p))
		}
		if dest == ".." || strings.HasPrefix(dest, "../") {
			t.Errorf("%s leads outside the repository", where)
			continue
		}
		full := filepath.Join(root, filepath.FromSlash(dest))
		if _, err := os.Stat(full); err != nil {
			t.Errorf("%s: %s does not exist", where, dest)
			continue
		}
		if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest).has(frag) {
			t.Errorf("%s: %s has no heading with the anchor #%s", where, dest, frag)
		}
	}
}

type mdLink struct {
	target string
	line   int
}

// markdownLinks returns the link targets of a markdown text, outside code
// blocks and code spans: inline links and images, reference definitions,
// and href/src attributes of HTML.
func markdownLinks(text string) []mdLink {
	prose := inlineCode.ReplaceAllStringFunc(blankCode(text), func(s string) string {
		return strings.Repeat(" ", len(s)) // keep offsets, hence line numbers
	})
	var out []mdLink
	for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlAttr} {
		for _, m := range re.FindAllStringSubmatchIndex(prose, -1) {
			out = append(out, mdLink{prose[m[2]:m[3]], lineOf(prose, m[0])})
		}
	}
	return out
}

// blankCode empties the lines of fenced code blocks, keeping the others
// where they are.
func blankCode(text string) string {
	lines := strings.Split(text, "\n")
	open := "" // the marker of the block the line is in
	for i, ln := range lines {
		m := fence.FindStringSubmatch(ln)
		switch {
		case open == "" && m != nil:
			open = m[1]
		case open == "":
			continue
		case m != nil && m[1] == open && strings.TrimSpace(ln) == open:
			open = ""
		}
		lines[i] = ""
	}
	return strings.Join(lines, "\n")
}

// anchors are the headings of a markdown file and the anchors GitHub gives
// them.
type anchors struct {
	titles []string        // heading texts, normalized for comparison
	ids    map[string]bool // anchors: slugs of headings, and explicit ids
}

func (a *anchors) has(frag string) bool {
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	return a.ids[strings.ToLower(frag)]
}

func (a *anchors) hasHeading(title string) bool {
	return slices.Contains(a.titles, normalizeTitle(title))
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	explicitID = regexp.MustCompile(`(?i)<a\s+(?:name|id)\s*=\s*"([^"]+)"`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// readAnchors reads the headings of a markdown file.
func readAnchors(t *testing.T, file string) *anchors {
	t.Helper()
	a := &anchors{ids: map[string]bool{}}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Errorf("read %s: %v", file, err)
		return a
	}
	seen := map[string]int{}
	for _, ln := range strings.Split(blankCode(string(b)), "\n") {
		for _, m := range explicitID.FindAllStringSubmatch(ln, -1) {
			a.ids[strings.ToLower(m[1])] = true
		}
		m := atxHeading.FindStringSubmatch(ln)
		if m == nil {
			continue
		}
		title := linkText.ReplaceAllString(m[1], "$1")
		a.titles = append(a.titles, normalizeTitle(title))
		slug := slugify(title)
		if n := seen[slug]; n > 0 {
			a.ids[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			a.ids[slug] = true
		}
		seen[slug]++
	}
	return a
}

// normalizeTitle is a heading's text as a citation may quote it: without
// code marks, case or repeated spaces.
func normalizeTitle(s string) string {
	s = strings.ReplaceAll(s, "`", "")
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// slugify is GitHub's anchor for a heading: lower case, punctuation other
// than '-' and '_' removed, spaces turned into '-'.
func slugify(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// repoRoot is the repository's root: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if !isFile(filepath.Join(root, "go.mod")) {
		t.Fatalf("%s has no go.mod: not the repository's root", root)
	}
	return root
}

// repoFiles lists the repository's files, relative to root with '/': what
// git tracks or would track (untracked files that are not ignored), else,
// outside a git checkout, every file but those of .git, node_modules, bin
// and .tmp.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" && isFile(filepath.Join(root, filepath.FromSlash(f))) && !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		return files
	} else {
		t.Logf("git ls-files: %v; walking the tree instead", err)
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules":
				return filepath.SkipDir
			}
			if p == filepath.Join(root, "bin") || p == filepath.Join(root, ".tmp") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// isBinary tells a file that is not text by a NUL byte in its first 8 KiB,
// as git does.
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

func lineOf(text string, offset int) int {
	return 1 + strings.Count(text[:offset], "\n")
}
