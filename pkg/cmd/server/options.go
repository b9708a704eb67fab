// Package server is the kollect-apiserver command: its flags, its
// configuration and its run loop.
package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver"
	"kollect.dev/kollect/pkg/controllers/collect"
	"kollect.dev/kollect/pkg/controllers/export"
	"kollect.dev/kollect/pkg/controllers/fleet"
	"kollect.dev/kollect/pkg/controllers/leader"
	"kollect.dev/kollect/pkg/embeddedetcd"
	generatedopenapi "kollect.dev/kollect/pkg/generated/openapi"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	tenancyadmission "kollect.dev/kollect/pkg/registry/kollect/tenancy"
	"kollect.dev/kollect/pkg/tenancy"
)

// DefaultEtcdPrefix is where objects live in etcd.
const DefaultEtcdPrefix = "/registry/kollect.dev"

// Options are the flags of kollect-apiserver.
type Options struct {
	Recommended *genericoptions.RecommendedOptions

	// DataDir holds the embedded etcd's data when no --etcd-servers is given.
	DataDir string
	// AllowPrivateSinkEndpoints lets sinks point at private addresses.
	AllowPrivateSinkEndpoints bool
	// AllowedSinkCIDRs are prefixes sinks may reach although private.
	AllowedSinkCIDRs []string
	// SinkDNSServer resolves sink host names instead of the system's resolver.
	SinkDNSServer string
	// AllowMemberExec lets member kubeconfigs use exec and auth-provider
	// plugins, which run on this server (memberconfig.Options.AllowExec).
	// Members' API servers follow the sink endpoint policy above.
	AllowMemberExec bool
	// FileSinkRoot is the directory file sinks write under, each
	// namespace's in DIR/<namespace>; empty refuses file sinks.
	FileSinkRoot string
	// AllowLocalGitSinks lets git sinks push to repositories on the
	// server's file system (file://).
	AllowLocalGitSinks bool
	// TenantMode rejects creating and updating the cluster-scoped kinds.
	TenantMode bool
	// Quotas are the defaults of the Scopes' quotas (--default-max-*).
	Quotas tenancy.Quotas
	// ServiceName and ServiceNamespace name the Service the APIService routes
	// through; the self-signed serving certificate is valid for it.
	ServiceName, ServiceNamespace string
	// MemoryLimitRatio is the share of the cgroup's memory limit set as the
	// Go runtime's soft memory limit; 0 leaves the runtime's default.
	MemoryLimitRatio float64
	// GCPercent is the Go runtime's GOGC unless GOGC is set; 0 leaves the
	// runtime's default.
	GCPercent int
	// Controllers configure the embedded controllers and their leader
	// election. They run only with a host cluster (Recommended.CoreAPI).
	Controllers *leader.Options

	// afterConfig, when set, receives the loopback client configuration;
	// tests use it to reach a server started by Run.
	afterConfig func(*rest.Config)
}

