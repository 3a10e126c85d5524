package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseForwards(t *testing.T) {
	got, err := parseForwards([]string{"8080:80", "5432", ":3000", "0:22"})
	want := []forwardPair{{8080, 80}, {5432, 5432}, {0, 3000}, {0, 22}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("parseForwards = %v, %v; want %v", got, err, want)
	}
	for arg, msg := range map[string]string{
		"0":        `"0" is not a port`,
		"80:0":     `"0" is not a port`,
		"80:":      `"" is not a port`,
		"x:80":     `"x" is not a port`,
		"80:65536": `"65536" is not a port`,
		"-1:80":    `"-1" is not a port`,
		"1:2:3":    `"2:3" is not a port`,
	} {
		if _, err := parseForwards([]string{arg}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseForwards(%q) = %v, want an error with %q", arg, err, msg)
		}
	}
	if _, err := parseForwards(nil); err == nil || !strings.Contains(err.Error(), "at least one port pair") {
		t.Errorf("parseForwards() = %v", err)
	}
}
