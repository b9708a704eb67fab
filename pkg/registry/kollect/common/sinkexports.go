package common

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// SinkExportWriter stores the exporters' status entries of Inventories and
// ClusterInventories in process (StatusREST.WriteStatus): at rest they are
// most of the server's writes.
type SinkExportWriter struct {
	Inventories, ClusterInventories *StatusREST
}

// WriteSinkExports replaces, in one update, each entry with the family and
// name of one of entries (the list's map keys) in the status of the
// Inventory namespace/name (the ClusterInventory name when cluster is
// set), or adds it; a later entry of the same sink is written over an
// earlier one. Each entry is its exporter's alone, as a server-side apply
// of it by its own field manager would make it. uid, when set, must be the
// inventory's: an exporter of a deleted inventory cannot write into a new
// one of the same name. It returns each entry's outcome and the
// inventory's resourceVersion after the write that stored it: when the
// validation refuses the update, each entry is written again alone, so
// that one bad entry keeps no other from being stored.
func (w *SinkExportWriter) WriteSinkExports(ctx context.Context, cluster bool, namespace, name, uid string, entries []*v1alpha1.SinkExportStatus) ([]string, []error) {
	rvs, errs := make([]string, len(entries)), make([]error, len(entries))
	// which holds the index in entries of each converted entry.
	var internal []kollect.SinkExportStatus
	var which []int
	for i, e := range entries {
		var in kollect.SinkExportStatus
		if errs[i] = v1alpha1.Convert_v1alpha1_SinkExportStatus_To_kollect_SinkExportStatus(e, &in, nil); errs[i] == nil {
			internal, which = append(internal, in), append(which, i)
		}
	}
	if len(internal) == 0 {
		return rvs, errs
	}
	rv, err := w.write(ctx, cluster, namespace, name, uid, internal)
	for _, i := range which {
		rvs[i], errs[i] = rv, err
	}
	if apierrors.IsInvalid(err) && len(internal) > 1 {
		for j, i := range which {
			rvs[i], errs[i] = w.write(ctx, cluster, namespace, name, uid, internal[j:j+1])
		}
	}
	return rvs, errs
}

// write replaces or adds the entries in one update and returns the
// resourceVersion it made.
func (w *SinkExportWriter) write(ctx context.Context, cluster bool, namespace, name, uid string, internal []kollect.SinkExportStatus) (string, error) {
	status := w.Inventories
	if cluster {
		status = w.ClusterInventories
	}
	return status.WriteStatus(ctx, namespace, name, func(obj runtime.Object) error {
		var list *[]kollect.SinkExportStatus
		var meta *metav1.ObjectMeta
		switch o := obj.(type) {
		case *kollect.Inventory:
			list, meta = &o.Status.SinkExports, &o.ObjectMeta
		case *kollect.ClusterInventory:
			list, meta = &o.Status.SinkExports, &o.ObjectMeta
		default:
			return fmt.Errorf("sink export entries of a %T", obj)
		}
		if uid != "" && string(meta.UID) != uid {
			return apierrors.NewConflict(kollect.Resource(resourceOf(cluster)), name,
				fmt.Errorf("the object has UID %s, the entry is for %s", meta.UID, uid))
		}
		for _, e := range internal {
			if i := slices.IndexFunc(*list, func(old kollect.SinkExportStatus) bool {
				return old.Family == e.Family && old.Name == e.Name
			}); i >= 0 {
				(*list)[i] = e
			} else {
				*list = append(*list, e)
			}
		}
		return nil
	})
}

func resourceOf(cluster bool) string {
	if cluster {
		return "clusterinventories"
	}
	return "inventories"
}
