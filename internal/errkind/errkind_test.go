package errkind_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/envd-dev/envd/internal/errkind"
)

var errMissing = errors.New("missing")

func TestKindAndCause(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"New":    errkind.New(errMissing, fs.ErrNotExist, "file %q is missing", "a"),
		"Errorf": errkind.Errorf(errMissing, "file %q is missing: %w", "a", fs.ErrNotExist),
	} {
		if !errors.Is(err, errMissing) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v matches neither its kind nor its cause", name, err)
		}
		if errors.Is(err, fs.ErrExist) {
			t.Errorf("%s: %v matches an unrelated error", name, err)
		}
		var e *errkind.Error
		if !errors.As(err, &e) || e.Kind != errMissing {
			t.Errorf("%s: errors.As gives %+v", name, e)
		}
	}
	if got := errkind.New(errMissing, nil, "file %q is missing", "a").Error(); got != `file "a" is missing` {
		t.Errorf("message %q", got)
	}
	if got := errkind.Errorf(errMissing, "gone: %w", fs.ErrNotExist).Error(); got != "gone: file does not exist" {
		t.Errorf("Errorf message %q", got)
	}
}
