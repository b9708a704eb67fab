package common

import (
	"context"
	"errors"

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

// patchErrors makes an error in applying the patch of a PATCH request a
// 400. The patch is applied inside the storage update (objInfo), and the
// generic handler passes some errors of strategic merge patches through
// bare, such as an unknown "$patch" directive, which would become a 500.
// Every error the handler recognises is already an API status and passes
// unchanged.
func patchErrors(ctx context.Context, objInfo rest.UpdatedObjectInfo) rest.UpdatedObjectInfo {
	if info, ok := genericapirequest.RequestInfoFrom(ctx); !ok || info.Verb != "patch" {
		return objInfo
	}
	return patchErrorInfo{objInfo}
}

type patchErrorInfo struct {
	rest.UpdatedObjectInfo
}

func (p patchErrorInfo) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := p.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	var status apierrors.APIStatus
	if err != nil && !errors.As(err, &status) && ctx.Err() == nil {
		return nil, apierrors.NewBadRequest("the patch cannot be applied: " + err.Error())
	}
	return obj, err
}
