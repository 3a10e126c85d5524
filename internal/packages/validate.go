package packages

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Bounds of a request.
const (
	maxPackages   = 100
	maxNameLen    = 214 // npm's limit, the longest of the four
	maxVersionLen = 128
	maxPathLen    = 4096
)

// validateManager refuses a manager envd does not know.
func validateManager(m Manager) error {
	switch m {
	case PIP, NPM, R, APT:
		return nil
	case "":
		return errorf(ErrInvalid, "manager is missing: give one of pip, npm, r, apt")
	}
	return errorf(ErrInvalid, "manager %q is unknown: give one of pip, npm, r, apt", string(m))
}

var (
	// PEP 508 names: ASCII letters and digits, with '.', '-', '_' inside.
	pipName = regexp.MustCompile(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9])$`)
	// Extras after a pip name: name[extra1,extra2].
	pipExtras = regexp.MustCompile(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9])(,(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9]))*$`)
	// npm names (validate-npm-package-name): URL-safe characters, no
	// leading '.' or '_', an optional @scope/; uppercase only in old
	// packages, which still install.
	npmName = regexp.MustCompile(`^(@[A-Za-z0-9~][A-Za-z0-9._~-]*/)?[A-Za-z0-9~][A-Za-z0-9._~-]*$`)
	// What npm takes for a tarball's file name.
	npmFileType = regexp.MustCompile(`(?i)[.](?:tgz|tar\.gz|tar)$`)
	// R package names: letters, digits and '.', at least two characters,
	// starting with a letter and not ending with a dot.
	rName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.]*[A-Za-z0-9]$`)
	// Debian package names: lowercase letters, digits, '+', '-', '.', at
	// least two characters, starting with a letter or digit; an optional
	// :architecture.
	aptName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(:[a-z0-9][a-z0-9-]*)?$`)

	// PEP 440 versions (its appendix's regular expression), exact: pip
	// installs name==version.
	pep440 = regexp.MustCompile(`^(?i:v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*` +
		`(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?` +
		`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
		`(?:[-_.]?dev[-_.]?[0-9]*)?` +
		`(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?)$`)
	// Debian versions: [epoch:]upstream[-revision], upstream starting
	// with a digit.
	debVersion = regexp.MustCompile(`^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$`)
	// R versions: at least two non-negative integers separated by '.' or
	// '-'.
	rVersion = regexp.MustCompile(`^[0-9]+(?:[.-][0-9]+)+$`)
	// npm dist-tags (latest, next, beta...).
	npmTag = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]*$`)
)

// nameRules says, for messages, what each manager accepts as a name.
var nameRules = map[Manager]string{
	PIP: "a PEP 508 name: ASCII letters, digits, '.', '-' and '_', starting and ending with a letter or digit (extras as name[extra,...])",
	NPM: "an npm name: URL-safe characters (letters, digits, '-', '.', '_', '~'), not starting with '.' or '_', not ending in .tgz, .tar or .tar.gz (npm reads those as files), at most 214 characters, optionally @scope/name",
	R:   "an R package name: letters, digits and '.', at least two characters, starting with a letter and not ending with '.'",
	APT: "a Debian package name: lowercase letters, digits, '+', '-' and '.', at least two characters, starting with a letter or digit and not ending with '-' (optionally name:arch)",
}

// versionRules says, for messages, what each manager accepts as a version.
var versionRules = map[Manager]string{
	PIP: "a PEP 440 version such as 1.2.3, 2.0rc1 or 1!2.0.post1 (installed exactly: name==version)",
	NPM: "a semver version (1.2.3), a range (^1.2, ~1.2.3, >=1 <2, 1.x, 1 - 2, a || b) or a dist-tag (latest)",
	R:   "an R version: numbers separated by '.' or '-', such as 1.0.2 or 0.4-1",
	APT: "a Debian version: [epoch:]upstream[-revision], the upstream part starting with a digit, such as 1:2.3-1",
}

// validateName checks one package name. field names it in the message;
// extras are allowed for pip installs only.
func validateName(m Manager, field, name string, install bool) error {
	if err := validateArg(field, name); err != nil {
		return err
	}
	if len(name) > maxNameLen {
		return errorf(ErrInvalid, "%s: %d characters: at most %d", field, len(name), maxNameLen)
	}
	ok := false
	switch m {
	case PIP:
		base, extras, hasExtras := strings.Cut(name, "[")
		ok = pipName.MatchString(base)
		if hasExtras {
			if !install {
				return errorf(ErrInvalid, "%s %q: extras name what to install with a package; give the name alone to remove it", field, name)
			}
			inner, closed := strings.CutSuffix(extras, "]")
			ok = ok && closed && pipExtras.MatchString(inner)
		}
	case NPM:
		// npm reads an unscoped name ending as a tarball does as the
		// path of one, in the project directory (npm-package-arg's
		// isFileType).
		ok = npmName.MatchString(name) && name != "node_modules" && name != "favicon.ico" &&
			(strings.HasPrefix(name, "@") || !npmFileType.MatchString(name))
	case R:
		ok = rName.MatchString(name)
	case APT:
		// apt-get reads NAME- as "remove NAME": no package of Debian's
		// ends so.
		base, _, _ := strings.Cut(name, ":")
		ok = aptName.MatchString(name) && !strings.HasSuffix(base, "-")
	}
	if !ok {
		return errorf(ErrInvalid, "%s %q: not %s", field, name, nameRules[m])
	}
	return nil
}

