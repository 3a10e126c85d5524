package jupyter_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// BenchmarkExecuteRoundTrip measures execute_request -> (execute_reply and
// iopub idle) for "x=1" on a python kernel, with each latency fix on or off:
// the server's TCP_NODELAY patch and the client's TCP_QUICKACK.
func BenchmarkExecuteRoundTrip(b *testing.B) {
	noFix := startSupervisor(b, jupyter.Options{DisableLatencyFixes: true})
	noFixClient, err := noFix.Client(testutil.Context(b, kernelTimeout))
	if err != nil {
		b.Fatal(err)
	}
	client := func(b *testing.B, url, token string, opts jupyter.ClientOptions) *jupyter.Client {
		c, err := jupyter.NewClient(url, token, opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return c
	}
	cases := []struct {
		name   string
		client func(b *testing.B) *jupyter.Client
	}{
		{"both_fixes", func(*testing.B) *jupyter.Client { return shared.client }},
		{"nodelay_only", func(b *testing.B) *jupyter.Client {
			return client(b, shared.sup.URL(), shared.sup.Token(), jupyter.ClientOptions{DisableQuickAck: true})
		}},
		{"quickack_only", func(b *testing.B) *jupyter.Client {
			return client(b, noFix.URL(), noFix.Token(), jupyter.ClientOptions{})
		}},
		{"no_fixes", func(*testing.B) *jupyter.Client { return noFixClient }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			k, _ := startKernel(b, tc.client(b), "python3", jupyter.KernelOptions{})
			ctx := testutil.Context(b, 10*time.Minute)
			roundTrip := func() time.Duration {
				start := time.Now()
				e, err := k.Execute(ctx, "x=1", jupyter.ExecuteOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := e.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			for range 5 { // warm up
				roundTrip()
			}
			var ds []time.Duration
			for b.Loop() {
				ds = append(ds, roundTrip())
			}
			reportLatency(b, ds)
		})
	}
}

// BenchmarkKernelStart measures POST /api/kernels until the kernel's
// channels are connected (the server holds the upgrade until the kernel
// answered kernel_info), plus a first round trip.
func BenchmarkKernelStart(b *testing.B) {
	ctx := testutil.Context(b, 10*time.Minute)
	dir := b.TempDir()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		m, err := shared.client.StartKernel(ctx, "python3", dir)
		if err != nil {
			b.Fatal(err)
		}
		k, err := shared.client.Connect(ctx, m.ID, jupyter.KernelOptions{})
		if err != nil {
			b.Fatal(err)
		}
		e, err := k.Execute(ctx, "x=1", jupyter.ExecuteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		_ = k.Close()
		if err := shared.client.DeleteKernel(ctx, m.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportLatency(b, ds)
}

// BenchmarkServerStart measures Supervisor.Start: spawn until /api and an
// authenticated /api/status answer.
func BenchmarkServerStart(b *testing.B) {
	var ds []time.Duration
	for b.Loop() {
		s := jupyter.New(jupyter.Options{Logger: testLogger()})
		start := time.Now()
		if err := s.Start(testutil.Context(b, kernelTimeout)); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := s.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportLatency(b, ds)
}

func reportLatency(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	b.ReportMetric(ms(sum/time.Duration(len(ds))), "ms/op")
	b.ReportMetric(ms(ds[len(ds)/2]), "p50-ms")
	b.ReportMetric(ms(ds[len(ds)*9/10]), "p90-ms")
}