// DefaultWatchCacheSizes turns the watch cache off for the item kinds, as
// kube-apiserver does for Events: there is one item per collected object,
// and their cache (every item decoded, the event history, and a B-tree
// snapshot per write for paginated lists) was half of the heap at 100,000
// items. Without it, watches of items are etcd watches (the same
// resourceVersion semantics, 410 Gone once etcd has compacted) and lists
// read etcd. --watch-cache-sizes replaces this list: leaving a kind out, or
// naming it with a non-zero size, turns its cache back on.
var DefaultWatchCacheSizes = []string{"inventoryitems.kollect.dev#0", "clusterinventoryitems.kollect.dev#0"}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		Recommended:      genericoptions.NewRecommendedOptions(DefaultEtcdPrefix, apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		DataDir:          "kollect-data",
		ServiceName:      "kollect-api",
		ServiceNamespace: "kollect-system",
		MemoryLimitRatio: DefaultMemoryLimitRatio,
		GCPercent:        DefaultGCPercent,
		Quotas:           tenancy.DefaultQuotas,
		Controllers:      leader.NewOptions(),
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	o.Recommended.Etcd.WatchCacheSizes = slices.Clone(DefaultWatchCacheSizes)
	// A refused request is asked again after a second rather than ten, so
	// that a grant someone just made works when they retry. The cost: a
	// client that keeps retrying a request it may not make costs one
	// SubjectAccessReview a second instead of one every ten seconds.
	o.Recommended.Authorization.DenyCacheTTL = time.Second
	// Validation lives in the registry strategies; webhooks and admission
	// policies stay off unless enabled explicitly, so the only default
	// plugin is NamespaceLifecycle (no objects in missing namespaces).
	admission := o.Recommended.Admission
	admission.DefaultOffPlugins = sets.New(admission.RecommendedPluginOrder...).Delete(lifecycle.PluginName)
	return o
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Recommended.AddFlags(fs)
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory of local state: the embedded etcd's data (used when --etcd-servers is empty) and the exporters' git clones (export/).")
	fs.BoolVar(&o.AllowPrivateSinkEndpoints, "allow-private-sink-endpoints", o.AllowPrivateSinkEndpoints,
		"Allow sink endpoints on private, loopback, link-local and metadata addresses. Off by default so tenants cannot reach internal services through a sink.")
	fs.StringSliceVar(&o.AllowedSinkCIDRs, "allowed-sink-cidrs", o.AllowedSinkCIDRs,
		"Comma-separated CIDR prefixes (or addresses) sinks may reach although they are private, loopback or otherwise forbidden, such as an internal Git server's 10.20.30.0/24. Checked at admission and on every connection.")
	fs.BoolVar(&o.AllowMemberExec, "allow-member-exec", o.AllowMemberExec,
		"Allow the kubeconfigs of MemberClusters to use exec and auth-provider plugins. Off by default: they run commands on this server, chosen by whoever registers a member. Members' API servers obey the sink endpoint flags (--allow-private-sink-endpoints, --allowed-sink-cidrs).")
	fs.StringVar(&o.SinkDNSServer, "sink-dns-server", o.SinkDNSServer,
		"ip:port of a DNS server that resolves sink host names, at admission and for every connection, instead of the system's resolver (/etc/hosts still answers first).")
	fs.StringVar(&o.FileSinkRoot, "file-sink-root", o.FileSinkRoot,
		"Directory file sinks write under: a sink's endpoint file:///reports in namespace team-a writes to DIR/team-a/reports, and nothing a sink names leaves DIR/<its namespace>. Must be outside --data-dir. Empty (the default) refuses file sinks: they write on the server's own disk.")
	fs.BoolVar(&o.AllowLocalGitSinks, "allow-local-git-sinks", o.AllowLocalGitSinks,
		"Allow git sinks on repositories of the server's file system (file:// endpoints), for local development and tests. Off by default: any path the server can write to would be open to sink authors.")
	fs.BoolVar(&o.TenantMode, "tenant-mode", o.TenantMode,
		"Reject creating and updating ClusterTargets, ClusterInventories and ClusterScopes (deleting them stays allowed), for installs where namespaces are the only unit of tenancy.")
	addQuotaFlags(fs, &o.Quotas)
	fs.StringVar(&o.ServiceName, "service-name", o.ServiceName, "Name of the Service in front of this server; the self-signed serving certificate is valid for it.")
	fs.StringVar(&o.ServiceNamespace, "service-namespace", o.ServiceNamespace, "Namespace of that Service.")
	fs.Float64Var(&o.MemoryLimitRatio, "memory-limit-ratio", o.MemoryLimitRatio,
		"Set the Go runtime's soft memory limit to this share of the container's memory limit (cgroup memory.max), so that garbage collection tightens before the container is killed. Ignored when GOMEMLIMIT is set or without a limit; 0 turns it off.")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent,
		"The garbage collector's target (the Go runtime's GOGC): the heap grows by this percentage of what is live before a collection. Lower holds less memory for more CPU. Ignored when GOGC is set; 0 leaves the runtime's default (100).")
	o.Controllers.AddFlags(fs)
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.MemoryLimitRatio < 0 || o.MemoryLimitRatio > 1 {
		return fmt.Errorf("--memory-limit-ratio must be between 0 and 1, not %v", o.MemoryLimitRatio)
	}
	if o.GCPercent < 0 {
		return fmt.Errorf("--gc-percent must be 0 (the runtime's default) or more, not %d", o.GCPercent)
	}
	if err := validateQuotas(o.Quotas); err != nil {
		return err
	}
	if _, err := o.sinkDialer(); err != nil {
		return err
	}
	if err := o.checkFileSinkRoot(); err != nil {
		return err
	}
	rec := *o.Recommended
	if o.embedded() {
		if o.DataDir == "" {
			return fmt.Errorf("--data-dir is required when --etcd-servers is empty")
		}
		// The embedded etcd's endpoint is known only once it runs: check
		// the other etcd flags against a stand-in.
		etcd := *rec.Etcd
		etcd.StorageConfig.Transport.ServerList = []string{"http://127.0.0.1:2379"}
		rec.Etcd = &etcd
	}
	return utilerrors.NewAggregate(rec.Validate())
}

