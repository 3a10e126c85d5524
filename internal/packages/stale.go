package packages

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// kernelsTimeout bounds the questions to the code engine.
const kernelsTimeout = 10 * time.Second

// staleChange is a changed package and what kernels load of it.
type staleChange struct {
	Change
	modules []string
}

// stale asks the code engine which contexts of lang loaded a package that
// changed between was and now (listings with modules), tells each so, and
// returns them. A package that was not there before cannot have been
// loaded, and is left out.
func (in *Installer) stale(ctx context.Context, lang string, m Manager, was, now []Package) []StaleContext {
	km := PIP
	if lang == "r" {
		km = R
	}
	b, a := effective(km, was), effective(km, now)
	byModule := map[string][]*staleChange{}
	for _, c := range changes(km, was, now) {
		if c.Old == "" {
			continue
		}
		k := nameKey(km, c.Name)
		sc := &staleChange{Change: c}
		mods := map[string]bool{}
		for _, p := range []Package{b[k], a[k]} {
			for _, mod := range p.modules {
				mods[mod] = true
			}
		}
		sc.modules = slices.Sorted(maps.Keys(mods))
		for _, mod := range sc.modules {
			byModule[mod] = append(byModule[mod], sc)
		}
	}
	if len(byModule) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, kernelsTimeout)
	defer cancel()
	loaded, err := in.opts.Kernels.Loaded(ctx, lang, slices.Sorted(maps.Keys(byModule)))
	if err != nil {
		in.log.Warn("cannot ask which contexts loaded the changed packages", "lang", lang, "manager", string(m), "error", err)
		return nil
	}
	var out []StaleContext
	for _, id := range slices.Sorted(maps.Keys(loaded)) {
		var mods []string
		var chs []*staleChange
		for _, mod := range loaded[id] {
			scs, ok := byModule[mod]
			if !ok || slices.Contains(mods, mod) {
				continue
			}
			mods = append(mods, mod)
			for _, sc := range scs {
				if !slices.Contains(chs, sc) {
					chs = append(chs, sc)
				}
			}
		}
		if len(chs) == 0 {
			continue
		}
		slices.Sort(mods)
		slices.SortFunc(chs, func(x, y *staleChange) int { return strings.Compare(x.Name, y.Name) })
		msg := staleMessage(lang, chs)
		if err := in.opts.Kernels.Notice(id, msg); err != nil {
			in.log.Warn("cannot tell a context its packages changed", "context_id", id, "error", err)
		}
		out = append(out, StaleContext{ID: id, Modules: mods, Message: msg})
	}
	return out
}

// staleMessage says what changed after a context loaded it:
//
//	package X changed from 1.0 to 2.0 after this context imported it;
//	restart the context to use the new version
func staleMessage(lang string, chs []*staleChange) string {
	verb := "imported"
	if lang == "r" {
		verb = "loaded"
	}
	what := func(c *staleChange) string {
		if c.New == "" {
			return fmt.Sprintf("%s %s was removed", c.Name, c.Old)
		}
		return fmt.Sprintf("%s changed from %s to %s", c.Name, c.Old, c.New)
	}
	if len(chs) == 1 {
		c := chs[0]
		if c.New == "" {
			return fmt.Sprintf("package %s after this context %s it; restart the context to unload it", what(c), verb)
		}
		return fmt.Sprintf("package %s after this context %s it; restart the context to use the new version", what(c), verb)
	}
	parts := make([]string, len(chs))
	for i, c := range chs {
		parts[i] = what(c)
	}
	return fmt.Sprintf("packages changed after this context %s them: %s; restart the context to use what is installed now", verb, strings.Join(parts, ", "))
}
