package identity

import (
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// lookups caches Lookup's answers while /etc/passwd and /etc/group are the
// files they were read from: same inode, size and modification time (a
// tool that edits them, useradd or an editor, writes a new file or changes
// the time). Reading and parsing both took about 0.1 ms, and every RPC
// looks its user up.
var lookups = &userCache{files: [...]string{"/etc/passwd", "/etc/group"}, read: lookupFiles}

// maxCachedUsers bounds the cache: names come from requests, but only
// accounts that exist are kept.
const maxCachedUsers = 256

type userCache struct {
	files [2]string
	read  func(name string) (*User, error) // the lookup in files

	mu    sync.Mutex
	stamp [2]fileStamp     // guarded by mu: the files users were read from
	users map[string]*User // guarded by mu
}

type fileStamp struct {
	ok                bool
	dev, ino          uint64
	size, mtim, ctime int64
}

func stampOf(path string) fileStamp {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileStamp{}
	}
	return fileStamp{ok: true, dev: st.Dev, ino: st.Ino, size: st.Size, mtim: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

func (c *userCache) lookup(name string) (*User, error) {
	stamp := [2]fileStamp{stampOf(c.files[0]), stampOf(c.files[1])}
	c.mu.Lock()
	if c.stamp != stamp {
		c.stamp, c.users = stamp, nil
	}
	u := c.users[name]
	c.mu.Unlock()
	if u != nil {
		return u.clone(), nil
	}
	u, err := c.read(name)
	if err != nil || !stamp[0].ok {
		return u, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stamp == stamp && len(c.users) < maxCachedUsers {
		if c.users == nil {
			c.users = map[string]*User{}
		}
		c.users[name] = u.clone()
	}
	return u, nil
}

// clone is a copy of u that shares nothing with it.
func (u *User) clone() *User {
	c := *u
	c.Groups = slices.Clone(u.Groups)
	return &c
}