// sinkDialer builds the dialer every sink connection and probe goes
// through, and whose resolver and allowed prefixes admission uses.
func (o *Options) sinkDialer() (*netguard.Dialer, error) {
	cidrs, err := netguard.ParseCIDRs(o.AllowedSinkCIDRs)
	if err != nil {
		return nil, fmt.Errorf("--allowed-sink-cidrs: %w", err)
	}
	return netguard.New(netguard.Config{
		Policy:    netguard.Policy{AllowPrivate: o.AllowPrivateSinkEndpoints, AllowedCIDRs: cidrs},
		DNSServer: o.SinkDNSServer,
	})
}

// embedded reports whether the server runs its own etcd.
func (o *Options) embedded() bool {
	return len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) == 0
}

// Config builds the server configuration. The embedded etcd, when used, must
// be running already: its endpoint is part of the storage configuration.
func (o *Options) Config() (*apiserver.Config, error) {
	svc := o.ServiceName + "." + o.ServiceNamespace + ".svc"
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost",
		[]string{svc, svc + ".cluster.local", o.ServiceName + "." + o.ServiceNamespace, o.ServiceName},
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}

	cfg := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title, cfg.OpenAPIConfig.Info.Version = "Kollect", "v1alpha1"
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "Kollect", "v1alpha1"
	cfg.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	// Watches never go idle: without this, shutdown waits the whole request
	// timeout (60s) for kube-apiserver's and the controllers' watches before
	// the HTTP server gives up. With it, in-flight requests drain, new ones
	// get 429 Retry-After, and the remaining connections close after 2s.
	cfg.ShutdownSendRetryAfter = true

	if err := o.Recommended.ApplyTo(cfg); err != nil {
		return nil, err
	}
	dialer, err := o.sinkDialer()
	if err != nil {
		return nil, err
	}
	checks := tenancyadmission.Config{TenantMode: o.TenantMode, Quotas: o.Quotas}
	if o.Recommended.Authorization != nil {
		// The `use`, `get` and `list` checks ask the delegated authorizer,
		// as for every request (system:masters, the loopback client
		// included, is allowed without a SubjectAccessReview), through
		// their own copy whose answers live at most TenancyAuthorizationTTL.
		authz, err := tenancyAuthorizer(o.Recommended.Authorization)
		if err != nil {
			return nil, err
		}
		checks.Authorizer = authz
	}
	return &apiserver.Config{
		GenericConfig: cfg,
		ExtraConfig: apiserver.ExtraConfig{Registry: common.Options{
			AllowPrivateSinkEndpoints: o.AllowPrivateSinkEndpoints,
			FileSinks:                 o.FileSinkRoot != "",
			AllowLocalGitSinks:        o.AllowLocalGitSinks,
			SinkDialer:                dialer,
			Tenancy:                   checks,
		}},
	}, nil
}

