package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/envd-dev/envd/client"
)

// These examples run against a real envd, whose address TestMain puts in
// ENVD_ADDR (zero: client.DefaultAddr).

func ExampleClient_Start() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	p, err := c.Start(ctx, client.Command{
		Name: "/bin/sh",
		Args: []string{"-c", "for i in 1 2 3; do echo line $i; done; exit 3"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("started pid", p.PID > 0)
	// Output arrives in chunks as the process writes it.
	var lines int
	for ev, err := range p.Events() {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Stream == client.Stdout {
			lines += strings.Count(string(ev.Data), "\n")
		}
	}
	exit, err := p.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lines, "lines, exit code", exit.Code)
	// Output:
	// started pid true
	// 3 lines, exit code 3
}

func ExampleClient_Run() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	res, err := c.Run(ctx, client.Command{
		Name: "/bin/sh",
		Args: []string{"-c", "echo $GREETING; echo oops >&2; kill -TERM $$"},
		Env:  map[string]string{"GREETING": "hello"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout %q, stderr %q\n", res.Stdout, res.Stderr)
	fmt.Println(res.Exit.Status, res.Exit.Signal == 15)
	// Output:
	// stdout "hello\n", stderr "oops\n"
	// signal: terminated true
}

func ExampleProcess_SendStdin() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	var out strings.Builder
	p, err := c.Start(ctx, client.Command{Name: "tr", Args: []string{"a-z", "A-Z"}, Stdin: true, Stdout: &out})
	if err != nil {
		log.Fatal(err)
	}
	p.SendStdin(ctx, []byte("shout\n"))
	p.CloseStdin(ctx)
	if _, err := p.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Print(out.String())
	// Output:
	// SHOUT
}

func ExampleClient_Upload() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR"), User: "root"})
	defer c.Close()

	// Upload streams any io.Reader; parent directories are created.
	path, err := c.Upload(ctx, "/tmp/envd-example/notes/hello.txt", strings.NewReader("hello, sandbox\n"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Remove(ctx, "/tmp/envd-example")
	fmt.Println("wrote", path)

	r, err := c.Download(ctx, path)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read %d bytes: %s", r.Size, b)

	_, err = c.Download(ctx, "/tmp/envd-example/missing")
	fmt.Println(err)
	// Output:
	// wrote /tmp/envd-example/notes/hello.txt
	// read 15 bytes: hello, sandbox
	// download /tmp/envd-example/missing: not found (HTTP 404): path '/tmp/envd-example/missing' does not exist
}

func ExampleClient_ListDir() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR"), User: "root"})
	defer c.Close()

	c.MakeDir(ctx, "/tmp/envd-example-ls/a/b")
	c.Upload(ctx, "/tmp/envd-example-ls/a/f.txt", strings.NewReader("f"))
	defer c.Remove(ctx, "/tmp/envd-example-ls")

	entries, err := c.ListDir(ctx, "/tmp/envd-example-ls", 3)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Type, e.Permissions, strings.TrimPrefix(e.Path, "/tmp/envd-example-ls/"))
	}
	// Output:
	// dir drwxr-xr-x a
	// dir drwxr-xr-x a/b
	// file -rw-r--r-- a/f.txt
}

func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR"), User: "root"})
	defer c.Close()

	c.MakeDir(ctx, "/tmp/envd-example-watch")
	defer c.Remove(ctx, "/tmp/envd-example-watch")
	w, err := c.Watch(ctx, "/tmp/envd-example-watch", client.WatchOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	// The watch is in place once Watch returns: nothing after it is missed.
	c.Upload(ctx, "/tmp/envd-example-watch/new.txt", strings.NewReader("x"))
	for ev, err := range w.Events() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Op, ev.Name)
		if ev.Op == client.OpWrite {
			break
		}
	}
	// Output:
	// create new.txt
	// write new.txt
}

func ExampleClient_Execute() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	// A context is a kernel whose state lasts from one execution to the
	// next.
	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.RemoveContext(ctx, cc.ID)

	run, err := c.Execute(ctx, "rows = [3, 1, 2]\nprint('sorting', len(rows), 'rows')\nsorted(rows)", client.ExecOptions{
		ContextID: cc.ID,
		OnStdout:  func(o client.Output) { fmt.Print("stdout: ", o.Text) },
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := run.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("result:", res.Results[0].Text, "-", res)

	// rows is still there. An exception in the code is an outcome, not an
	// error of Wait.
	run, err = c.Execute(ctx, "rows[10]", client.ExecOptions{ContextID: cc.ID})
	if err != nil {
		log.Fatal(err)
	}
	res, err = run.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res)
	// Output:
	// stdout: sorting 3 rows
	// result: [1, 2, 3] - ok
	// error: IndexError: list index out of range
}

