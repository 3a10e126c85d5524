package reaper_test

import (
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/reaper"
)

// BenchmarkConcurrentStarts starts 100 children at once, per iteration, and
// reports the latency of reaper.Start (fork/exec and registration) at the
// median and the 99th percentile: starts that serialize on a lock show as a
// p99 of about 100 times one fork/exec.
func BenchmarkConcurrentStarts(b *testing.B) {
	const n = 100
	var lat []time.Duration
	for b.Loop() {
		gate := make(chan struct{})
		durs := make([]time.Duration, n)
		chans := make([]<-chan reaper.Exit, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				cmd := exec.Command("/bin/true")
				<-gate
				began := time.Now()
				ch, err := reaper.Start(cmd)
				durs[i] = time.Since(began)
				if err != nil {
					b.Error(err)
					return
				}
				chans[i] = ch
			})
		}
		close(gate)
		wg.Wait()
		for _, ch := range chans {
			if ch != nil {
				<-ch
			}
		}
		lat = append(lat, durs...)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
