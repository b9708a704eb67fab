package itemstore

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// Event is one change of the stored items.
type Event struct {
	// Type is Added, Modified or Deleted with Item; Bookmark, with only
	// Revision, when etcd reports progress; Error, with Err, when the
	// watch ends (ResourceExpired when its revision was compacted).
	Type watch.EventType
	// Item is the item as written, or as it was before its deletion; a
	// deletion whose previous content etcd no longer has names only the
	// item.
	Item Stored
	// Revision is the revision of the change: the item's resourceVersion,
	// or for a deletion the deletion's.
	Revision int64
	Err      error
}

// Watch follows every change of the kind's items after revision after
// (exclusive) until ctx ends or the watch fails, which it reports as its
// last event. The channel is closed then.
func (s *Store) Watch(ctx context.Context, after int64) <-chan Event {
	out := make(chan Event)
	go func() {
		defer close(out)
		send := func(ev Event) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		ch := s.client.Watch(wctx, s.keyPrefix, clientv3.WithPrefix(), clientv3.WithRev(after+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
		for resp := range ch {
			switch {
			case resp.CompactRevision != 0:
				send(Event{Type: watch.Error, Err: apierrors.NewResourceExpired("the stored items' revision was compacted")})
				return
			case resp.Err() != nil:
				send(Event{Type: watch.Error, Err: storageError(resp.Err())})
				return
			case resp.IsProgressNotify():
				if !send(Event{Type: watch.Bookmark, Revision: resp.Header.Revision}) {
					return
				}
				continue
			}
			for _, ev := range resp.Events {
				e, ok := s.event(ctx, ev)
				if ok && !send(e) {
					return
				}
			}
		}
		if ctx.Err() == nil {
			send(Event{Type: watch.Error, Err: apierrors.NewInternalError(context.Canceled)})
		}
	}()
	return out
}

// event turns an etcd event into an item's; false for a value that is
// not an item (the registry could not read it either).
func (s *Store) event(ctx context.Context, ev *clientv3.Event) (Event, bool) {
	kv, typ := ev.Kv, watch.Modified
	switch {
	case ev.Type == mvccpb.DELETE:
		typ = watch.Deleted
		if ev.PrevKv == nil {
			namespace, name := s.split(string(kv.Key))
			return Event{Type: typ, Item: Stored{Namespace: namespace, Name: name, Revision: kv.ModRevision}, Revision: kv.ModRevision}, true
		}
		kv = ev.PrevKv
	case ev.IsCreate():
		typ = watch.Added
	}
	r, err := s.decode(ctx, kv.Key, kv.Value)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Skipping a stored value that is not an item", "key", string(kv.Key))
		return Event{}, false
	}
	st := r.stored(kv.ModRevision)
	if typ == watch.Deleted {
		st.Revision = ev.Kv.ModRevision
	}
	return Event{Type: typ, Item: st, Revision: st.Revision}, true
}

// split is the namespace and name of a key.
func (s *Store) split(key string) (namespace, name string) {
	rest := strings.TrimPrefix(key, s.keyPrefix)
	if !s.kind.Namespaced {
		return "", rest
	}
	namespace, name, _ = strings.Cut(rest, "/")
	return namespace, name
}
