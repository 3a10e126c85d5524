package main

import (
	"testing"
	"time"
)

func TestRoundDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{1234567891 * time.Nanosecond, "1.23s"},
		{45678912 * time.Nanosecond, "45.7ms"},
		{812345 * time.Nanosecond, "812µs"},
		{999 * time.Nanosecond, "999ns"},
		{0, "0s"},
		{-1234567891 * time.Nanosecond, "-1.23s"},
		{83*time.Minute + 24*time.Second + 5*time.Millisecond, "1h23m20s"},
	}
	for _, tt := range tests {
		if got := roundDuration(tt.in).String(); got != tt.want {
			t.Errorf("roundDuration(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
