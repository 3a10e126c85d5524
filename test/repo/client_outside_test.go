package repo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// outsideProgram uses the client as a program of another module would.
const outsideProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/envd-dev/envd/client"
)

func main() {
	c := client.New(client.Options{Addr: "127.0.0.1:1", Token: os.Getenv("TOKEN")})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Run(ctx, client.Command{Name: "/bin/true"})
	fmt.Println(errors.Is(err, client.ErrUnavailable))
}
`

// TestClientFromAnotherModule follows docs/client.md, "Depending on the
// client" as someone outside this repository would: a module of its own
// that requires envd's module and replaces it with a checkout. It builds,
// vets and runs a program using the client (which finds no envd and says
// so with the client's own error).
func TestClientFromAnotherModule(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	gomod := "module example.com/outside\n\ngo 1.26\n\n" +
		"require github.com/envd-dev/envd v0.0.0\n\n" +
		"replace github.com/envd-dev/envd => " + root + "\n"
	// The checksums of envd's own dependencies, which the client's are
	// among: tidy checks against them instead of asking sum.golang.org.
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": gomod, "go.sum": string(sums), "main.go": outsideProgram} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Offline: the client's dependencies come from the module cache,
	// which building this repository filled.
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	for _, args := range [][]string{{"mod", "tidy"}, {"vet", "./..."}, {"build", "-o", "outside", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "outside")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Errorf("the program: %v, %q; want it to print true (envd unavailable)", err, out)
	}
}
