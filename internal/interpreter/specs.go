package interpreter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
)

// specsTTL is how long a context creation reuses the last listing of the
// installed kernelspecs (see specCache).
const specsTTL = 10 * time.Second

// specCache keeps the live server's last kernelspec listing for context
// creations. A listing makes the Jupyter server read every kernelspec
// directory: the longest part of handing over a prestarted kernel. A
// language the cached listing lacks is looked up in a new one, so a
// kernelspec installed since counts at once; one removed since fails the
// kernel's start (ErrUnsupportedLanguage says so) and drops the cache.
// Listing languages (Languages) always asks the server, and refreshes it.
type specCache struct {
	mu     sync.Mutex
	client *jupyter.Client // the server generation the listing is from; guarded by mu
	list   []language      // guarded by mu
	at     time.Time       // guarded by mu
}

// put keeps list, client's listing as of at.
func (s *specCache) put(client *jupyter.Client, list []language, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client, s.list, s.at = client, list, at
}

// get is client's listing if one younger than specsTTL is kept.
func (s *specCache) get(client *jupyter.Client, now time.Time) ([]language, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != client || s.list == nil || now.Sub(s.at) >= specsTTL {
		return nil, false
	}
	return s.list, true
}

// drop forgets the listing.
func (s *specCache) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client, s.list = nil, nil
}

// listLanguages lists what client's server's kernelspecs run, and keeps
// the listing for findLanguage.
func (e *Engine) listLanguages(ctx context.Context, client *jupyter.Client) ([]language, error) {
	at := e.clock.Now()
	specs, err := client.KernelSpecs(ctx)
	if err != nil {
		return nil, err
	}
	list := languagesFrom(specs.Specs)
	e.specs.put(client, list, at)
	return list, nil
}

// findLanguage finds lang (normalized) among what the installed
// kernelspecs run, from the kept listing when it has lang, else from a
// new one.
func (e *Engine) findLanguage(ctx context.Context, client *jupyter.Client, lang string) (language, error) {
	if list, ok := e.specs.get(client, e.clock.Now()); ok {
		if l, ok := lookup(list, lang); ok {
			return l, nil
		}
	}
	list, err := e.listLanguages(ctx, client)
	if err != nil {
		return language{}, fmt.Errorf("list kernels: %w", err)
	}
	l, ok := lookup(list, lang)
	if !ok {
		return language{}, unsupported(lang, list)
	}
	return l, nil
}
