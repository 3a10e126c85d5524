//go:build race

package interpreter_test

// raceEnabled: the race detector makes byte-crunching tests ~10x slower.
const raceEnabled = true
