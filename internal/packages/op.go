package packages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/internal/outbuf"
)

// Op is a running install or remove. Its output (KindStdout, KindStderr,
// and KindStarted before each command) goes to Output, which is closed
// once Result is set.
type Op struct {
	out  *outbuf.Log
	done chan struct{}

	mu  sync.Mutex
	res *Result // guarded by mu; set before done is closed
	err error   // guarded by mu
}

// Output is the operation's output log: follow it with a Cursor from
// outbuf.Oldest; io.EOF means the operation has ended.
func (o *Op) Output() *outbuf.Log { return o.out }

// Done is closed when the operation has ended.
func (o *Op) Done() <-chan struct{} { return o.done }

// Result is the operation's outcome, once Done is closed (nil, nil
// before).
func (o *Op) Result() (*Result, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.res, o.err
}

func (o *Op) finish(res *Result, err error) {
	o.mu.Lock()
	o.res, o.err = res, err
	o.mu.Unlock()
	o.out.Close()
	close(o.done)
}

// StartedCommand is what a KindStarted record holds, as JSON.
type StartedCommand struct {
	Command []string `json:"command"`
	User    string   `json:"user"`
}

func (o *Op) started(c command) {
	user := ""
	if c.user != nil {
		user = c.user.Name
	}
	b, _ := json.Marshal(StartedCommand{Command: c.argv, User: user})
	o.out.Write(KindStarted, b)
}

// plan is an operation, checked and ready to run.
type plan struct {
	m    Manager
	verb string // install, remove: for messages
	t    *target
	// commands returns what to run, given what the manager saw before: a
	// removal checks there that its names are installed. No command means
	// there is nothing to do.
	commands func(before []Package) ([]command, error)
	// probes are the listings of what kernels load that the operation may
	// change; nil: none.
	probes []probe
	// network says, given what the manager saw before, whether the
	// commands fetch from a package index (see reach.go); nil: they do
	// not.
	network func(before []Package) netNeed
	// indexes returns the indexes the manager would fetch from; nil, or
	// none returned: nothing to check.
	indexes func(ctx context.Context) ([]index, error)
	// fetches: the request names packages to fetch from an index (no
	// local source): the indexes are checked early, beside the listing.
	fetches bool
}

// probe lists, with what kernels load of them, the packages of one
// language that an operation may change.
type probe struct {
	lang string // python, r
	// own: the manager's own listing (before and after) is this one.
	own  bool
	list func(ctx context.Context) ([]Package, error)
}

// start runs p on a goroutine of in.
func (in *Installer) start(ctx context.Context, p *plan) (*Op, error) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil, errorf(ErrUnavailable, "envd is shutting down: no new package operations")
	}
	in.ops.Add(1)
	in.mu.Unlock()
	// The request's deadline bounds the operation, the wait for its turn
	// included: execute gives it what is left once its turn comes.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(in.opts.MaxDuration)
	}
	op := &Op{out: outbuf.New(in.opts.OutputBytes), done: make(chan struct{})}
	go func() {
		defer in.ops.Done()
		res, err := in.execute(ctx, deadline, p, op)
		if err != nil {
			in.log.Info("package operation failed", "manager", string(p.m), "op", p.verb, "error", err)
		} else {
			in.log.Info("package operation done", "manager", string(p.m), "op", p.verb, "changes", len(res.Changes), "stale_contexts", len(res.Stale))
		}
		op.finish(res, err)
	}()
	return op, nil
}

