package common

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// RequesterFrom is the authenticated user of a request as recorded in
// status.requester at now (recordedAt, which --requester-max-age measures),
// or nil when the request carries no user (the in-process test server runs
// without authentication).
func RequesterFrom(ctx context.Context, now metav1.Time) *kollect.RequesterInfo {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || u == nil {
		return nil
	}
	r := &kollect.RequesterInfo{Username: u.GetName(), UID: u.GetUID(), Groups: slices.Clone(u.GetGroups()), RecordedAt: &now}
	if extra := u.GetExtra(); len(extra) > 0 {
		r.Extra = make(map[string]kollect.ExtraValue, len(extra))
		for k, v := range extra {
			r.Extra[k] = slices.Clone(v)
		}
	}
	return r
}
