package cgroup

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/mountinfo"
)

// Fuzz targets for the parsers of the files envd reads to find and use
// its cgroups: /proc/self/mountinfo's cgroup mounts with /proc/self/cgroup
// (where envd's own cgroup is), "key value" files (memory.events,
// cgroup.events) and cgroup.procs. Sandbox code can write what a cgroup's
// processes are, and mount points when it may mount.

// within reports whether p is dir or beneath it, lexically.
func within(p, dir string) bool {
	dir = filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// FuzzHierarchy: from any mountinfo and /proc/self/cgroup, only mounts at
// or beneath the cgroup filesystem's root are kept, and the directory
// found for envd's own cgroup in a hierarchy is at or beneath the mount
// point it was found in, never elsewhere. /proc/self/cgroup written back
// parses the same.
func FuzzHierarchy(f *testing.F) {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	f.Add(mi, cg)
	f.Add([]byte("35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"), []byte("0::/user.slice/envd\n"))
	f.Add([]byte("35 24 0:30 /sandbox /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n36 24 0:31 / /sys/fs/cgroup/x rw - cgroup2 cgroup2 rw\n"), []byte("0::/sandbox/../other\n"))
	f.Add([]byte(`30 25 0:26 /a /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
31 25 0:27 / /sys/fs/cgroup/memory,cpu rw - cgroup cgroup rw,memory,cpu
32 25 0:28 / /sys/fs/cgroupfoo rw - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/../../etc rw - cgroup cgroup rw,freezer
`), []byte("4:memory,cpu:/x\n6:freezer:/a/b\n6:freezer:/c\n1::\n0::relative\n::\n"))
	f.Fuzz(func(t *testing.T, mountData, ownData []byte) {
		const fsRoot = DefaultFSRoot
		all, _ := mountinfo.Parse(bytes.NewReader(mountData))
		ms := mountsOf(fsRoot, all)
		for point := range ms.v2 {
			if !within(point, fsRoot) {
				t.Fatalf("v2 mount %q kept, not beneath %s", point, fsRoot)
			}
		}
		for ctl, points := range ms.v1 {
			for point := range points {
				if !within(point, fsRoot) {
					t.Fatalf("v1 %s mount %q kept, not beneath %s", ctl, point, fsRoot)
				}
			}
		}
		own := parseOwn(ownData)
		check := func(h *hier, err error, mounts map[string]string) {
			if err != nil {
				return
			}
			if _, ok := mounts[h.mount]; !ok {
				t.Fatalf("hierarchy %+v: not one of the mounts %v", h, mounts)
			}
			if !within(h.own, h.mount) {
				t.Fatalf("hierarchy %+v: envd's cgroup is not beneath its mount point", h)
			}
		}
		h, err := ms.hierV2(own)
		check(h, err, ms.v2)
		for _, ctl := range []string{"freezer", "memory"} {
			h, err := ms.hierV1(ctl, own)
			check(h, err, ms.v1[ctl])
		}

		// Written back as the kernel writes it (the last line keeps
		// trailing blanks of the others' paths from the file's trim).
		const last = "\x00last"
		if _, ok := own[last]; ok {
			return
		}
		var again strings.Builder
		for i, ctl := range slices.Sorted(maps.Keys(own)) {
			if strings.ContainsAny(ctl, ",:\n") || strings.Contains(own[ctl], "\n") {
				t.Fatalf("parsed %q: controller %q, path %q", ownData, ctl, own[ctl])
			}
			id := strconv.Itoa(i + 1)
			if ctl == "" {
				id = "0"
			}
			fmt.Fprintf(&again, "%s:%s:%s\n", id, ctl, own[ctl])
		}
		fmt.Fprintf(&again, "99:%s:/\n", last)
		back := parseOwn([]byte(again.String()))
		delete(back, last)
		if !maps.Equal(back, own) {
			t.Fatalf("parsed %q\n%v\nwritten again and parsed\n%v", ownData, own, back)
		}
	})
}

// FuzzCgroupFiles: a "key value" file gives a key's first value, or an
// error, never a panic; a key set on a first line is found there whatever
// follows. cgroup.procs gives one pid a field, or an error, and written
// back parses the same.
func FuzzCgroupFiles(f *testing.F) {
	f.Add([]byte("low 0\nhigh 0\nmax 0\noom 1\noom_kill 3\noom_group_kill 0\n"), "oom_kill")
	f.Add([]byte("populated 1\nfrozen 0\n"), "frozen")
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill  7 \n"), "oom_kill")
	f.Add([]byte("frozen x\nfrozen 1\n"), "frozen")
	f.Add([]byte("1\n22\n333\n-4 +5\n"), "")
	f.Add([]byte("99999999999999999999999\n"), " ")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		n, err := parseKey(data, "memory.events", key)
		if err == nil && !bytes.Contains(data, []byte(key+" ")) {
			t.Fatalf("parseKey(%q, %q) = %d without the key", data, key, n)
		}
		if key != "" && !strings.ContainsAny(key, " \n\r") {
			first := append([]byte(key+" 42\n"), data...)
			if n, err := parseKey(first, "memory.events", key); n != 42 || err != nil {
				t.Fatalf("parseKey(%q, %q) = %d, %v; want 42", first, key, n, err)
			}
		}

		pids, err := parsePids(data, "cgroup.procs")
		if err != nil {
			return
		}
		if len(pids) != len(bytes.Fields(data)) {
			t.Fatalf("%d pids from %q", len(pids), data)
		}
		var again strings.Builder
		for _, p := range pids {
			fmt.Fprintf(&again, "%d\n", p)
		}
		if back, err := parsePids([]byte(again.String()), "cgroup.procs"); err != nil || !reflect.DeepEqual(back, pids) {
			t.Fatalf("parsed %v; written again and parsed %v, %v", pids, back, err)
		}
	})
}
