package jupyter

import "time"

// DropConnectionForTest closes k's WebSocket abruptly, as a network failure
// would, and waits until the reader has noticed.
func DropConnectionForTest(k *Kernel) {
	k.mu.Lock()
	c, done := k.conn, k.readerDone
	k.mu.Unlock()
	if c == nil || done == nil {
		return
	}
	_ = c.CloseNow()
	<-done // the reader calls connLost before it exits
}

// RuntimeDirForTest returns the runtime directory of a started s.
func RuntimeDirForTest(s *Supervisor) string { return s.runtimeDir }

// ServerHooksForTest is the Python envd adds to the server's config.
var ServerHooksForTest = serverHooksPy

// DirectForTest tells whether k's direct path is up, and how many requests
// went on it.
func DirectForTest(k *Kernel) (up bool, sent uint64) {
	if k.dp == nil {
		return false, 0
	}
	k.dp.mu.Lock()
	defer k.dp.mu.Unlock()
	return k.dp.shell != nil, k.dp.sent.Load()
}

// SetEarlyDiscardForTest changes how long an early kernel waits to be asked
// for, for servers spawned until restore is called. Not for parallel tests.
func SetEarlyDiscardForTest(d time.Duration) (restore func()) {
	old := earlyDiscard
	earlyDiscard = d
	return func() { earlyDiscard = old }
}
