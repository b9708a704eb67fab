package common

import (
	"context"
	"fmt"

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

// WriteSinkExport replaces the entry with entry's family and name (the
// list's map keys) in the status of the Inventory namespace/name (the
// ClusterInventory name when cluster is set), or adds it. The entry is the
// exporter's alone, as a server-side apply of it by its own field manager
// would make it. uid, when set, must be the inventory's: an exporter of a
// deleted inventory cannot write into a new one of the same name.
func (w *SinkExportWriter) WriteSinkExport(ctx context.Context, cluster bool, namespace, name, uid string, entry *v1alpha1.SinkExportStatus) error {
	var internal kollect.SinkExportStatus
	if err := v1alpha1.Convert_v1alpha1_SinkExportStatus_To_kollect_SinkExportStatus(entry, &internal, nil); err != nil {
		return err
	}
	status := w.Inventories
	if cluster {
		status = w.ClusterInventories
	}
	return status.WriteStatus(ctx, namespace, name, func(obj runtime.Object) error {
		var entries *[]kollect.SinkExportStatus
		var meta *metav1.ObjectMeta
		switch o := obj.(type) {
		case *kollect.Inventory:
			entries, meta = &o.Status.SinkExports, &o.ObjectMeta
		case *kollect.ClusterInventory:
			entries, meta = &o.Status.SinkExports, &o.ObjectMeta
		default:
			return fmt.Errorf("sink export entries of a %T", obj)
		}
		if uid != "" && string(meta.UID) != uid {
			return apierrors.NewConflict(kollect.Resource(resourceOf(cluster)), name,
				fmt.Errorf("the object has UID %s, the entry is for %s", meta.UID, uid))
		}
		for i := range *entries {
			if e := &(*entries)[i]; e.Family == internal.Family && e.Name == internal.Name {
				*e = internal
				return nil
			}
		}
		*entries = append(*entries, internal)
		return nil
	})
}

func resourceOf(cluster bool) string {
	if cluster {
		return "clusterinventories"
	}
	return "inventories"
}
