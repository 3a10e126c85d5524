package packages_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/packages/pkgtest"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// hangingIndex is a package index that accepts connections and never
// answers: pip waits on it until it is killed. It returns the index's URL,
// a channel that receives each connection that sent a request (pip's; not
// envd's check that the index is reachable, which sends nothing), and one
// that receives each such connection's end (pip gone).
func hangingIndex(t *testing.T) (url string, accepted <-chan net.Conn, closed <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan net.Conn, 1)
	gone := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := c.Read(make([]byte, 1)); err != nil {
					return // closed without a request: envd's check
				}
				acc <- c
				io.Copy(io.Discard, c) // until pip's end closes it
				gone <- struct{}{}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String() + "/simple", acc, gone
}

// hanging returns an Installer whose pip waits on a hanging index, and
// the index's channels.
func hanging(t *testing.T, owner *identity.User, venv string, clock quartz.Clock) (*packages.Installer, <-chan net.Conn, <-chan struct{}) {
	url, acc, gone := hangingIndex(t)
	in := packages.New(packages.Options{
		Logger: testLogger(), PythonVenv: venv, Clock: clock,
		DefaultUser: func() (*identity.User, error) { return owner, nil },
		Env: func() map[string]string {
			return map[string]string{"PIP_INDEX_URL": url, "PIP_TIMEOUT": "3600", "PIP_RETRIES": "0"}
		},
	})
	t.Cleanup(func() { in.Close(context.Background()) })
	return in, acc, gone
}

// TestInstallerKilled: an installer still running at the request's
// deadline is killed, its whole process group, and the operation says so;
// so is one running when the Installer closes (envd shuts down). The
// deadline is timed by the Installer's clock.
func TestInstallerKilled(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	venv := pkgtest.Venv(t, owner)
	req := packages.InstallRequest{Manager: packages.PIP, Packages: []packages.Spec{{Name: "envd-pkgtest-hang"}}, User: owner}

	t.Run("at the deadline", func(t *testing.T) {
		t.Parallel()
		clock := quartz.NewMock(t)
		in, accepted, gone := hanging(t, owner, venv, clock)
		// The deadline is an hour away: only the mock clock reaches it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		op, err := in.Install(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		testutil.RequireReceiveWithin(t, accepted, testutil.Program) // pip is waiting on the index
		if d, w := clock.AdvanceNext(); d < 59*time.Minute {
			t.Fatalf("the next timer was %v away, not the deadline", d)
		} else {
			w.MustWait(testutil.Context(t, testutil.Wait))
		}
		testutil.RequireClosed(t, op.Done(), "the operation's end")
		testutil.RequireReceive(t, gone) // pip's connection closed: pip is dead
		_, err = op.Result()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pip install was killed at the request's deadline") {
			t.Fatalf("result: %v", err)
		}
	})

	t.Run("at close", func(t *testing.T) {
		t.Parallel()
		in, accepted, gone := hanging(t, owner, venv, nil)
		op, err := in.Install(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		testutil.RequireReceiveWithin(t, accepted, testutil.Program)
		if err := in.Close(testutil.Context(t, testutil.Wait)); err != nil {
			t.Fatal(err)
		}
		testutil.RequireClosed(t, op.Done(), "the operation's end")
		testutil.RequireReceive(t, gone)
		if _, err := op.Result(); !errors.Is(err, packages.ErrUnavailable) || !strings.Contains(err.Error(), "pip install was killed: envd is shutting down") {
			t.Fatalf("result: %v", err)
		}
		if _, err := in.Install(context.Background(), req); !errors.Is(err, packages.ErrUnavailable) {
			t.Fatalf("install after close: %v", err)
		}
	})
}

