package apiserver

import (
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// withResourceVersionCheck answers a request whose resourceVersion query
// parameter is not a resourceVersion with 400 Bad Request. The storage
// parses it deep inside get, list and watch and reports a malformed one as
// an internal error (kubernetes/kubernetes#101350), which the handlers
// would answer with a 500. Resource versions of this server are etcd
// revisions: decimal, unsigned.
func withResourceVersionCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rv := r.URL.Query().Get("resourceVersion"); rv != "" {
			if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
				err := apierrors.NewBadRequest("resourceVersion " + strconv.Quote(rv) + " is not a resourceVersion this server issued: it must be a decimal number, as returned in metadata.resourceVersion")
				responsewriters.ErrorNegotiated(err, Codecs, schema.GroupVersion{}, w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withFilters puts Kollect's filters inside the generic chain: they run
// after authentication and authorization, so they answer only requests
// that may be served.
func withFilters(cfg *genericapiserver.Config) {
	build := cfg.BuildHandlerChainFunc
	cfg.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return build(withResourceVersionCheck(h), c)
	}
}