// execute waits for the manager's turn (as long as ctx lasts), then runs
// p until deadline: the listing before, the commands, the listing after,
// and the stale contexts. Once it runs, ctx's end no longer stops it.
func (in *Installer) execute(ctx context.Context, deadline time.Time, p *plan, op *Op) (*Result, error) {
	turn := in.turns[p.m]
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return nil, errorf(ctx.Err(), "%s: gave up waiting for another %s operation to end: %v", p.m, p.m, ctx.Err())
	case <-in.base.Done():
		return nil, errorf(ErrUnavailable, "envd is shutting down: no new package operations")
	}
	defer func() { <-turn }()
	life := time.Until(deadline)
	ctx, cancel := context.WithCancelCause(in.base)
	defer cancel(nil)
	timer := in.opts.Clock.AfterFunc(life, func() { cancel(context.DeadlineExceeded) }, "packages", "deadline")
	defer timer.Stop("packages", "deadline")

	// An install of names is checked for an index while the listing
	// before it runs: each asks the manager (a Python or node start).
	var early <-chan string
	if p.fetches && p.indexes != nil {
		ectx, ecancel := context.WithCancel(ctx)
		c := make(chan string, 1)
		go func() { c <- in.unreachableIndexes(ectx, p) }()
		early = c
		defer func() {
			ecancel()
			if early != nil {
				<-early // not taken: it ends at once, cancelled
			}
		}()
	}
	before, err := p.t.list(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("before the %s: %w", p.verb, err)
	}
	probed := make([][]Package, len(p.probes))
	for i, pr := range p.probes {
		if pr.own || in.opts.Kernels == nil {
			continue
		}
		if probed[i], err = pr.list(ctx); err != nil {
			in.log.Warn("cannot list what kernels load; stale contexts will not be told", "lang", pr.lang, "error", err)
			probed[i] = nil
		}
	}
	cmds, err := p.commands(before)
	if err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		return &Result{}, nil
	}
	need := netNone
	if p.network != nil {
		need = p.network(before)
	}
	if need == netNeeded {
		var why string
		if early != nil {
			select {
			case why = <-early:
				early = nil
			case <-ctx.Done():
			}
		} else {
			why = in.unreachableIndexes(ctx, p)
		}
		if why != "" {
			return nil, errorf(ErrFailed, "%s; %s did not run (%s)", why, commandName(cmds[len(cmds)-1]), localHint[p.m])
		}
	}
	for _, c := range cmds {
		op.started(c)
		info, err := run(ctx, c, op.out.Write)
		if err != nil {
			return nil, startError(p.verb, c, err)
		}
		if err := exitError(ctx, commandName(c), info); err != nil {
			if need == netMaybe && errors.Is(err, ErrFailed) {
				// A local file's dependencies come from an index: say
				// when none was there to give them.
				if why := in.unreachableIndexes(ctx, p); why != "" {
					return nil, errorf(ErrFailed, "%s; %w", why, err)
				}
			}
			return nil, err
		}
	}
	after, err := p.t.list(ctx, true)
	if err != nil {
		return nil, errorf(ErrInternal, "the %s succeeded, but listing the packages afterwards failed: %v", p.verb, err)
	}
	res := &Result{Changes: changes(p.m, before, after)}
	if in.opts.Kernels == nil {
		return res, nil
	}
	for i, pr := range p.probes {
		var was, now []Package
		switch {
		case pr.own:
			was, now = before, after
		case probed[i] == nil:
			continue
		default:
			was = probed[i]
			if now, err = pr.list(ctx); err != nil {
				in.log.Warn("cannot list what kernels load; stale contexts will not be told", "lang", pr.lang, "error", err)
				continue
			}
		}
		res.Stale = append(res.Stale, in.stale(ctx, pr.lang, p.m, was, now)...)
	}
	return res, nil
}

// localHint says, after "did not run", how to install without an index.
var localHint = map[Manager]string{
	PIP: "a wheel or sdist file, or a directory of them, as source needs no index",
	NPM: "an npm tarball as source needs no registry",
	R:   "an R source package as source needs no repository",
	APT: "a .deb file as source needs no archive",
}

// unreachableIndexes checks the indexes p's manager would fetch from (see
// reach.go): "" when one answers, or when there is nothing to check or
// the manager could not say which (then the manager runs, and says what
// it finds).
func (in *Installer) unreachableIndexes(ctx context.Context, p *plan) string {
	if p.indexes == nil {
		return ""
	}
	idx, err := p.indexes(ctx)
	if err != nil {
		if ctx.Err() == nil { // not merely cancelled: no longer needed
			in.log.Warn("cannot tell which package indexes the installer would use; not checking them", "manager", string(p.m), "error", err)
		}
		return ""
	}
	return unreachable(ctx, idx)
}

// commandName names a command in messages: "pip install", "apt-get
// purge", "Rscript (install.packages)".
func commandName(c command) string {
	name := c.argv[0][strings.LastIndexByte(c.argv[0], '/')+1:]
	switch {
	case len(c.argv) > 3 && c.argv[1] == "-m" && c.argv[2] == "pip":
		return "pip " + c.argv[3]
	case name == "Rscript":
		return "Rscript"
	case len(c.argv) > 1:
		return name + " " + c.argv[1]
	}
	return name
}
