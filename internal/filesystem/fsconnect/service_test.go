package fsconnect_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestStatEveryField(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	file := filepath.Join(dir, "a.txt")
	testutil.WriteFile(t, file, "hello", 0o644)
	if err := unix.Setxattr(file, "user.e2b.foo", []byte("bar"), 0); err != nil {
		t.Fatal(err)
	}
	unix.Setxattr(file, "user.other", []byte("hidden"), 0)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	os.Chtimes(file, mtime, mtime)
	os.Symlink(file, filepath.Join(dir, "link"))
	os.Symlink("a.txt", filepath.Join(dir, "rel-link"))
	os.Symlink(filepath.Join(dir, "nothere"), filepath.Join(dir, "dangling"))
	os.Symlink(dir, filepath.Join(dir, "dirlink"))
	syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o640)
	sticky := filepath.Join(dir, "sticky")
	os.Mkdir(sticky, 0o755)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	usr := testutil.User(t, "user")
	owned := filepath.Join(dir, "owned")
	testutil.WriteFile(t, owned, "", 0o644)
	os.Chown(owned, int(usr.UID), 4242) // a gid with no name

	tests := []struct {
		name string
		path string
		want string // protojson of the entry, fields as the SDK sees them
	}{
		{"file", file, `{"name":"a.txt","type":"FILE_TYPE_FILE","path":"` + file + `","size":"5","mode":420,"permissions":"-rw-r--r--","owner":"root","group":"root","modifiedTime":"2026-01-02T03:04:05.123456789Z","metadata":{"foo":"bar"}}`},
		{"symlink to file", filepath.Join(dir, "link"), ``},
		{"dangling symlink", filepath.Join(dir, "dangling"), ``},
		{"fifo", filepath.Join(dir, "fifo"), ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stat(t, e.root, tt.path)
			if tt.want != "" {
				b, _ := protojson.Marshal(got)
				var want pb.EntryInfo
				if err := protojson.Unmarshal([]byte(tt.want), &want); err != nil {
					t.Fatal(err)
				}
				wb, _ := protojson.Marshal(&want)
				if string(b) != string(wb) {
					t.Errorf("entry\n got %s\nwant %s", b, wb)
				}
			}
		})
	}

	link := stat(t, e.root, filepath.Join(dir, "link"))
	if link.GetType() != pb.FileType_FILE_TYPE_FILE || link.GetMode() != 0o644 || link.GetPermissions() != "Lrwxrwxrwx" ||
		link.GetSymlinkTarget() != file || link.GetSize() != int64(len(file)) || link.GetName() != "link" {
		t.Errorf("symlink entry: %v", link)
	}
	if rel := stat(t, e.root, filepath.Join(dir, "rel-link")); rel.GetSymlinkTarget() != file {
		t.Errorf("relative symlink target %q, want the absolute %q", rel.GetSymlinkTarget(), file)
	}
	if dl := stat(t, e.root, filepath.Join(dir, "dirlink")); dl.GetType() != pb.FileType_FILE_TYPE_DIRECTORY || dl.GetSymlinkTarget() != dir {
		t.Errorf("symlink to dir: %v", dl)
	}
	dangling := stat(t, e.root, filepath.Join(dir, "dangling"))
	if dangling.GetType() != pb.FileType_FILE_TYPE_UNSPECIFIED || dangling.GetMode() != 0 || dangling.GetSymlinkTarget() != filepath.Join(dir, "dangling") {
		t.Errorf("dangling symlink: %v", dangling)
	}
	if fifo := stat(t, e.root, filepath.Join(dir, "fifo")); fifo.GetType() != pb.FileType_FILE_TYPE_UNSPECIFIED || fifo.GetPermissions() != "prw-r-----" || fifo.GetMode() != 0 {
		t.Errorf("fifo: %v", fifo)
	}
	if st := stat(t, e.root, sticky); st.GetPermissions() != "dtrwxrwxrwx" || st.GetMode() != 0o777 || st.GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("sticky dir: %v", st)
	}
	if o := stat(t, e.root, owned); o.GetOwner() != "user" || o.GetGroup() != "4242" {
		t.Errorf("owner/group = %q/%q, want user/4242", o.GetOwner(), o.GetGroup())
	}
	if d := stat(t, e.root, dir); d.GetSize() == 0 || d.GetMode() != 0o777 || d.GetPermissions() != "drwxrwxrwx" || d.GetSymlinkTarget() != "" || d.Metadata != nil {
		t.Errorf("dir: %v", d)
	}
}

func TestStatPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	usr := testutil.User(t, "user")
	name := "stat-rel-" + strconv.Itoa(os.Getpid())
	testutil.WriteFile(t, filepath.Join(usr.Home, name), "x", 0o644)
	t.Cleanup(func() { os.Remove(filepath.Join(usr.Home, name)) })

	tests := []struct {
		name, path, want string
	}{
		{"relative is in the home", name, filepath.Join(usr.Home, name)},
		{"tilde", "~/" + name, filepath.Join(usr.Home, name)},
		{"empty is the home", "", usr.Home},
		{"dot dot is cleaned", usr.Home + "/../user/" + name, filepath.Join(usr.Home, name)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := stat(t, e.user, tt.path).GetPath(); got != tt.want {
				t.Errorf("path %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("default user is user", func(t *testing.T) {
		t.Parallel()
		if got := stat(t, e.anyone, "").GetPath(); got != usr.Home {
			t.Errorf("path %q, want %q", got, usr.Home)
		}
	})
}

func TestStatErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{StrictUsers: true})
	priv := testutil.PrivateDir(t)
	testutil.WriteFile(t, filepath.Join(priv, "secret"), "x", 0o644)
	dir := testutil.WorkDir(t)
	tests := []struct {
		name string
		c    func() error
		code connect.Code
		msg  []string
	}{
		{"missing", func() error {
			_, err := e.root.Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: dir + "/nope"}))
			return err
		},
			connect.CodeNotFound, []string{dir + "/nope: no such file or directory"}},
		{"other user's home", func() error {
			_, err := e.root.Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: "~root/x"}))
			return err
		},
			connect.CodeInvalidArgument, []string{"~root/x"}},
		{"inside a dir the user may not enter", func() error {
			_, err := e.user.Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: priv + "/secret"}))
			return err
		}, connect.CodePermissionDenied, []string{"user 'user'", priv + "/secret"}},
		{"dot dot into root's dir", func() error {
			_, err := e.user.Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: dir + "/../" + filepath.Base(dir) + "/private/secret"}))
			return err
		}, connect.CodeNotFound, nil},
		{"nul byte", func() error {
			_, err := e.root.Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: "/tmp/a\x00b"}))
			return err
		},
			connect.CodeInvalidArgument, []string{"NUL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.c(), tt.code, tt.msg...)
		})
	}
	// Root may read it; the service still answers.
	stat(t, e.root, priv+"/secret")
	// The default mode reads as root, as upstream.
	stat(t, newEnv(t, filesystem.Options{}).user, priv+"/secret")
}

func TestMakeDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	usr := testutil.User(t, "user")

	res, err := e.user.MakeDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.MakeDirRequest{Path: dir + "/d1/d2/d3"}))
	if err != nil {
		t.Fatal(err)
	}
	en := res.Msg.GetEntry()
	if en.GetName() != "d3" || en.GetPath() != dir+"/d1/d2/d3" || en.GetType() != pb.FileType_FILE_TYPE_DIRECTORY ||
		en.GetMode() != 0o755 || en.GetPermissions() != "drwxr-xr-x" || en.GetOwner() != "user" || en.GetGroup() != "user" {
		t.Errorf("entry %v", en)
	}
	for _, p := range []string{"/d1", "/d1/d2", "/d1/d2/d3"} {
		if uid := testutil.Owner(t, dir+p); uid != usr.UID {
			t.Errorf("%s belongs to %d, want the user", p, uid)
		}
	}
	testutil.WriteFile(t, dir+"/file", "x", 0o644)
	priv := testutil.PrivateDir(t)
	tests := []struct {
		name   string
		path   string
		user   bool
		strict bool
		code   connect.Code
		msg    string
	}{
		{name: "exists", path: dir + "/d1/d2", code: connect.CodeAlreadyExists, msg: "directory already exists: " + dir + "/d1/d2"},
		{name: "over a file", path: dir + "/file", code: connect.CodeInvalidArgument, msg: "path already exists but it is not a directory: " + dir + "/file"},
		{name: "below a file", path: dir + "/file/sub", code: connect.CodeInvalidArgument, msg: dir + "/file is a file"},
		{name: "in a dir the user may not write", path: priv + "/x", user: true, strict: true, code: connect.CodePermissionDenied, msg: "user 'user' may not"},
		{name: "in root's home", path: "/root/envd-test-should-not-exist", user: true, strict: true, code: connect.CodePermissionDenied},
		{name: "exists, in a dir the user may not enter", path: priv, user: true, code: connect.CodeAlreadyExists, msg: "directory already exists: " + priv},
		{name: "below a root file, in a dir the user may not enter", path: priv + "/f/sub", user: true, code: connect.CodePermissionDenied, msg: "user 'user' may not"},
	}
	testutil.WriteFile(t, priv+"/f", "x", 0o644)
	es := newEnv(t, filesystem.Options{StrictUsers: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.root
			if tt.user {
				c = e.user
			}
			if tt.strict {
				c = es.user
			}
			_, err := c.MakeDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.MakeDirRequest{Path: tt.path}))
			wantErr(t, err, tt.code, tt.msg)
		})
	}
	if _, err := os.Stat(priv + "/x"); err == nil {
		t.Error("the refused directory was made")
	}
	// The default mode makes, as upstream, what user may not make, and
	// gives it to user, in a directory only root can change (a TempDir:
	// root's 0700, in root's directory in /tmp).
	rootDir := t.TempDir()
	if _, err := e.user.MakeDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.MakeDirRequest{Path: rootDir + "/x/y"})); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/x", "/x/y"} {
		if uid := testutil.Owner(t, rootDir+p); uid != usr.UID {
			t.Errorf("%s belongs to %d, want the user", p, uid)
		}
	}
}

