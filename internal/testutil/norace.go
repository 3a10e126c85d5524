//go:build !race

package testutil

// RaceEnabled tells whether this binary runs with the race detector.
const RaceEnabled = false
