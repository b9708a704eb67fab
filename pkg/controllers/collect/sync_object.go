package collect

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/source"
)

// syncObject makes the stored item of one (target, object) what it should
// be: created, updated, deleted, or left alone when its hash is unchanged.
func (c *Collector) syncObject(ctx context.Context, k objectKey) (err error) {
	// A key without a name asks for a walk of the namespace.
	if k.name == "" {
		c.walk(k.target, k.namespace)
		return nil
	}
	// Write nothing while another replica may lead.
	if !c.holding() {
		countWrite(c.storeFor(k.target).kind(), metrics.OpFenced)
		return errLeaseUnconfirmed
	}

	// What the target collects and what the index holds of the object. A
	// target that ended meanwhile has no index: its end deletes its items.
	spec, inf := c.targets.spec(k.target), c.informers.of(k.target)
	if spec == nil || inf == nil || !inf.synced.Load() {
		return nil // the walk after the target's sync comes back to it
	}
	t, store, objKey := c.index.existing(k.target), c.storeFor(k.target), objectKeyOf(k.namespace, k.name)
	if t == nil {
		return nil
	}
	h := c.index.lookup(t, objKey)
	oldName, old, had, suspects := h.name, h.entry, h.had, h.suspects

	// Items another writer changed are read back first (foreign.go); when
	// this sync ends without writing the object's item, they stay suspect.
	var replace, retain bool
	if len(suspects) > 0 {
		defer func() {
			if err != nil || retain {
				c.index.restoreSuspects(t, suspects, objKey)
			}
		}()
		if old, replace, err = c.repair(ctx, t, store, objKey, suspects, had, oldName, old); err != nil {
			return err
		}
	}

	// Gone, or no longer selected: its item goes.
	raw, exists, err := inf.informer.GetIndexer().GetByKey(objKey)
	if err != nil {
		return err
	}
	obj, _ := raw.(*source.Object)
	if !exists || obj == nil || !c.matches(k.target, spec, obj) {
		c.setFailure(t, objKey, nil)
		c.index.setOverQuota(t, objKey, 0)
		if !had {
			return nil
		}
		return c.deleteItem(ctx, t, store, objKey, oldName)
	}

	// Unchanged since its last extraction: nothing to do.
	src := obj.Source()
	src.Cluster = c.cfg.Cluster
	name := c.itemName(k.target.Name, src)
	same := had && oldName == name && old.labels == spec.labelsKey
	if same && old.extractedWith == spec.fingerprint && old.sourceRV == src.ResourceVersion {
		countWrite(store.kind(), metrics.OpSkip)
		return nil
	}

	// A new item waits, unextracted, while the quota is full.
	if !had && !c.index.hasRoom(t) {
		c.index.setOverQuota(t, objKey, overCount)
		return nil
	}

	// Extract it through the Profile; a failure is reported, the item kept.
	var content extract.Content
	object, err := obj.Decode()
	if err == nil {
		content, err = spec.extractor.Extract(ctx, object)
	}
	if err != nil {
		metrics.ReconcileErrors.WithLabelValues(k.target.Kind(), "extraction").Inc()
		c.setFailure(t, objKey, fmt.Errorf("%s %s: %w", src.Kind, objKey, err))
		retain = replace
		return nil
	}
	c.setFailure(t, objKey, nil)

	// An item over maxItemBytes is not written; the previous one would
	// claim content the object no longer has.
	if tooLarge(h.quota, content.Attributes, content.Object) {
		if had {
			if err := c.deleteItem(ctx, t, store, objKey, oldName); err != nil {
				return err
			}
		}
		c.index.setOverQuota(t, objKey, overSize)
		return nil
	}

	// The same content hash: the stored item is right already.
	content.Selectable = selectableIn(spec.selectable, content.Attributes)
	hash := extract.Hash(src, content)
	sum := hashOf(hash)
	if same && old.hash == sum {
		countWrite(store.kind(), metrics.OpSkip)
		c.index.touch(t, name, sum, src.ResourceVersion, spec.fingerprint)
		return nil
	}

	// Recreated under its name (a new uid): the old item goes first.
	if had && oldName != name {
		if err := c.deleteItem(ctx, t, store, objKey, oldName); err != nil {
			return err
		}
	}
	// A new item takes its place in the quota before it is written.
	isNew := !had || oldName != name
	if isNew && !c.index.reserve(t, objKey) {
		c.index.setOverQuota(t, objKey, overCount)
		return nil
	}

	// Write it, and index what was written.
	item := &desiredItem{namespace: k.target.Namespace, name: name, labels: maps.Clone(spec.labels), labelsKey: spec.labelsKey, source: src, content: content, hash: hash,
		selectable: content.Selectable}
	c.index.beginWrite(t, name, &inflightWrite{objKey: objKey, hash: sum, labels: spec.labelsKey})
	created, rv, err := store.put(ctx, item, had && oldName == name)
	if replace && apierrors.IsInvalid(err) {
		// Another writer changed what an update may not (the source's uid).
		if err = store.delete(ctx, k.target.Namespace, name); err == nil {
			created, rv, err = store.put(ctx, item, false)
		}
	}
	entry := &itemEntry{objKey: objKey, hash: sum, labels: spec.labelsKey, sourceRV: src.ResourceVersion, extractedWith: spec.fingerprint, rv: rv}
	gone := c.index.endWrite(t, name, entry, isNew, err)
	if err != nil {
		return err
	}
	if created {
		countWrite(store.kind(), metrics.OpCreate)
	} else {
		countWrite(store.kind(), metrics.OpUpdate)
	}
	if gone {
		// The target was deleted while this item was written.
		return store.delete(ctx, k.target.Namespace, name)
	}
	c.queueStatus(k.target)
	return nil
}

