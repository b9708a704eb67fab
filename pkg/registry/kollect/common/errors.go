package common

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
)

// tooLargeError is etcd's refusal of an object larger than it accepts in
// one request (--max-request-bytes, 1.5 MiB by default), as the API
// reports it: 413 Request Entity Too Large. The generic store passes the
// bare etcd error through, which the handlers would answer with a 500.
// It keeps etcd's code and text, by which the handlers recognise the
// refusal and retry once without managedFields.
type tooLargeError struct {
	rpctypes.EtcdError
}

// Status implements apierrors.APIStatus.
func (tooLargeError) Status() metav1.Status {
	return apierrors.NewRequestEntityTooLargeError(
		"the object is larger than etcd stores in one request (1.5 MiB unless the server's etcd is configured otherwise); " +
			"labels and annotations are the usual culprits").Status()
}

// storageError reports storage errors the API would otherwise answer
// with a 500 as what they are.
func storageError(err error) error {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) && etcdErr == rpctypes.ErrRequestTooLarge {
		return tooLargeError{etcdErr}
	}
	return err
}

// validateNewMeta checks what only a new object must not carry. Storage
// refuses to create an object with a resourceVersion, with an error the
// API would answer with a 500; say it as a field error instead.
func validateNewMeta(m *metav1.ObjectMeta) field.ErrorList {
	if m.ResourceVersion != "" {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), m.ResourceVersion,
			"must not be set on create: it is assigned by the server")}
	}
	return nil
}

// updateErrors turns errors the generic store would answer with a 500 into
// what they are. The new object is computed inside the storage update
// (objInfo): the generic handler passes some errors of strategic merge
// patches through bare, such as an unknown "$patch" directive, and the
// storage fails to parse a metadata.resourceVersion that is not a number
// as an internal error. Every error the handler recognises is already an
// API status and passes unchanged.
func updateErrors(ctx context.Context, objInfo rest.UpdatedObjectInfo) rest.UpdatedObjectInfo {
	info, _ := genericapirequest.RequestInfoFrom(ctx)
	return updateErrorInfo{UpdatedObjectInfo: objInfo, patch: info != nil && info.Verb == "patch"}
}

type updateErrorInfo struct {
	rest.UpdatedObjectInfo
	patch bool
}

func (u updateErrorInfo) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := u.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	var status apierrors.APIStatus
	if err != nil && u.patch && !errors.As(err, &status) && ctx.Err() == nil {
		return nil, apierrors.NewBadRequest("the patch cannot be applied: " + err.Error())
	}
	if err != nil {
		return obj, err
	}
	if m, ok := obj.(metav1.Object); ok && m.GetResourceVersion() != "" {
		if _, perr := strconv.ParseUint(m.GetResourceVersion(), 10, 64); perr != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("metadata.resourceVersion %q is not a resourceVersion this server issued: it must be a decimal number, as returned by the server, or empty", m.GetResourceVersion()))
		}
	}
	return obj, nil
}
