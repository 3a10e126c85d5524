package e2e_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
)

// memoryCgroup is this process's cgroup directory in the v1 memory
// hierarchy (envd, its child, makes its tree under it), or "" when the
// machine has none.
func memoryCgroup(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",memory,") {
			return filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	return ""
}

// TestKernelOOMSaysSo: an execution whose kernel the OOM killer took says
// that the sandbox ran out of memory (envd reads the kernels' cgroup's
// OOM kills), and the context works again after.
func TestKernelOOMSaysSo(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test limits a cgroup's memory")
	}
	mem := memoryCgroup(t)
	if mem == "" {
		t.Skip("no v1 memory hierarchy here")
	}
	root := "envd-oom-" + randomName()
	e := startEnvd(t, startOptions{jupyter: true, args: []string{"-cgroup-tree", root, "-warm-kernels", "python=0"}})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()
	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatalf("CreateContext: %v\n%s", err, e.stderr)
	}
	run := func(code string) *client.ExecResult {
		t.Helper()
		x, err := c.Execute(ctx, code, client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		res, err := x.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run("x = 1"); res.Reason != client.EndOK {
		t.Fatalf("first run: %+v", res)
	}
	// The kernels' cgroup gets 300 MiB more than it uses now; the code
	// then asks for 2 GiB, touched.
	jupyter := filepath.Join(mem, root, "jupyter")
	used, err := os.ReadFile(filepath.Join(jupyter, "memory.usage_in_bytes"))
	if err != nil {
		t.Fatalf("the kernels' cgroup: %v", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(used)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jupyter, "memory.limit_in_bytes"), []byte(strconv.FormatUint(n+300<<20, 10)), 0); err != nil {
		t.Fatal(err)
	}
	res := run("b = bytearray(2 << 30)")
	if res.Reason == client.EndOK || res.Error == nil || !strings.Contains(res.Error.Value, "out-of-memory killer") {
		t.Fatalf("a kernel killed by the OOM killer: %+v (error %+v); want it to say so", res, res.Error)
	}
	// Lift the limit: the restarted kernel runs again.
	if err := os.WriteFile(filepath.Join(jupyter, "memory.limit_in_bytes"), []byte("-1"), 0); err != nil {
		t.Fatal(err)
	}
	if res := run("print('again')"); res.Reason != client.EndOK || res.Stdout != "again\n" {
		t.Errorf("after the OOM kill: %+v", res)
	}
}