// TestOneOperationAtATime: an operation waits while another of its
// manager runs, runs once that one ends, and is dropped (with nothing run)
// if its caller stops waiting first.
func TestOneOperationAtATime(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	venv := pkgtest.Venv(t, owner)
	in := packages.New(packages.Options{Logger: testLogger(), PythonVenv: venv, DefaultUser: func() (*identity.User, error) { return owner, nil }})
	t.Cleanup(func() { in.Close(context.Background()) })
	req := packages.RemoveRequest{Manager: packages.PIP, Names: []string{"envd-pkgtest-absent"}, User: owner}

	release := packages.HoldTurn(in, packages.PIP)
	ctx, cancel := context.WithCancel(context.Background())
	op, err := in.Remove(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	testutil.RequireOpen(t, op.Done(), "the waiting operation's end")
	cancel()
	testutil.RequireClosed(t, op.Done(), "the dropped operation's end")
	if _, err := op.Result(); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "pip: gave up waiting for another pip operation to end") {
		t.Fatalf("dropped: %v", err)
	}
	if n := op.Output().End(); n != 0 {
		t.Errorf("the dropped operation wrote %d bytes: it ran", n)
	}

	op, err = in.Remove(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	testutil.RequireOpen(t, op.Done(), "the waiting operation's end")
	release()
	testutil.RequireClosed(t, op.Done(), "the operation's end")
	if _, err := op.Result(); !errors.Is(err, packages.ErrNotFound) {
		t.Fatalf("after its turn came: %v", err)
	}
}

// TestNpmDirNotTheUsers: npm for a user in a directory that user may not
// enter is the request's mistake (ErrPermission, saying so), not envd being
// unavailable.
func TestNpmDirNotTheUsers(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	if owner.UID == 0 {
		t.Skip("needs an account other than root (scripts/install-deps.sh makes user)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	dir := t.TempDir() // root's, 0700: the user may not enter it
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	in := packages.New(packages.Options{Logger: testLogger(), DefaultUser: func() (*identity.User, error) { return owner, nil }})
	t.Cleanup(func() { in.Close(context.Background()) })
	req := packages.InstallRequest{Manager: packages.NPM, Packages: []packages.Spec{{Name: "left-pad"}}, User: owner, Dir: dir}
	ctx := testutil.Context(t, testutil.Program)
	op, err := in.Install(ctx, req)
	if err == nil {
		<-op.Done()
		_, err = op.Result()
	}
	if !errors.Is(err, packages.ErrPermission) || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), owner.Name) {
		t.Fatalf("npm in %s as %s: %v, want permission denied naming the user", dir, owner.Name, err)
	}
}

// TestDeadlineCountsTheWait: the request's deadline is the installer's
// (docs/packages.md): an operation that waited for its turn gets what is
// left of it, not a whole new deadline counted from when its turn came.
func TestDeadlineCountsTheWait(t *testing.T) {
	t.Parallel()
	// pip's environment: only its python is looked at before the
	// operation runs.
	venv := t.TempDir()
	if err := os.Mkdir(venv+"/bin", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pkgtest.Python, venv+"/bin/python"); err != nil {
		t.Fatal(err)
	}
	me, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	trap := clock.Trap().AfterFunc("packages", "deadline")
	defer trap.Close()
	in := packages.New(packages.Options{Logger: testLogger(), PythonVenv: venv, Clock: clock, DefaultUser: func() (*identity.User, error) { return me, nil }})
	t.Cleanup(func() { in.Close(context.Background()) })

	const deadline, wait = 4 * time.Second, 3 * time.Second
	release := packages.HoldTurn(in, packages.PIP)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	op, err := in.Remove(ctx, packages.RemoveRequest{Manager: packages.PIP, Names: []string{"envd-pkgtest-absent"}, User: me})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(wait) // another operation of pip runs meanwhile
	release()
	call := trap.MustWait(testutil.Context(t, testutil.Wait))
	left := deadline - wait
	if call.Duration > left+500*time.Millisecond {
		t.Errorf("the operation may run %v once its turn came, %v after the request's deadline (%v away when it was made, of which it waited %v)",
			call.Duration.Round(10*time.Millisecond), (call.Duration - left).Round(10*time.Millisecond), deadline, wait)
	}
	call.MustRelease(testutil.Context(t, testutil.Wait))
	testutil.RequireClosed(t, op.Done(), "the operation's end")
}
