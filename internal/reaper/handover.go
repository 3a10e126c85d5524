package reaper

import "sync"

// A live upgrade (internal/handover) hands envd's children to the envd it
// execs in the same pid: they stay its children, and an exit that happens
// meanwhile waits, a zombie, for the new envd to reap it. The old envd stops
// reaping (Pause) before it records which children still run, so that
// nothing it records as running has been reaped; the new one registers them
// (Adopt) before its reap loop starts (Enable).

// reapMu is held by each round of reaping, and by Pause until Resume.
var reapMu sync.Mutex

// Pause stops reaping: it returns once no round of reaping runs, and none
// starts until Resume. Exits stay zombies meanwhile.
func Pause() { reapMu.Lock() }

// Resume undoes Pause; the reap loop's next sweep reaps what exited
// meanwhile.
func Resume() { reapMu.Unlock() }

// Waiting tells whether pid was started (or adopted) and its exit not yet
// handed over: after Pause, that it has not been reaped.
func Waiting(pid int) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := waiters[pid]
	return ok
}

// Adopt registers pid, a child this envd did not start (the envd before a
// live upgrade did), and returns the channel its exit will be sent on. Call
// it before Enable: an exit reaped before its pid is registered goes to
// nobody.
func Adopt(pid int) <-chan Exit {
	ch := make(chan Exit, 1)
	mu.Lock()
	defer mu.Unlock()
	waiters[pid] = ch
	return ch
}
