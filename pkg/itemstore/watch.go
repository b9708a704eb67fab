package itemstore

import (
	"context"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// Event is one change of the stored items.
type Event struct {
	// Own tells a change this Store made (Create, Update, Delete): only its
	// Revision and the item's namespace and name are given, the content is
	// not decoded. A change that reaches the watch before the write that
	// made it has returned is given whole, as any other.
	Own bool
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
	if s.own.take(kv.ModRevision) {
		if ev.Type == mvccpb.DELETE {
			typ = watch.Deleted
		} else if ev.IsCreate() {
			typ = watch.Added
		}
		namespace, name := s.split(string(kv.Key))
		return Event{Type: typ, Own: true, Item: Stored{Namespace: namespace, Name: name, Revision: kv.ModRevision}, Revision: kv.ModRevision}, true
	}
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

// ownWrites are the revisions of a store's own writes its watches have not
// delivered yet: a watch gives those without decoding them (the collector
// only needs to know they are its own). A revision is recorded only while
// it is ahead of what the watches delivered, so nothing is kept for good.
type ownWrites struct {
	mu sync.Mutex
	// delivered is the highest revision a watch delivered.
	delivered int64
	revs      map[int64]struct{}
}

// maxOwnWrites bounds the revisions kept: more are only ever held while no
// watch runs, and are then dropped (their changes are decoded instead).
const maxOwnWrites = 1 << 16

func (o *ownWrites) add(rev int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if rev <= o.delivered {
		return // delivered already, decoded as any change
	}
	if o.revs == nil || len(o.revs) >= maxOwnWrites {
		o.revs = map[int64]struct{}{}
	}
	o.revs[rev] = struct{}{}
}

// take records that a watch delivers the change at rev, and tells whether
// it is an own write: one add recorded before, which it forgets; an add
// after finds it delivered.
func (o *ownWrites) take(rev int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delivered = max(o.delivered, rev)
	_, ok := o.revs[rev]
	delete(o.revs, rev)
	return ok
}
