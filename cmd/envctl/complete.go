package main

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

// Tab completion at exec-code's prompt: Tab asks the context's kernel for
// the completions at the cursor (envd's Complete), with the lines of the
// block typed so far as context. One match is inserted; several insert
// their longest common prefix, or, when that adds nothing, are listed (at
// most maxListed) above the prompt. Tab after only
// whitespace indents (four spaces). A kernel that is busy, gone or slow
// (completeTimeout) completes nothing.

// completeTimeout bounds one completion: the prompt stays responsive when
// another client runs code on the context.
const completeTimeout = 2 * time.Second

// maxListed bounds the matches listed.
const maxListed = 200

// completeFunc asks for the completions of code at cursor (code points).
type completeFunc func(code string, cursor int) (*client.Completion, error)

// completion is the outcome of one Tab.
type completion struct {
	line string
	pos  int      // bytes into line
	list []string // matches to show (several, nothing inserted)
}

// completeAt completes line at pos (bytes), the block's earlier lines
// being pending.
func completeAt(pending, line string, pos int, ask completeFunc) completion {
	same := completion{line: line, pos: pos}
	before := line[:pos]
	if strings.TrimSpace(before) == "" {
		return completion{line: before + "    " + line[pos:], pos: pos + 4}
	}
	base := utf8.RuneCountInString(pending)
	comp, err := ask(pending+line, base+utf8.RuneCountInString(before))
	if err != nil || comp == nil || len(comp.Matches) == 0 {
		return same
	}
	runes := []rune(line)
	start, end := comp.Start-base, comp.End-base
	if start < 0 || end < start || end > len(runes) {
		return same // the replacement would reach into earlier lines
	}
	replaced := string(runes[start:end])
	insert := comp.Matches[0]
	if len(comp.Matches) > 1 {
		insert = commonPrefix(comp.Matches)
		if utf8.RuneCountInString(insert) <= utf8.RuneCountInString(replaced) {
			same.list = comp.Matches
			return same
		}
	}
	head := string(runes[:start]) + insert
	return completion{line: head + string(runes[end:]), pos: len(head)}
}

// commonPrefix is the longest prefix (whole runes) of every s in ss.
func commonPrefix(ss []string) string {
	p := []rune(ss[0])
	for _, s := range ss[1:] {
		r := []rune(s)
		n := 0
		for n < len(p) && n < len(r) && p[n] == r[n] {
			n++
		}
		p = p[:n]
	}
	return string(p)
}

// columns lays out matches in columns for a terminal width wide: lines
// ending in "\r\n" (the terminal is raw while a line is read).
func columns(matches []string, width int) string {
	ms := append([]string(nil), matches...)
	sort.Strings(ms)
	more := 0
	if len(ms) > maxListed {
		more = len(ms) - maxListed
		ms = ms[:maxListed]
	}
	w := 0
	for _, m := range ms {
		w = max(w, utf8.RuneCountInString(m))
	}
	w += 2
	per := max(1, width/w)
	var b strings.Builder
	for i, m := range ms {
		b.WriteString(m)
		if (i+1)%per == 0 || i == len(ms)-1 {
			b.WriteString("\r\n")
		} else {
			b.WriteString(strings.Repeat(" ", w-utf8.RuneCountInString(m)))
		}
	}
	if more > 0 {
		b.WriteString("... and " + strconv.Itoa(more) + " more\r\n")
	}
	return b.String()
}

// completer asks envd for the completions in exec-code's context: the one
// its executions went to, else the language's default (python: the
// default Python context).
func (x *executor) completer(ctx context.Context) completeFunc {
	return func(code string, cursor int) (*client.Completion, error) {
		cctx, cancel := context.WithTimeout(ctx, completeTimeout)
		defer cancel()
		id := x.opts.ContextID
		if id == "" && x.opts.Language != "" && x.opts.Language != "python" {
			langs, err := x.e.c.Languages(cctx)
			if err != nil {
				return nil, err
			}
			for _, l := range langs {
				if l.Name == x.opts.Language || slices.Contains(l.Aliases, x.opts.Language) {
					id = l.DefaultContextID
				}
			}
			if id == "" {
				return nil, nil // no context yet: nothing to complete against
			}
		}
		return x.e.c.Complete(cctx, id, code, cursor)
	}
}

// autoComplete is term.Terminal's AutoCompleteCallback: Tab completes,
// other keys go on as usual. Terminal calls it without its lock held, so
// listing matches may write through it (which redraws the prompt).
func (l *termLines) autoComplete(line string, pos int, key rune) (string, int, bool) {
	if key != '\t' || l.complete == nil {
		return "", 0, false
	}
	c := completeAt(l.pending, line, pos, l.complete)
	if len(c.list) > 0 {
		width := 80
		if w, _, err := term.GetSize(int(l.out.Fd())); err == nil && w > 0 {
			width = w
		}
		l.t.Write([]byte(columns(c.list, width)))
	}
	return c.line, c.pos, true
}

// setPending gives the lines of the block typed before the one read next.
func (l *termLines) setPending(s string) { l.pending = s }
