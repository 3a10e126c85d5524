package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"
)

// lineReader reads the lines of exec-code's prompt.
type lineReader interface {
	// readLine shows prompt and returns the next line without its end.
	// It fails with io.EOF at the end of the input (Ctrl-D), and with
	// errInterrupted when Ctrl-C drops the line being typed.
	readLine(prompt string) (string, error)
}

// blockLines is a lineReader that wants the lines of the block typed so
// far before it reads the next one (for completion).
type blockLines interface {
	setPending(string)
}

// errInterrupted is Ctrl-C at the prompt.
var errInterrupted = errors.New("interrupted")

// plainLines reads lines as they come, for a terminal whose output goes
// elsewhere: the terminal itself edits them.
type plainLines struct {
	in  *bufio.Reader
	out io.Writer
}

func newPlainLines(in io.Reader, out io.Writer) *plainLines {
	return &plainLines{in: bufio.NewReader(in), out: out}
}

func (p *plainLines) readLine(prompt string) (string, error) {
	io.WriteString(p.out, prompt)
	line, err := p.in.ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// termLines reads lines with editing (arrows, Home/End, Ctrl-A/E/K/U/W)
// and history (Up/Down, kept for the session) through
// golang.org/x/term's Terminal, and Tab completion (complete.go). The terminal is raw only while a line is
// read: while code runs, Ctrl-C is SIGINT and interrupts it, and output
// gets the terminal's own newline handling.
type termLines struct {
	in, out *os.File
	t       *term.Terminal
	keys    *ctrlCReader
	hist    *history
	// complete answers Tab (see complete.go); nil: Tab does nothing.
	complete completeFunc
	// pending is the block's lines before the one being read.
	pending string
}

func newTermLines(in, out *os.File) *termLines {
	keys := &ctrlCReader{r: in}
	hist := &history{}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{keys, out}, "")
	t.History = hist
	l := &termLines{in: in, out: out, t: t, keys: keys, hist: hist}
	t.AutoCompleteCallback = l.autoComplete
	return l
}

func (l *termLines) readLine(prompt string) (string, error) {
	fd := int(l.in.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return "", err
	}
	defer term.Restore(fd, old)
	// A terminal that reports no size keeps Terminal's 80x24.
	if w, h, err := term.GetSize(int(l.out.Fd())); err == nil && w > 0 && h > 0 {
		l.t.SetSize(w, h)
	}
	l.t.SetPrompt(prompt)
	line, err := l.t.ReadLine()
	if l.keys.takeInterrupt() {
		l.hist.dropLast()
		return "", errInterrupted
	}
	return line, err
}

// ctrlCReader hands a terminal's keys to term.Terminal, whose ReadLine
// would end the input at Ctrl-C. It gives Enter in its place instead, and
// remembers it: the line read is then dropped (takeInterrupt).
type ctrlCReader struct {
	r         io.Reader
	buf       []byte // read from r, not yet given
	err       error  // r's error, given once buf is empty
	interrupt bool   // the last Enter given was a Ctrl-C
}

const keyCtrlC = 3

func (c *ctrlCReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.buf) == 0 {
		if c.err != nil {
			err := c.err
			c.err = nil
			return 0, err
		}
		b := make([]byte, len(p))
		n, err := c.r.Read(b)
		c.buf, c.err = b[:n], err
		if n == 0 {
			c.err = nil
			return 0, err
		}
	}
	if c.buf[0] == keyCtrlC {
		c.buf = c.buf[1:]
		c.interrupt = true
		p[0] = '\r'
		return 1, nil
	}
	end := len(c.buf)
	if i := bytes.IndexByte(c.buf, keyCtrlC); i >= 0 {
		end = i
	}
	n := copy(p, c.buf[:end])
	c.buf = c.buf[n:]
	return n, nil
}

// takeInterrupt tells whether the line just read ended with Ctrl-C, and
// forgets it.
func (c *ctrlCReader) takeInterrupt() bool {
	i := c.interrupt
	c.interrupt = false
	return i
}

// history is term.Terminal's History for the session: the lines typed,
// without empty lines and repeats (as readline's ignoredups), at most
// maxHistory.
type history struct {
	mu      sync.Mutex
	lines   []string // oldest first
	lastNew bool     // the last Add added a line
}

const maxHistory = 1000

func (h *history) Add(line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastNew = false
	if strings.TrimSpace(line) == "" || (len(h.lines) > 0 && h.lines[len(h.lines)-1] == line) {
		return
	}
	if len(h.lines) == maxHistory {
		h.lines = h.lines[1:]
	}
	h.lines = append(h.lines, line)
	h.lastNew = true
}

func (h *history) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lines)
}

// At returns the idx-th line before the last (0: the last).
func (h *history) At(idx int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lines[len(h.lines)-1-idx]
}

// dropLast forgets the line the last Add added, if it added one.
func (h *history) dropLast() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastNew {
		h.lines = h.lines[:len(h.lines)-1]
		h.lastNew = false
	}
}