// repair reads the suspect items of one object from storage (foreign.go).
// The object's own item, when storage does not hold what the index says,
// comes back with an entry that matches nothing, so that the sync writes
// it again in its place; any other item is one no object holds, and is
// deleted.
func (c *Collector) repair(ctx context.Context, t *indexed, store itemStore, objKey string, suspects []string, had bool, oldName string, old itemEntry) (itemEntry, bool, error) {
	replace := false
	for _, name := range suspects {
		if had && name == oldName {
			s, found, err := store.get(ctx, t.key.Namespace, name)
			if err != nil {
				return old, false, err
			}
			if !found || s.hash != old.hash || s.objKey != old.objKey || s.labels != old.labels {
				old, replace = itemEntry{objKey: old.objKey}, true
			}
			continue
		}
		e := c.index.entry(t, name)
		if e != nil && e.objKey != objKey {
			continue // another object's now; its sync repairs it
		}
		// Held by no object, or a second item of this one (a full walk
		// indexes whatever storage holds).
		if err := store.delete(ctx, t.key.Namespace, name); err != nil {
			return old, false, err
		}
		if e != nil {
			c.index.unindexIf(t, name, e)
		}
		countWrite(store.kind(), metrics.OpDelete)
		klog.FromContext(ctx).V(2).Info("Deleted an item no object holds", "target", t.key.String(), "item", name, "object", objKey)
	}
	return old, replace, nil
}

// deleteItem deletes the item name of the object objKey and forgets it.
func (c *Collector) deleteItem(ctx context.Context, t *indexed, store itemStore, objKey, name string) error {
	c.index.beginWrite(t, name, &inflightWrite{objKey: objKey, deleted: true})
	err := store.delete(ctx, t.key.Namespace, name)
	c.index.endDelete(t, name, err)
	if err != nil {
		return err
	}
	countWrite(store.kind(), metrics.OpDelete)
	c.queueStatus(t.key)
	return nil
}

// setFailure records (err non-nil) or clears the extraction failure of an
// object, and reports a change.
func (c *Collector) setFailure(t *indexed, objKey string, err error) {
	msg := ""
	if err != nil {
		// Kept for every failing object: cut as status shows it.
		msg = shorten(err.Error())
	}
	if c.index.setFailure(t, objKey, msg) {
		c.queueStatus(t.key)
	}
}

func countWrite(kind, op string) {
	metrics.ItemWrites.WithLabelValues(kind, op).Inc()
}