func TestMove(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/m1.txt", "one", 0o644)
	res, err := e.user.Move(testutil.Context(t, waitLong), connect.NewRequest(&pb.MoveRequest{Source: dir + "/m1.txt", Destination: dir + "/newdir/m1-renamed.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if en := res.Msg.GetEntry(); en.GetName() != "m1-renamed.txt" || en.GetPath() != dir+"/newdir/m1-renamed.txt" || en.GetSize() != 3 {
		t.Errorf("entry %v", en)
	}
	if b, _ := os.ReadFile(dir + "/newdir/m1-renamed.txt"); string(b) != "one" {
		t.Errorf("moved content %q", b)
	}
	// Onto an existing file: replaced.
	testutil.WriteFile(t, dir+"/a", "A", 0o644)
	testutil.WriteFile(t, dir+"/b", "B", 0o644)
	if _, err := e.root.Move(testutil.Context(t, waitLong), connect.NewRequest(&pb.MoveRequest{Source: dir + "/a", Destination: dir + "/b"})); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dir + "/b"); string(b) != "A" {
		t.Errorf("replaced content %q", b)
	}

	priv := testutil.PrivateDir(t)
	testutil.WriteFile(t, priv+"/secret", "s", 0o644)
	_, err = e.root.Move(testutil.Context(t, waitLong), connect.NewRequest(&pb.MoveRequest{Source: dir + "/zzz", Destination: dir + "/yyy"}))
	wantErr(t, err, connect.CodeNotFound, dir+"/zzz: no such file or directory")
	if _, err := os.Stat(dir + "/yyy"); err == nil {
		t.Error("a failed move made the destination")
	}
	_, err = e.user.Move(testutil.Context(t, waitLong), connect.NewRequest(&pb.MoveRequest{Source: priv + "/secret", Destination: dir + "/stolen"}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user'")
	testutil.WriteFile(t, dir+"/mine", "m", 0o644)
	_, err = e.user.Move(testutil.Context(t, waitLong), connect.NewRequest(&pb.MoveRequest{Source: dir + "/mine", Destination: priv + "/planted"}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user'")
	if _, err := os.Stat(priv + "/secret"); err != nil {
		t.Error("the refused move lost the source")
	}
}

func TestListDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	for _, p := range []string{"b.txt", "a.txt", "sub/z", "sub/deeper/x", "sub/a", "Upper", "space name", "ünï", "new\nline"} {
		testutil.WriteFile(t, filepath.Join(dir, p), p, 0o644)
	}
	os.Symlink(dir, filepath.Join(dir, "sub", "loop")) // a loop back to the root
	os.Symlink("nothere", filepath.Join(dir, "dangling"))

	tests := []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"Upper", "a.txt", "b.txt", "dangling", "new\nline", "space name", "sub", "ünï"}},
		{1, []string{"Upper", "a.txt", "b.txt", "dangling", "new\nline", "space name", "sub", "ünï"}},
		{2, []string{"Upper", "a.txt", "b.txt", "dangling", "new\nline", "space name", "sub", "sub/a", "sub/deeper", "sub/loop", "sub/z", "ünï"}},
		{9, []string{"Upper", "a.txt", "b.txt", "dangling", "new\nline", "space name", "sub", "sub/a", "sub/deeper", "sub/deeper/x", "sub/loop", "sub/z", "ünï"}},
	}
	for _, tt := range tests {
		t.Run("depth "+strconv.Itoa(int(tt.depth)), func(t *testing.T) {
			res, err := e.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: tt.depth}))
			if err != nil {
				t.Fatal(err)
			}
			if got := names(res.Msg.GetEntries(), dir); !slices.Equal(got, tt.want) {
				t.Errorf("order\n got %q\nwant %q", got, tt.want)
			}
		})
	}

	// A symlinked root is followed, and paths keep the name asked for.
	link := filepath.Join(testutil.WorkDir(t), "rootlink")
	os.Symlink(dir+"/sub", link)
	res, err := e.root.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: link}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetEntries()[0].GetPath(); got != link+"/a" {
		t.Errorf("first path %q, want %q", got, link+"/a")
	}

	// In strict mode, children of a directory the user may not read are
	// left out; the default mode lists them, as upstream.
	priv := filepath.Join(dir, "sub", "private")
	os.Mkdir(priv, 0o700)
	testutil.WriteFile(t, priv+"/secret", "s", 0o644)
	res, err = e.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: dir + "/sub", Depth: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(res.Msg.GetEntries(), dir+"/sub"); !slices.Contains(got, "private/secret") {
		t.Errorf("as user, default mode: %q", got)
	}
	es := newEnv(t, filesystem.Options{StrictUsers: true})
	res, err = es.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: dir + "/sub", Depth: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(res.Msg.GetEntries(), dir+"/sub"); slices.Contains(got, "private/secret") || !slices.Contains(got, "private") {
		t.Errorf("as user: %q", got)
	}
	res, _ = e.root.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: dir + "/sub", Depth: 3}))
	if got := names(res.Msg.GetEntries(), dir+"/sub"); !slices.Contains(got, "private/secret") {
		t.Errorf("as root: %q", got)
	}

	loopA, loopB := filepath.Join(dir, "la"), filepath.Join(dir, "lb")
	os.Symlink(loopB, loopA)
	os.Symlink(loopA, loopB)
	errTests := []struct {
		name string
		user bool
		path string
		code connect.Code
		msg  string
	}{
		{"missing", false, dir + "/nope", connect.CodeNotFound, dir + "/nope: no such file or directory"},
		{"a file", false, dir + "/a.txt", connect.CodeInvalidArgument, "path is not a directory: " + dir + "/a.txt"},
		{"symlink loop", false, loopA, connect.CodeFailedPrecondition, "symlink loop"},
		{"unreadable dir", true, priv, connect.CodePermissionDenied, "user 'user' may not list " + priv},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.root
			if tt.user {
				c = es.user
			}
			_, err := c.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: tt.path}))
			wantErr(t, err, tt.code, tt.msg)
		})
	}
}

func TestListDirLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{MaxListEntries: 5})
	dir := testutil.WorkDir(t)
	for i := range 6 {
		testutil.WriteFile(t, filepath.Join(dir, strconv.Itoa(i)), "", 0o644)
	}
	_, err := e.root.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: dir}))
	wantErr(t, err, connect.CodeInvalidArgument, "more than 5 entries")
}

func TestRemove(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/tree/a/b/c", "x", 0o644)
	usr := testutil.User(t, "user")
	filepath.Walk(dir+"/tree", func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, int(usr.UID), int(usr.GID)) })
	if _, err := e.user.Remove(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveRequest{Path: dir + "/tree"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/tree"); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
	if _, err := e.root.Remove(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveRequest{Path: dir + "/never-was"})); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
	priv := testutil.PrivateDir(t)
	testutil.WriteFile(t, priv+"/keep", "k", 0o644)
	_, err := e.user.Remove(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveRequest{Path: priv}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user' may not remove")
	if _, err := os.Stat(priv + "/keep"); err != nil {
		t.Error("a refused remove removed something")
	}
	_, err = e.root.Remove(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveRequest{Path: "/"}))
	wantErr(t, err, connect.CodeInvalidArgument, "refusing to remove /")
	_, err = e.root.Remove(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveRequest{Path: "~nobody/x"}))
	wantErr(t, err, connect.CodeInvalidArgument)
}

// Default mode, as the SDKs do it: files.makeDir in root's /app (root
// makes it for the user), then rename and remove it, answer as upstream;
// root's own file there stays refused (filesystem's
// TestDefaultModeRemovesUsersOwnInRootDir and
// TestDefaultModeMovesUsersOwnInRootDir).
func TestDefaultModeRootDirOverConnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	app := t.TempDir()
	for _, d := range []string{filepath.Dir(app), app} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testutil.Context(t, waitLong)
	if _, err := e.user.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: app + "/sub/deep"})); err != nil {
		t.Fatal(err)
	}
	res, err := e.user.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: app + "/sub", Destination: app + "/moved"}))
	if err != nil {
		t.Fatal(err)
	}
	if en := res.Msg.GetEntry(); en.GetPath() != app+"/moved" || en.GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("entry %v", en)
	}
	if _, err := e.user.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: app + "/moved"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(app + "/moved"); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
	testutil.WriteFile(t, app+"/roots.txt", "root's", 0o644)
	_, err = e.user.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: app + "/roots.txt"}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user' may not remove "+app+"/roots.txt")
	_, err = e.user.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: app + "/roots.txt", Destination: app + "/mine.txt"}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user' may not move "+app+"/roots.txt to "+app+"/mine.txt")
}

func TestUnknownUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	_, err := e.client("nosuchuser").Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: "/"}))
	wantErr(t, err, connect.CodeUnauthenticated, "invalid username: 'nosuchuser'")
	stat(t, e.root, "/")
}
