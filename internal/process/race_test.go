//go:build race

package process_test

// raceEnabled: the race detector makes every copy of a byte slice several
// times slower, so the biggest streams are cut down under it.
const raceEnabled = true
