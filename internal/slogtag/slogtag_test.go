package slogtag_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/slogtag"
)

func TestTags(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := slogtag.Wrap(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	log := slog.New(h)
	comp := log.With("component", "x") // made before the tags are known
	comp.Info("before")
	h.Set(slog.String("sandbox_id", "sbx"), slog.String("template_id", "tpl"))
	comp.Info("after", "n", 1)
	log.Info("root")
	log.WithGroup("g").Info("grouped", "k", "v")
	h.Set(slog.String("sandbox_id", "sbx2"))
	comp.Info("changed")
	want := []string{
		`level=INFO msg=before component=x`,
		`level=INFO msg=after component=x n=1 sandbox_id=sbx template_id=tpl`,
		`level=INFO msg=root sandbox_id=sbx template_id=tpl`,
		`level=INFO msg=grouped g.k=v g.sandbox_id=sbx g.template_id=tpl`,
		`level=INFO msg=changed component=x sandbox_id=sbx2`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !h.Enabled(t.Context(), slog.LevelInfo) || h.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("Enabled is not the wrapped handler's")
	}
}
