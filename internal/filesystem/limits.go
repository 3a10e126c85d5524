package filesystem

import "sync"

// watchLimits counts what watches hold, against Options.MaxWatches and
// Options.MaxWatchedDirs.
type watchLimits struct {
	maxWatches, maxDirs int

	mu      sync.Mutex
	watches int // guarded by mu
	dirs    int // guarded by mu
}

// addWatch takes one watch, or fails with ErrLimit.
func (l *watchLimits) addWatch(dir string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watches >= l.maxWatches {
		return newErr(ErrLimit, nil, "cannot watch %s: envd already holds %d watches, its limit; stop one first (end a WatchDir stream, or RemoveWatcher)", dir, l.maxWatches)
	}
	l.watches++
	return nil
}

func (l *watchLimits) dropWatch() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watches--
}

// addDir takes one watched directory, or fails with ErrLimit.
func (l *watchLimits) addDir(root, dir string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dirs >= l.maxDirs {
		return newErr(ErrLimit, nil, "cannot watch %s: envd's watches already watch %d directories, its limit (a recursive watch of %s watches every directory below it); watch a smaller tree, or not recursively", dir, l.maxDirs, root)
	}
	l.dirs++
	return nil
}

func (l *watchLimits) dropDirs(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dirs -= n
}