// validateVersion checks a version to install. withSource: the package
// comes from a local file (R takes versions only then).
func validateVersion(m Manager, field, v string, withSource bool) error {
	if err := validateArg(field, v); err != nil {
		return err
	}
	if len(v) > maxVersionLen {
		return errorf(ErrInvalid, "%s: %d characters: at most %d", field, len(v), maxVersionLen)
	}
	ok := false
	switch m {
	case PIP:
		ok = pep440.MatchString(v)
	case NPM:
		ok = validNpmRange(v) || npmTag.MatchString(v)
	case R:
		if !withSource {
			return errorf(ErrInvalid, "%s %q: R installs a given version only from a local source (a repository has only its newest): give the package's .tar.gz as source, or no version", field, v)
		}
		ok = rVersion.MatchString(v)
	case APT:
		ok = debVersion.MatchString(v) && !strings.HasSuffix(v, "-") && !strings.HasSuffix(v, ":")
	}
	if !ok {
		return errorf(ErrInvalid, "%s %q: not %s", field, v, versionRules[m])
	}
	return nil
}

// validateArg refuses what an installer could take for an option, and
// what no name or version holds.
func validateArg(field, s string) error {
	switch {
	case s == "":
		return errorf(ErrInvalid, "%s is empty", field)
	case strings.HasPrefix(s, "-"):
		return errorf(ErrInvalid, "%s %q: must not start with '-'", field, s)
	case strings.ContainsAny(s, "\x00\n\r\t"):
		return errorf(ErrInvalid, "%s %q: must not hold a control character", field, s)
	}
	return nil
}

// validatePath checks a path a request gives: absolute, clean of NUL.
func validatePath(field, p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", errorf(ErrInvalid, "%s: holds a NUL byte", field)
	case len(p) > maxPathLen:
		return "", errorf(ErrInvalid, "%s: %d bytes: at most %d", field, len(p), maxPathLen)
	case !filepath.IsAbs(p):
		return "", errorf(ErrInvalid, "%s %q: not an absolute path", field, p)
	}
	return filepath.Clean(p), nil
}

// validNpmRange tells whether v is a node-semver range: comparator sets
// joined by "||", each a hyphen range (a - b) or comparators separated by
// spaces, each an optional operator (<, <=, >, >=, =, ~, ~>, ^) and a
// partial version (1, 1.2, 1.2.3-pre+build, with x, X or * wildcards).
func validNpmRange(v string) bool {
	for set := range strings.SplitSeq(v, "||") {
		if strings.TrimSpace(set) == "" {
			return false
		}
		if lo, hi, ok := strings.Cut(set, " - "); ok {
			if !validNpmComparator("="+strings.TrimSpace(lo)) || !validNpmComparator("="+strings.TrimSpace(hi)) {
				return false
			}
			continue
		}
		op := "" // an operator written apart from its version: ">= 1.2"
		for c := range strings.FieldsSeq(set) {
			if slices.Contains(npmOps, c) && op == "" {
				op = c
				continue
			}
			if !validNpmComparator(op + c) {
				return false
			}
			op = ""
		}
		if op != "" {
			return false
		}
	}
	return true
}

func validNpmComparator(c string) bool {
	for _, op := range npmOps {
		if rest, ok := strings.CutPrefix(c, op); ok {
			c = rest
			break
		}
	}
	c = strings.TrimPrefix(c, "=")
	c = strings.TrimPrefix(c, "v")
	return npmPartial.MatchString(c)
}

// npmOps are node-semver's operators, longest first.
var npmOps = []string{"<=", ">=", "~>", "<", ">", "=", "~", "^"}

// npmPartial is a partial version: xr(.xr(.xr qualifier?)?)?
var npmPartial = regexp.MustCompile(`^(?:[xX*]|0|[1-9][0-9]*)` +
	`(?:\.(?:[xX*]|0|[1-9][0-9]*)` +
	`(?:\.(?:[xX*]|0|[1-9][0-9]*)` +
	`(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?)?$`)

// nameKey is how a manager compares names: pip normalizes them (PEP 503),
// R and npm compare them exactly, Debian's are lowercase already.
func nameKey(m Manager, name string) string {
	if m != PIP {
		return name
	}
	name, _, _ = strings.Cut(name, "[")
	return pipKey(name)
}

// pipKey is a PEP 503 normalized name: lowercase, runs of -_. as one -.
func pipKey(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r == '-' || r == '_' || r == '.' {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
	}
	return b.String()
}

// field formats a field of a list element for messages.
func field(list string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("%s[%d]", list, i)
	}
	return fmt.Sprintf("%s[%d].%s", list, i, name)
}
