// Package kindmapper maps kinds to the resources the host cluster serves
// them as, through its discovery. The server builds one Mapper and hands it
// to the registry, whose `list` check of targets needs the resource a
// Profile collects, and to the collector, which watches it: one discovery
// cache, refreshed for both.
package kindmapper

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// refreshInterval is the least time between two discovery refreshes caused
// by misses, so that a flood of unknown kinds cannot hammer discovery.
const refreshInterval = 2 * time.Second

// Mapper is a RESTMapper over discovery, cached in memory and refreshed on
// a miss (at most every two seconds), so that a kind installed later (a
// CRD, an aggregated API) resolves without a restart.
// DeferredDiscoveryRESTMapper alone does not refresh: once its cache is
// filled it answers misses from it until something resets it.
type Mapper struct {
	*restmapper.DeferredDiscoveryRESTMapper
	mu        sync.Mutex
	lastReset time.Time
}

// ForHost maps kinds through the host cluster's discovery.
func ForHost(host *rest.Config) (*Mapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(host))
	if err != nil {
		return nil, err
	}
	return New(dc), nil
}

// New maps kinds through any discovery client.
func New(dc discovery.DiscoveryInterface) *Mapper {
	return &Mapper{DeferredDiscoveryRESTMapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// RESTMapping resolves a kind, refreshing discovery once on a miss unless
// it was refreshed less than refreshInterval ago.
func (m *Mapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	mapping, err := m.DeferredDiscoveryRESTMapper.RESTMapping(gk, versions...)
	if err == nil || !meta.IsNoMatchError(err) {
		return mapping, err
	}
	m.mu.Lock()
	refresh := time.Since(m.lastReset) >= refreshInterval
	if refresh {
		m.lastReset = time.Now()
	}
	m.mu.Unlock()
	if !refresh {
		return nil, err
	}
	m.DeferredDiscoveryRESTMapper.Reset()
	return m.DeferredDiscoveryRESTMapper.RESTMapping(gk, versions...)
}

// Reset drops the cache now, for a resource known to be gone (a watch
// answered 404): the next lookup reads discovery again. It counts as a
// refresh: misses within refreshInterval after it do not refresh again.
func (m *Mapper) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.DeferredDiscoveryRESTMapper.Reset()
	m.lastReset = time.Now()
}