// TenancyAuthorizationTTL is how long the tenancy checks (`use` on
// Profiles and sinks, `get` on a sink's Secret, `list` on what is collected
// and exported), at admission and at reconcile, keep an authorizer's answer,
// allow or deny. Grants and revocations therefore apply to them within about
// a second, where the request authorizer keeps an allow for
// --authorization-webhook-cache-authorized-ttl (10s). Each distinct
// question costs at most one SubjectAccessReview per TTL; the controllers
// ask each of theirs once per run, so caching longer would save little.
const TenancyAuthorizationTTL = 500 * time.Millisecond

// tenancyAuthorizer is the delegated authorizer of the request options
// (same kubeconfig, always-allowed groups and retry backoff) with answers
// kept for TenancyAuthorizationTTL.
func tenancyAuthorizer(opts *genericoptions.DelegatingAuthorizationOptions) (authorizer.Authorizer, error) {
	fresh := *opts
	fresh.AllowCacheTTL, fresh.DenyCacheTTL = TenancyAuthorizationTTL, TenancyAuthorizationTTL
	var info genericapiserver.AuthorizationInfo
	if err := fresh.ApplyTo(&info); err != nil {
		return nil, fmt.Errorf("the authorizer of the tenancy checks: %w", err)
	}
	return info.Authorizer, nil
}

// Run starts the embedded etcd when needed, serves until ctx is done, and
// stops etcd after the server has drained.
func (o *Options) Run(ctx context.Context) error {
	if limit, of := applyMemoryLimit(o.MemoryLimitRatio); limit > 0 {
		klog.FromContext(ctx).Info("Set the Go soft memory limit from the cgroup's", "limitBytes", limit, "cgroupLimitBytes", of, "ratio", o.MemoryLimitRatio)
	}
	if percent := applyGCPercent(o.GCPercent); percent > 0 {
		klog.FromContext(ctx).V(2).Info("Set the garbage collector's target", "gcPercent", percent)
	}
	if o.embedded() {
		dir, err := filepath.Abs(o.DataDir)
		if err != nil {
			return err
		}
		etcd, err := embeddedetcd.Start(ctx, dir)
		if err != nil {
			return err
		}
		defer etcd.Stop()
		o.Recommended.Etcd.StorageConfig.Transport.ServerList = []string{etcd.Endpoint}
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return err
	}
	// The controllers need the host cluster: the objects they collect,
	// Namespaces, Events and the leader Lease. Without one (CoreAPI off, as
	// in tests of the registry) the server only serves.
	if host := cfg.GenericConfig.ClientConfig; host != nil {
		stateDir, err := filepath.Abs(filepath.Join(o.DataDir, "export"))
		if err != nil {
			return err
		}
		// The controllers re-check the requesters' grants with the same
		// authorizer admission asked.
		authz := cfg.ExtraConfig.Registry.Tenancy.Authorizer
		fileSinkRoot, err := o.prepareFileSinkRoot()
		if err != nil {
			return err
		}
		installControllers(srv.GenericAPIServer, o.Controllers, host, leader.Configs{
			Collect: collect.Config{Items: srv.Items, ClusterItems: srv.ClusterItems, Authorizer: authz, TenantMode: o.TenantMode, Quotas: o.Quotas,
				Informers: srv.ListWatches, Mapper: srv.KindMapper},
			Export: export.Config{StateDir: stateDir, FileSinkRoot: fileSinkRoot, AllowLocalGitSinks: o.AllowLocalGitSinks, Authorizer: authz, TenantMode: o.TenantMode, Dialer: cfg.ExtraConfig.Registry.SinkDialer,
				SinkExports: srv.SinkExports, FirstEntries: &srv.FirstEntries.Slot, Informers: srv.ListWatches},
			// Members are reached under the sinks' endpoint policy.
			Fleet: fleet.Config{Dialer: cfg.ExtraConfig.Registry.SinkDialer, AllowExec: o.AllowMemberExec},
		})
	}
	if o.afterConfig != nil {
		o.afterConfig(rest.CopyConfig(cfg.GenericConfig.LoopbackClientConfig))
	}
	return srv.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