func ExampleClient_ListVariables() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.RemoveContext(ctx, cc.ID)
	run, err := c.Execute(ctx, "import os\nrows = list(range(10**6))\nname = 'envd'", client.ExecOptions{ContextID: cc.ID})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := run.Wait(); err != nil {
		log.Fatal(err)
	}

	// The variables (modules and _names left out), without running
	// anything the context records.
	vars, err := c.ListVariables(ctx, cc.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range vars.Variables {
		fmt.Printf("%s %s len=%d %.21s\n", v.Name, v.Type, v.Len, v.Repr)
	}

	// Completion at a cursor (code points; CursorEnd: the end of the code).
	comp, err := c.Complete(ctx, cc.ID, "len(row", client.CursorEnd)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(comp.Matches, comp.Start, comp.End)

	in, err := c.Inspect(ctx, cc.ID, "name", client.CursorEnd, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.Found, strings.Contains(in.Text, "envd"))
	// Output:
	// name str len=4 'envd'
	// rows list len=1000000 [0, 1, 2, 3, 4, 5, 6,
	// [rows] 4 7
	// true true
}

func ExampleExecution_Events() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	// No context: the default Python context. The timeout is envd's: the
	// code is stopped even if this program goes away.
	run, err := c.Execute(ctx, "import time\nfor i in range(3):\n    print(i, flush=True)\ntime.sleep(60)",
		client.ExecOptions{Timeout: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range run.Events() {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Stdout != nil {
			fmt.Print(ev.Stdout.Text)
		}
	}
	res, err := run.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Reason)
	// Output:
	// 0
	// 1
	// 2
	// timed out
}

// A Firecracker microVM's envd is reached through the host side of its vsock
// device: the uds_path given to Firecracker and envd's -vsock-port.
func ExampleFirecrackerUDS() {
	c := client.New(client.Options{
		Dialer: client.FirecrackerUDS("/srv/vms/vm1/v.sock", 49983),
		Token:  "the sandbox's access token",
	})
	defer c.Close()
	if err := c.Health(context.Background()); err != nil {
		fmt.Println("sandbox down:", err)
	}
}

func ExampleClient_Languages() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	// One language per installed Jupyter kernelspec, envd's own first;
	// exec-code's language is any of the names and aliases.
	langs, err := c.Languages(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range langs[:3] {
		fmt.Println(l.Name, "runs on", l.KernelName, "aliases", l.Aliases)
	}
	// Output:
	// python runs on python3 aliases [py python3]
	// javascript runs on deno aliases [js deno]
	// typescript runs on deno aliases [ts]
}

func ExampleClient_ListPackages() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	l, err := c.ListPackages(ctx, client.ManagerApt, client.PackageOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range l.Packages {
		if p.Name == "dpkg" {
			fmt.Println("dpkg is installed:", p.Version != "")
		}
	}
	// Output:
	// dpkg is installed: true
}

// InstallPackages streams the installer's output; envd's answer, a
// refusal included, comes from Wait (or Events).
func ExampleClient_InstallPackages() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // the installer's deadline
	defer cancel()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	op, err := c.InstallPackages(ctx, client.ManagerPip,
		[]client.PackageSpec{{Name: "pandas", Version: "2.2.3"}}, // a pin: installed over Debian's pandas
		client.InstallOptions{Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	res, err := op.Wait()
	if err != nil {
		log.Fatal(err) // pip's exit status and its last lines
	}
	for _, ch := range res.Changes {
		fmt.Println(ch)
	}
	for _, s := range res.Stale {
		fmt.Printf("context %s: %s\n", s.ContextID, s.Message)
	}
}

func ExampleShellSession_Run() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	s, err := c.CreateShell(ctx, client.ShellOptions{Dir: "/tmp"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)

	// What one command sets is there for the next.
	if _, err := s.Run(ctx, "cd / && export GREETING=hello", client.ShellRunOptions{}); err != nil {
		log.Fatal(err)
	}
	res, err := s.Run(ctx, "echo $GREETING from $(pwd); echo oops >&2; false", client.ShellRunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout %q, stderr %q, exit code %d\n", res.Stdout, res.Stderr, res.ExitCode)

	// A timeout ends the command, not the session.
	res, err = s.Run(ctx, "sleep 60", client.ShellRunOptions{Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Reason)
	// Output:
	// stdout "hello from /\n", stderr "oops\n", exit code 1
	// timed out
}

func ExampleShellSession_Start() {
	ctx := context.Background()
	c := client.New(client.Options{Addr: os.Getenv("ENVD_ADDR")})
	defer c.Close()

	s, err := c.CreateShell(ctx, client.ShellOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)

	// Output arrives in chunks as the command writes it.
	cmd, err := s.Start(ctx, "for i in 1 2 3; do echo line $i; done; exit 4", client.ShellRunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	var lines int
	for ev, err := range cmd.Events() {
		if err != nil {
			log.Fatal(err)
		}
		lines += strings.Count(string(ev.Data), "\n")
	}
	res, err := cmd.Wait()
	if err != nil {
		log.Fatal(err)
	}
	// exit ended the shell itself: the session is over.
	fmt.Println(lines, "lines;", res.Reason, "with status", res.ExitCode)
	// Output:
	// 3 lines; session ended with status 4
}
