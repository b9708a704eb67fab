// Package apiserver assembles the kollect.dev API group: the scheme, the
// storage of every resource, and the generic API server serving them.
package apiserver

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	restclient "k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/install"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/itemstore"
	"kollect.dev/kollect/pkg/kindmapper"
	"kollect.dev/kollect/pkg/registry/kollect/clusterinventory"
	"kollect.dev/kollect/pkg/registry/kollect/clusterinventoryitem"
	"kollect.dev/kollect/pkg/registry/kollect/clusterscope"
	"kollect.dev/kollect/pkg/registry/kollect/clustertarget"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/databasesink"
	"kollect.dev/kollect/pkg/registry/kollect/eventsink"
	"kollect.dev/kollect/pkg/registry/kollect/inventory"
	"kollect.dev/kollect/pkg/registry/kollect/inventoryitem"
	"kollect.dev/kollect/pkg/registry/kollect/membercluster"
	"kollect.dev/kollect/pkg/registry/kollect/profile"
	"kollect.dev/kollect/pkg/registry/kollect/scope"
	"kollect.dev/kollect/pkg/registry/kollect/snapshotsink"
	"kollect.dev/kollect/pkg/registry/kollect/target"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

var (
	// Scheme knows the kollect.dev types, internal and v1alpha1.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes with Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	install.Install(Scheme)
	// The generic server decodes options and status with the meta types.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	Scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// ExtraConfig is what Kollect adds to the generic server configuration.
type ExtraConfig struct {
	// Registry configures the strategies. Registry.Tenancy.Authorizer is
	// the authorizer of the `use` and `list` checks: the command passes the
	// server's delegated authorizer. Registry.Tenancy.RESTMapper defaults
	// to Server.KindMapper, the host cluster's discovery. Without an
	// authorizer the `use` and `list` checks are skipped, without a mapper
	// the `list` check is: only the in-process test server, which runs
	// without authorization and without a host cluster, lacks them (its
	// tests plug their own).
	Registry common.Options
}

// Config is the whole server configuration.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

// CompletedConfig is a Config with defaults filled in.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	extra   *ExtraConfig
	// host reaches the host cluster (nil without one).
	host *restclient.Config
}

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	withFilters(&c.GenericConfig.Config)
	return CompletedConfig{generic: c.GenericConfig.Complete(), extra: &c.ExtraConfig, host: c.GenericConfig.ClientConfig}
}

// Server is a running kollect-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	// Items and ClusterItems are where the collector keeps the read-only
	// item kinds: the registry's etcd, under its keys.
	Items        *itemstore.Store
	ClusterItems *itemstore.Store
	// SinkExports writes the exporters' status entries in process.
	SinkExports *common.SinkExportWriter
	// FirstEntries is where the export controller, while it runs, gives
	// new inventories the status entries it knows at once.
	FirstEntries *common.FirstEntries
	// ListWatches list and watch the resources in process, for the
	// controllers' informers.
	ListWatches *ListWatches
	// KindMapper maps kinds to the host cluster's resources, for the
	// registry's `list` check of targets and for the collector: one
	// discovery cache, refreshed for both. Nil without a host cluster.
	KindMapper *kindmapper.Mapper
}

// New builds the server and installs the kollect.dev/v1alpha1 resources.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("kollect-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	s := &Server{GenericAPIServer: generic}
	opts := c.extra.Registry
	if c.host != nil {
		if s.KindMapper, err = kindmapper.ForHost(c.host); err != nil {
			return nil, fmt.Errorf("host cluster discovery: %w", err)
		}
		if opts.Tenancy.RESTMapper == nil {
			opts.Tenancy.RESTMapper = s.KindMapper
		}
	}
	storage, err := s.buildStorage(c.generic.RESTOptionsGetter, opts)
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(kollect.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.NegotiatedSerializer = withoutProtobuf{Codecs}
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = storage
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	return s, nil
}

// withoutProtobuf offers JSON, YAML and CBOR but not protobuf: Kollect's
// types have no protobuf encoding, so a client that prefers protobuf (the
// namespace and garbage collectors do, through the aggregator) must be
// answered in its JSON fallback rather than with an encoding error.
type withoutProtobuf struct{ runtime.NegotiatedSerializer }

func (s withoutProtobuf) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, info := range s.NegotiatedSerializer.SupportedMediaTypes() {
		if info.MediaType != runtime.ContentTypeProtobuf {
			out = append(out, info)
		}
	}
	return out
}

