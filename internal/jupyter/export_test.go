package jupyter

import "time"

// DropConnectionForTest closes k's WebSocket abruptly, as a network failure
// would, and waits until the reader has noticed.
func DropConnectionForTest(k *Kernel) {
	k.mu.Lock()
	c := k.conn
	k.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.CloseNow()
	for {
		k.mu.Lock()
		cur := k.conn
		k.mu.Unlock()
		if cur != c {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
