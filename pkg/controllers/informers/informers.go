// Package informers lets the controllers' informers of Kollect's own kinds
// read the server they run in directly, rather than through its loopback
// client.
package informers

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectinformers "kollect.dev/kollect/pkg/generated/informers/externalversions"
)

// Source lists and watches the server's resources in process
// (apiserver.ListWatches).
type Source interface {
	// ListWatch is the ListerWatcher of the kind whose v1alpha1 objects
	// look like example, nil when the source has none.
	ListWatch(example runtime.Object) cache.ListerWatcher
}

// InProcess makes the informers f builds for the kinds of examples read
// src instead of f's client. Call it before asking f for those informers:
// f keeps the first informer of each kind. A nil src changes nothing.
func InProcess(f kollectinformers.SharedInformerFactory, src Source, examples ...runtime.Object) {
	if src == nil {
		return
	}
	for _, example := range examples {
		lw := src.ListWatch(example)
		if lw == nil {
			continue
		}
		f.InformerFor(example, func(_ versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
			// The namespace index is the one the generated listers use.
			return cache.NewSharedIndexInformer(lw, example, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		})
	}
}
