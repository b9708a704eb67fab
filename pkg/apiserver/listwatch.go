package apiserver

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// ListWatches let the embedded controllers list and watch this server's
// resources in process, from their storage (the watch cache, or etcd for
// the item kinds, which have none by default), as v1alpha1 objects: no
// JSON encoding on the server's side and decoding on theirs, no HTTP, TLS
// or authentication per event. Every status write of an Inventory or a
// Target comes back to the controllers as a watch event, so at rest this is
// most of what the watch path costs. The controllers get what their
// loopback client would (the server's privileged identity reads all), and
// each object is a copy: the cache's own objects are shared.
type ListWatches struct {
	byType map[reflect.Type]storeOf
}

// storeOf is a resource's storage.
type storeOf struct {
	store interface {
		rest.Lister
		rest.Watcher
	}
}

// ListWatch is the in-process ListerWatcher of the resource whose v1alpha1
// objects look like example, nil when the server has none.
func (l *ListWatches) ListWatch(example runtime.Object) cache.ListerWatcher {
	if l == nil {
		return nil
	}
	s, ok := l.byType[reflect.TypeOf(example)]
	if !ok {
		return nil
	}
	return &listWatch{storeOf: s}
}

// newListWatches indexes the main resources of storage by their v1alpha1
// type.
func newListWatches(storage map[string]rest.Storage) (*ListWatches, error) {
	l := &ListWatches{byType: map[reflect.Type]storeOf{}}
	for resource, st := range storage {
		store, ok := st.(interface {
			rest.Lister
			rest.Watcher
			rest.Storage
		})
		if !ok {
			continue // subresources
		}
		gvks, _, err := Scheme.ObjectKinds(store.New())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", resource, err)
		}
		external, err := Scheme.New(v1alpha1.SchemeGroupVersion.WithKind(gvks[0].Kind))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", resource, err)
		}
		l.byType[reflect.TypeOf(external)] = storeOf{store: store}
	}
	return l, nil
}

// listWatch lists and watches one resource, in all namespaces.
type listWatch struct{ storeOf }

var _ cache.ListerWatcherWithContext = &listWatch{}

func (l *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

func (l *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	in, err := internalOptions(opts)
	if err != nil {
		return nil, err
	}
	out, err := l.store.List(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), in)
	if err != nil {
		return nil, err
	}
	return external(out)
}

func (l *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	in, err := internalOptions(opts)
	if err != nil {
		return nil, err
	}
	// The HTTP handler ends a watch after its timeout; so does this, and the
	// reflector watches again.
	var cancel context.CancelFunc
	if opts.TimeoutSeconds != nil {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*opts.TimeoutSeconds)*time.Second)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	w, err := l.store.Watch(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), in)
	if err != nil {
		cancel()
		return nil, err
	}
	x := &externalWatch{in: w, cancel: cancel, out: make(chan watch.Event), stopped: make(chan struct{})}
	go x.relay()
	return x, nil
}

func internalOptions(opts metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	in := &metainternalversion.ListOptions{}
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&opts, in, nil); err != nil {
		return nil, err
	}
	return in, nil
}

// external is a copy of an internal object (or list) as v1alpha1.
func external(obj runtime.Object) (runtime.Object, error) {
	if _, ok := obj.(*metav1.Status); ok {
		return obj, nil
	}
	// Converted objects may share slices and maps with their source, and
	// the cache's are shared: convert a copy. An object the cacher wrapped
	// for its serializations hands out a copy of itself.
	if c, ok := obj.(runtime.CacheableObject); ok {
		obj = c.GetObject()
	} else {
		obj = obj.DeepCopyObject()
	}
	return Scheme.ConvertToVersion(obj, v1alpha1.SchemeGroupVersion)
}

// externalWatch relays a watch of internal objects as v1alpha1 objects
// until its source ends or it is stopped; a reader that stops reading
// after Stop leaves nothing behind (watch.Filter's relay would block on
// its send for good).
type externalWatch struct {
	in      watch.Interface
	cancel  context.CancelFunc
	out     chan watch.Event
	stopped chan struct{}
	once    sync.Once
}

func (w *externalWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *externalWatch) Stop() {
	w.once.Do(func() {
		close(w.stopped)
		w.in.Stop()
		w.cancel()
	})
}

func (w *externalWatch) relay() {
	defer close(w.out)
	defer w.Stop()
	for {
		select {
		case <-w.stopped:
			return
		case ev, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			select {
			case w.out <- externalEvent(ev):
			case <-w.stopped:
				return
			}
		}
	}
}

// externalEvent is ev with its object as v1alpha1.
func externalEvent(ev watch.Event) watch.Event {
	obj, err := external(ev.Object)
	if err != nil {
		return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure,
			Code: 500, Reason: metav1.StatusReasonInternalError, Message: err.Error()}}
	}
	ev.Object = obj
	return ev
}
