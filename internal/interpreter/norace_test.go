//go:build !race

package interpreter_test

const raceEnabled = false
