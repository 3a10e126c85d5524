//go:build race

package e2e_test

// raceEnabled tells whether this test binary was built with -race; the envd
// binary under test is then built with it too.
const raceEnabled = true