// itemStores opens the collector's stores of both item kinds, on one etcd
// client of the registry's etcd, closed when the server shuts down.
func (s *Server) itemStores(getter generic.RESTOptionsGetter) (*itemstore.Store, *itemstore.Store, error) {
	var client *clientv3.Client
	var stores []*itemstore.Store
	for _, k := range []struct {
		kind    itemstore.Kind
		example runtime.Object
	}{{itemstore.InventoryItems, &kollect.InventoryItem{}}, {itemstore.ClusterInventoryItems, &kollect.ClusterInventoryItem{}}} {
		opts, err := getter.GetRESTOptions(k.kind.Resource, k.example)
		if err != nil {
			return nil, nil, err
		}
		if client == nil {
			if client, err = itemstore.NewClient(opts.StorageConfig.Transport); err != nil {
				return nil, nil, fmt.Errorf("the items' etcd client: %w", err)
			}
			s.GenericAPIServer.AddPreShutdownHookOrDie("kollect-item-stores", client.Close)
		}
		store, err := itemstore.New(itemstore.Config{Kind: k.kind, Client: client, Prefix: opts.StorageConfig.Prefix,
			ResourcePrefix: opts.ResourcePrefix, Codec: opts.StorageConfig.Codec, Transformer: opts.StorageConfig.Transformer})
		if err != nil {
			return nil, nil, err
		}
		stores = append(stores, store)
	}
	return stores[0], stores[1], nil
}

// withStatus is the constructor shape of kinds with a status subresource.
type withStatus func(*runtime.Scheme, generic.RESTOptionsGetter, common.Options) (*common.REST, *common.StatusREST, error)

func (s *Server) buildStorage(getter generic.RESTOptionsGetter, opts common.Options) (map[string]rest.Storage, error) {
	storage := map[string]rest.Storage{}
	s.SinkExports = &common.SinkExportWriter{}
	s.FirstEntries = &common.FirstEntries{}
	opts.FirstEntries = s.FirstEntries
	// The tenancy checks read Scopes, ClusterScopes, Profiles and
	// MemberClusters through their storage, in process, and count what the quotas limit; the kinds
	// they check are built with them.
	checker := tenancy.New(opts.Tenancy)
	opts.Checker = checker

	for resource, newREST := range map[string]withStatus{
		"profiles":           profile.NewREST,
		"targets":            target.NewREST,
		"clustertargets":     clustertarget.NewREST,
		"inventories":        inventory.NewREST,
		"clusterinventories": clusterinventory.NewREST,
		"snapshotsinks":      snapshotsink.NewREST,
		"databasesinks":      databasesink.NewREST,
		"eventsinks":         eventsink.NewREST,
		"memberclusters":     membercluster.NewREST,
	} {
		main, status, err := newREST(Scheme, getter, opts)
		if err != nil {
			return nil, err
		}
		storage[resource] = main
		storage[resource+"/status"] = status
		switch resource {
		case "inventories":
			s.SinkExports.Inventories = status
		case "clusterinventories":
			s.SinkExports.ClusterInventories = status
		}
	}

	scopes, err := scope.NewREST(Scheme, getter, opts)
	if err != nil {
		return nil, err
	}
	storage["scopes"] = scopes
	clusterScopes, err := clusterscope.NewREST(Scheme, getter, opts)
	if err != nil {
		return nil, err
	}
	storage["clusterscopes"] = clusterScopes
	checker.SetLookups(tenancy.Lookups{
		Scopes:         scopes,
		ClusterScopes:  clusterScopes,
		Profiles:       storage["profiles"].(rest.Getter),
		MemberClusters: storage["memberclusters"].(rest.Lister),
		Quota: tenancy.QuotaLookups{
			Targets:            storage["targets"].(rest.Lister),
			ClusterTargets:     storage["clustertargets"].(rest.Lister),
			Profiles:           storage["profiles"].(rest.Lister),
			Inventories:        storage["inventories"].(rest.Lister),
			ClusterInventories: storage["clusterinventories"].(rest.Lister),
			Sinks:              []rest.Lister{storage["snapshotsinks"].(rest.Lister), storage["databasesinks"].(rest.Lister), storage["eventsinks"].(rest.Lister)},
		},
	})

	s.FirstEntries.ReadSinksWith(map[v1alpha1.SinkFamily]rest.Getter{
		v1alpha1.SinkFamilySnapshot: storage["snapshotsinks"].(rest.Getter),
		v1alpha1.SinkFamilyDatabase: storage["databasesinks"].(rest.Getter),
		v1alpha1.SinkFamilyEvent:    storage["eventsinks"].(rest.Getter),
	})

	items, err := inventoryitem.NewREST(Scheme, getter, opts)
	if err != nil {
		return nil, err
	}
	storage["inventoryitems"] = items
	clusterItems, err := clusterinventoryitem.NewREST(Scheme, getter, opts)
	if err != nil {
		return nil, err
	}
	storage["clusterinventoryitems"] = clusterItems
	if s.Items, s.ClusterItems, err = s.itemStores(getter); err != nil {
		return nil, err
	}
	if s.ListWatches, err = newListWatches(storage); err != nil {
		return nil, err
	}
	return storage, nil
}
