// Package localcluster runs a real Kubernetes control plane and Kollect on
// one machine, on 127.0.0.1 only, with all state under one directory. It is
// the one harness behind `make run` (cmd/kollect-local) and the end-to-end
// tests (test/e2e).
//
// It starts, from the binaries hack/build-tools.sh builds (etcd v3.6.8,
// kube-apiserver, kube-controller-manager and kubectl v1.36.3, in
// _output/tools/bin):
//
//   - etcd for kube-apiserver (data in <Dir>/etcd);
//   - kube-apiserver with RBAC, client-certificate authentication,
//     ServiceAccount keys (tokens come from the TokenRequest API), and the
//     front-proxy (requestheader) certificates aggregation needs;
//   - kube-controller-manager with a few controllers (DefaultControllers),
//     above all RBAC ClusterRole aggregation: without it the built-in view,
//     edit and admin roles have no rules at all (they are aggregated roles),
//     nor has any aggregated role of Kollect's manifests;
//   - kollect-apiserver replicas with delegated authentication and
//     authorization against it, and their embedded etcd (or an external one);
//   - the registration: Namespace kollect-system, Service kollect-api of
//     type ExternalName with externalName localhost, APIService
//     v1alpha1.kollect.dev with a real caBundle. It waits until the
//     APIService is Available and discovery answers.
//
// Usage:
//
//	c, err := localcluster.Start(ctx, localcluster.Options{
//		Dir:           dir,                  // state; reused by the next Start
//		KollectBinary: "_output/bin/kollect-apiserver",
//		Log:           os.Stderr,            // progress lines
//		FastEtcd:      true,                 // tests only
//	})
//	defer c.Stop()
//	out, stderr, err := c.Kubectl(ctx, "get", "kollect", "-A")
//	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
//	k := c.Kollect()
//	k.Kill()                       // kill -9 (k.Stop(): SIGTERM, SIGKILL after a timeout)
//	k.Start(ctx)                   // same flags, port and data; k.Restart(ctx) = Stop + Start
//	c.RegisterKollect(ctx, k)      // wait until routed again, without the aggregator's back-off
//	p2, _ := c.StartKollect(ctx, localcluster.KollectOptions{Name: "kollect-2"})
//	c.RegisterKollect(ctx, p2)     // APIService -> replica 2
//
// To run kollect-apiserver as a ServiceAccount instead of the admin: Start
// without KollectBinary, apply RBAC, then
//
//	kc, _ := c.ServiceAccountKubeconfig(ctx, "kollect-system", "kollect-apiserver", time.Hour)
//	p, _ := c.StartKollect(ctx, localcluster.KollectOptions{Binary: bin, Kubeconfig: kc})
//	c.RegisterKollect(ctx, p)
//
// # Routing the aggregator to a process on loopback
//
// kube-apiserver v1.36.3 reaches an APIService's Service in one of two ways:
//
//   - --enable-aggregator-routing=true: it resolves the Service to one of its
//     EndpointSlices' addresses (apiserver/pkg/util/proxy.ResolveEndpoint),
//     and only for Services of type ClusterIP, NodePort or LoadBalancer; an
//     ExternalName Service fails with `unsupported service type
//     "ExternalName"`. A ClusterIP Service with a hand-written EndpointSlice
//     for 127.0.0.1 does not work either: endpoint validation rejects
//     loopback addresses.
//   - --enable-aggregator-routing=false (the default): it dials the Service's
//     ClusterIP (nothing listens there: no kube-proxy), or, for an
//     ExternalName Service, https://<externalName>:<APIService
//     spec.service.port> (proxy.ResolveCluster). The TLS ServerName is
//     <service>.<namespace>.svc whatever the address, checked against the
//     APIService caBundle.
//
// So the harness runs kube-apiserver with --enable-aggregator-routing=false
// and an ExternalName Service for localhost, and the APIService port is the
// kollect-apiserver secure port (the Service itself has no ports). The
// availability controller takes the same route for its discovery check.
//
// Note for tests: applying the Service or APIService of artifacts/deploy for
// real (not --dry-run=server) would replace this registration with one that
// routes to a ClusterIP; only its RBAC objects are meant to be applied here.
//
// # What is not there
//
// No scheduler, kubelet, kube-proxy or cloud controller runs, and
// kube-controller-manager runs only DefaultControllers (role aggregation,
// namespace deletion, default ServiceAccounts, garbage collection,
// kube-root-ca.crt). So: Deployments and other workloads are stored, with
// no ReplicaSets or Pods behind them; Pods are never scheduled; Services
// get ClusterIPs but no endpoints, and nothing routes to them; Secrets of
// type kubernetes.io/service-account-token get no token (use
// ServiceAccountToken / ServiceAccountKubeconfig, which call the
// TokenRequest API, or add TokenController to --controllers through
// Options.ControllerManagerArgs: kube-controller-manager has the
// ServiceAccount signing key); the built-in
// "kubernetes" Service has no endpoints (--endpoint-reconciler-type=none,
// since its endpoint would be 127.0.0.1, which validation rejects). With
// Options.NoControllerManager, also: aggregated ClusterRoles (view, edit,
// admin, ...) stay empty, deleted namespaces stay Terminating, namespaces
// get no "default" ServiceAccount, and nothing is garbage collected.
//
// # Processes
//
// Each child runs in its own process group with its stdout and stderr
// appended to <Dir>/logs/<name>.log. Stop sends SIGTERM to the group and
// SIGKILL after Options.StopTimeout; Kill sends SIGKILL at once. On Linux
// every child also has Pdeathsig SIGKILL, forked from a locked OS thread
// that lives as long as the child, so a parent that panics, times out or is
// killed leaves nothing running.
//
// # Directory layout
//
//	<Dir>/pki/            CAs, serving and client certificates, ServiceAccount key
//	<Dir>/etcd/           kube-apiserver's etcd data
//	<Dir>/kube-apiserver/ its --cert-dir (unused: certificates are given)
//	<Dir>/kube-controller-manager/  its kubeconfig and self-signed serving cert
//	<Dir>/<replica>/data  a kollect-apiserver replica's embedded etcd
//	<Dir>/logs/           one log per process
//	<Dir>/kubeconfig      admin kubeconfig (system:masters client certificate)
//	<Dir>/kubeconfigs/    ServiceAccount kubeconfigs
//	<Dir>/ports.json      ports chosen, reused while free
//	<Dir>/.lock           held while a Cluster runs on Dir
package localcluster
