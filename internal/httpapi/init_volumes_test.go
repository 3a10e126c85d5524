package httpapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/httpapi"
)

// mountSources lists the sources mounted at path, bottom first.
func mountSources(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 1 && f[4] == path {
			out = append(out, g[1])
		}
	}
	return out
}

// TestInitVolumeMountRace: sandbox code swaps the checked mount point with
// a link to a directory of its choice (renameat2 RENAME_EXCHANGE) while
// mount(8) runs. The mounter here wins that race every time: it makes the
// swap, then mounts where it was told. The volume lands on the directory
// envd checked (now under the link's name), never on the link's target.
func TestInitVolumeMountRace(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	dir := t.TempDir()
	t.Cleanup(func() { detachUnder(dir) })
	vol, link, target := dir+"/vol", dir+"/vol.l", dir+"/target"
	for _, d := range []string{vol, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(target+"/precious", []byte("x"), 0o644)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	// swap is the race sandbox code wins: the two names exchanged once,
	// between envd's checks and the mount.
	var mu sync.Mutex
	swap := [2]string{vol, link}
	m := &recordMounter{mount: func(src, path string) error {
		mu.Lock()
		a, b := swap[0], swap[1]
		swap = [2]string{}
		mu.Unlock()
		if a != "" {
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap: %v", err)
			}
		}
		return unix.Mount(src, path, "tmpfs", 0, "size=1m")
	}}
	e := newEnv(t, envOpts{mounter: m})
	r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"volumeMounts":[{"nfs_target":"nfs.internal:/data","path":"`+vol+`"}]}`))
	if got := mountSources(t, target); len(got) != 0 {
		t.Fatalf("the volume was mounted on the link's target %s: %v (/init: %d %s)", target, got, r.status, r.body)
	}
	if _, err := os.Stat(target + "/precious"); err != nil {
		t.Errorf("the target's file is hidden: %v", err)
	}
	t.Logf("/init: %d %s", r.status, r.body)
	if r.status == 204 {
		// The checked directory is now named vol.l: the volume is there.
		if got := mountSources(t, link); len(got) != 1 || got[0] != "nfs.internal:/data" {
			t.Errorf("mounts at the checked directory (%s): %v", link, got)
		}
	} else {
		wantError(t, r, 500, "volumeMounts")
	}
	// No mount is left anywhere else (the staging of the mount).
	b, _ := os.ReadFile("/proc/self/mountinfo")
	if n := strings.Count(string(b), "nfs.internal:/data"); n > 1 {
		t.Errorf("%d mounts of the volume:\n%s", n, b)
	}
	// Sandbox code swaps the parent directory instead: the same.
	if err := os.Mkdir(dir+"/p", 0o755); err != nil {
		t.Fatal(err)
	}
	os.Symlink(target, dir+"/p.l")
	mu.Lock()
	swap = [2]string{dir + "/p", dir + "/p.l"}
	mu.Unlock()
	r = e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"volumeMounts":[{"nfs_target":"nfs.internal:/p","path":"`+filepath.Join(dir, "p", "x")+`"}]}`))
	if got := mountSources(t, target+"/x"); len(got) != 0 {
		t.Fatalf("the volume was mounted in the link's target: %v (/init: %d %s)", got, r.status, r.body)
	}
	if _, err := os.Lstat(target + "/x"); !os.IsNotExist(err) {
		t.Errorf("a directory was made in the link's target: %v", err)
	}
}

// TestInitVolumeMountCommand: a real mount(8), a child as NFSMounter's,
// mounts (a tmpfs standing in for NFS) while sandbox code keeps swapping
// the mount point and a link to another directory: the volume lands on
// the directory envd checked or the /init fails, never on the link's
// target; a mount(8) that fails says so, naming the mount point.
func TestInitVolumeMountCommand(t *testing.T) {
	if !inNamespace(t) {
		return
	}
	m := &recordMounter{mount: func(src, path string) error {
		return httpapi.RunMount(context.Background(), "/bin/mount", "-t", "tmpfs", "-o", "size=1m", src, path)
	}}
	e := newEnv(t, envOpts{mounter: m})
	dir := t.TempDir()
	t.Cleanup(func() { detachUnder(dir) })
	target := dir + "/target"
	os.Mkdir(target, 0o755)
	var pair atomic.Pointer[[2]string] // what sandbox code swaps
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				if p := pair.Load(); p != nil {
					unix.Renameat2(unix.AT_FDCWD, p[0], unix.AT_FDCWD, p[1], unix.RENAME_EXCHANGE)
				}
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	landed := 0
	const rounds = 20
	for i := range rounds {
		vol := dir + "/vol" + strconv.Itoa(i)
		os.Mkdir(vol, 0o755)
		os.Symlink(target, vol+".l")
		pair.Store(&[2]string{vol, vol + ".l"})
		r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"volumeMounts":[{"nfs_target":"nfs.internal:/v","path":"`+vol+`"}]}`))
		pair.Store(nil)
		if got := mountSources(t, target); len(got) != 0 {
			t.Fatalf("round %d: the volume was mounted on the link's target: %v (/init: %d %s)", i, got, r.status, r.body)
		}
		if r.status == 204 {
			landed++
		} else {
			wantError(t, r, 500, "the mount point must have no symbolic link on its way")
		}
	}
	t.Logf("%d of %d /init mounted (the others met the link)", landed, rounds)
	// mount(8) failing: its message, naming the mount point, not the
	// staging directory.
	m.mu.Lock()
	m.mount = func(src, path string) error {
		return httpapi.RunMount(context.Background(), "/bin/mount", "-t", "nosuchfs", src, path)
	}
	m.mu.Unlock()
	r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"volumeMounts":[{"nfs_target":"nfs.internal:/w","path":"`+dir+`/w"}]}`))
	wantError(t, r, 500, "volumeMounts: mount nfs.internal:/w at "+dir+"/w: mount: ")
	if strings.Contains(r.body, "envd-mount-") {
		t.Errorf("the message names the staging directory: %s", r.body)
	}
}
