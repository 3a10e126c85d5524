package interpreter_test

import (
	"strings"
	"testing"
)

// A rich result larger than the execution's event log (4 MiB by default),
// e.g. a 9 MB plotly figure or a big DataFrame's HTML, must reach the
// client: nothing was slow.
func TestResultBiggerThanLog(t *testing.T) {
	r := run(t, "", `from IPython.display import HTML, display
display(HTML("<p>" + "x" * (6 << 20) + "</p>"))
print("after")`)
	t.Logf("lines: %v stderr: %q", r.types(), short(r.err()))
	if len(r.results) != 1 {
		t.Errorf("got %d results, want 1", len(r.results))
	}
	if strings.Contains(r.err(), "read too slowly") {
		t.Errorf("a reader that kept up was told it read too slowly: %q", short(r.err()))
	}
	if r.out() != "after\n" {
		t.Errorf("stdout %q", r.out())
	}
}

// A failed cell whose error is larger than the event log (a 3 MB message
// appears in evalue and again in the traceback) must still be reported as
// an error: the SDK's execution.error comes from the error line only.
func TestErrorBiggerThanLog(t *testing.T) {
	r := run(t, "", `raise ValueError("x" * (3 << 20))`)
	t.Logf("lines: %v stderr: %q", r.types(), short(r.err()))
	if len(r.errors) != 1 || r.errors[0].Name != "ValueError" {
		t.Errorf("errors %d, want one ValueError: the failed cell reads as a success", len(r.errors))
	}
}
