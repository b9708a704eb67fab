package localcluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KollectOptions configure one kollect-apiserver replica.
type KollectOptions struct {
	// Name names the replica: its log is logs/<Name>.log, its working
	// directory <Dir>/<Name> and its embedded etcd <Dir>/<Name>/data.
	// Default "kollect-apiserver"; a second replica needs another name.
	Name string
	// Binary defaults to Options.KollectBinary.
	Binary string
	// Port is the secure port; 0 picks a free one (remembered per Name
	// in ports.json and reused on the next start while free).
	Port int
	// DataDir overrides <Dir>/<Name>/data (--data-dir).
	DataDir string
	// EtcdServers, when set, is passed as --etcd-servers (an external etcd,
	// say from StartEtcd) instead of --data-dir.
	EtcdServers string
	// Kubeconfig is the host cluster identity (--kubeconfig,
	// --authentication-kubeconfig, --authorization-kubeconfig). Default:
	// the admin kubeconfig; see ServiceAccountKubeconfig to run it as a
	// ServiceAccount.
	Kubeconfig string
	// AllowPrivateSinkEndpoints passes --allow-private-sink-endpoints
	// (sinks on 127.0.0.1, as tests and the local cluster use).
	AllowPrivateSinkEndpoints bool
	// Args are extra flags, appended last.
	Args []string
}

// StartKollect starts a kollect-apiserver replica on 127.0.0.1 and waits
// until its /readyz answers 200. It does not touch the APIService (see
// RegisterKollect). ctx bounds the wait only; the process runs until it is
// stopped, or the cluster is. The process can be stopped, killed
// (kill -9) and restarted through the returned Process.
func (c *Cluster) StartKollect(ctx context.Context, o KollectOptions) (*Process, error) {
	if o.Name == "" {
		o.Name = "kollect-apiserver"
	}
	if o.Binary == "" {
		o.Binary = c.opts.KollectBinary
	}
	if o.Binary == "" {
		return nil, errors.New("localcluster: no kollect-apiserver binary (KollectOptions.Binary or Options.KollectBinary)")
	}
	if err := checkExecutable(o.Binary); err != nil {
		return nil, fmt.Errorf("localcluster: kollect-apiserver: %w", err)
	}
	c.mu.Lock()
	for _, p := range c.extra {
		if p.Name() == o.Name && p.Running() {
			c.mu.Unlock()
			return nil, fmt.Errorf("localcluster: %s is already running (pid %d); give the new replica another Name", o.Name, p.Pid())
		}
	}
	c.mu.Unlock()
	workDir := filepath.Join(c.opts.Dir, o.Name)
	if o.DataDir == "" {
		o.DataDir = filepath.Join(workDir, "data")
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = c.AdminKubeconfig()
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	portNames := []string{o.Name}
	if o.Port != 0 {
		portNames = nil // the caller's port: never re-picked
	}
	p, err := c.startWithPortRetry(ctx, portNames, func() (*Process, error) {
		port := o.Port
		if port == 0 {
			var err error
			if port, err = c.ports.pick(o.Name); err != nil {
				return nil, err
			}
		}
		url := "https://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--secure-port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--tls-cert-file=" + c.certs.Kollect.CertFile,
			"--tls-private-key-file=" + c.certs.Kollect.KeyFile,
			"--kubeconfig=" + o.Kubeconfig,
			"--authentication-kubeconfig=" + o.Kubeconfig,
			"--authorization-kubeconfig=" + o.Kubeconfig,
			"--service-name=" + KollectServiceName,
			"--service-namespace=" + KollectNamespace,
		}
		if o.EtcdServers != "" {
			args = append(args, "--etcd-servers="+o.EtcdServers)
		} else {
			args = append(args, "--data-dir="+o.DataDir)
		}
		if o.AllowPrivateSinkEndpoints {
			args = append(args, "--allow-private-sink-endpoints")
		}
		args = append(args, o.Args...)
		// Readiness as the aggregator sees it: TLS verified against the
		// caBundle, authenticated (admin client certificate, checked by
		// delegated authentication against the cluster CA).
		cfg := c.adminConfig(url)
		cfg.TLSClientConfig.CAData = c.certs.KollectCA.CertPEM()
		httpClient, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		ready := func(ctx context.Context) error { return getOK(ctx, httpClient, url+"/readyz") }
		return c.newProcess(o.Name, o.Binary, workDir, port, url, args, ready), nil
	})
	if err != nil {
		return nil, err
	}
	c.track(p)
	return p, nil
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// RegisterKollect points the kollect.dev/v1alpha1 APIService at replica p
// and waits until the APIService is Available and kollect.dev/v1alpha1
// discovery answers through kube-apiserver (both the group-version
// document and the aggregated /apis document kubectl reads).
//
// It applies (server-side) the Namespace kollect-system, the Service
// kollect-api of type ExternalName with externalName localhost, and the
// APIService v1alpha1.kollect.dev with service port p.Port() and the
// kollect CA as caBundle. It can be called again, for another replica or
// after a restart: each call also bumps an annotation, which makes the
// aggregator re-check availability at once instead of after its back-off.
func (c *Cluster) RegisterKollect(ctx context.Context, p *Process) error {
	begin := time.Now()
	fmt.Fprintf(c.log, "registering APIService %s -> %s...", APIServiceName, p.URL())
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	prevPort, err := c.registeredPort(ctx)
	if err != nil {
		fmt.Fprintln(c.log, " failed")
		return err
	}
	if err := c.applyRegistration(ctx, p.Port()); err != nil {
		fmt.Fprintln(c.log, " failed")
		return err
	}
	if prevPort != 0 && prevPort != p.Port() {
		// Re-pointed from another replica, which may still answer: the
		// Available condition may be the old one's, and kube-apiserver
		// takes a moment (informer latency) to route to the new port.
		// Nothing observable tells when; give it time before checking.
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := c.WaitKollectAvailable(ctx); err != nil {
		fmt.Fprintln(c.log, " failed")
		return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, p.LogFile(), p.logTail(20))
	}
	c.mu.Lock()
	c.kollect = p
	c.mu.Unlock()
	fmt.Fprintf(c.log, " Available in %.1fs\n", time.Since(begin).Seconds())
	return nil
}

func (c *Cluster) applyRegistration(ctx context.Context, port int) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	objs := []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": KollectNamespace},
		}},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": KollectServiceName, "namespace": KollectNamespace},
			"spec":     map[string]any{"type": "ExternalName", "externalName": "localhost"},
		}},
		{apiServiceGVR, map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{
				"name":        APIServiceName,
				"annotations": map[string]any{"localcluster.kollect.dev/registered": time.Now().UTC().Format(time.RFC3339Nano)},
			},
			"spec": map[string]any{
				"group":                KollectGroup,
				"version":              KollectVersion,
				"groupPriorityMinimum": int64(1000),
				"versionPriority":      int64(15),
				"service": map[string]any{
					"namespace": KollectNamespace,
					"name":      KollectServiceName,
					"port":      int64(port),
				},
				"caBundle": base64.StdEncoding.EncodeToString(c.certs.KollectCA.CertPEM()),
			},
		}},
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o.obj}
		var ri dynamic.ResourceInterface = dyn.Resource(o.gvr)
		if ns := u.GetNamespace(); ns != "" {
			ri = dyn.Resource(o.gvr).Namespace(ns)
		}
		data, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		force := true
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "kollect-localcluster", Force: &force}); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// registeredPort is the port of the current APIService, 0 if none.
func (c *Cluster) registeredPort(ctx context.Context) (int, error) {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return 0, err
	}
	u, err := dyn.Resource(apiServiceGVR).Get(ctx, APIServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	port, _, _ := unstructured.NestedInt64(u.Object, "spec", "service", "port")
	return int(port), nil
}

// WaitKollectAvailable waits until the APIService v1alpha1.kollect.dev has
// condition Available=True and kollect.dev/v1alpha1 discovery answers
// through kube-apiserver with at least one resource.
func (c *Cluster) WaitKollectAvailable(ctx context.Context) error {
	cfg := c.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	gv := KollectGroup + "/" + KollectVersion
	var last string
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(apiServiceGVR).Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if ok, msg := apiServiceAvailable(u); !ok {
			last = "APIService not Available: " + msg
			return false, nil
		}
		res, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil || len(res.APIResources) == 0 {
			last = fmt.Sprintf("GET /apis/%s through kube-apiserver: %v (%d resources)", gv, err, lenResources(res))
			return false, nil
		}
		// kubectl reads the aggregated /apis document, which kube-apiserver
		// refreshes from kollect-apiserver on its own schedule.
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
			last = "aggregated discovery: " + err.Error()
			return false, nil
		}
		if !slices.ContainsFunc(lists, func(l *metav1.APIResourceList) bool {
			return l.GroupVersion == gv && len(l.APIResources) > 0
		}) {
			last = "aggregated discovery (/apis) does not list " + gv + " yet"
			return false, nil
		}
		// kubectl explain reads the OpenAPI v3 document kube-apiserver
		// aggregates from kollect-apiserver, also on its own schedule.
		doc, err := dc.RESTClient().Get().AbsPath("/openapi/v3/apis/" + gv).DoRaw(ctx)
		if err != nil || !strings.Contains(string(doc), `"dev.kollect.v1alpha1.Inventory"`) {
			last = fmt.Sprintf("OpenAPI v3 of %s through kube-apiserver: %v", gv, err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for APIService %s: %w (last: %s)", APIServiceName, err, last)
	}
	return nil
}

func lenResources(l *metav1.APIResourceList) int {
	if l == nil {
		return 0
	}
	return len(l.APIResources)
}

func apiServiceAvailable(u *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	return false, "no Available condition yet"
}

// ServiceAccountToken returns a token for ServiceAccount namespace/name
// from the TokenRequest API (no token controller runs in the local
// cluster, so there are no Secret-based tokens). The namespace and the
// ServiceAccount are created if missing. ttl 0 means one hour.
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	if ttl <= 0 {
		ttl = time.Hour
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating serviceaccount %s/%s: %w", namespace, name, err)
	}
	secs := int64(ttl / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountKubeconfig writes a kubeconfig for kube-apiserver that
// authenticates as ServiceAccount namespace/name with a TokenRequest token
// valid for ttl (0: one hour), and returns its path
// (<Dir>/kubeconfigs/<namespace>.<name>.kubeconfig, overwritten by the
// next call for the same account). Use it with KubectlCmd
// ("--kubeconfig", path) or KollectOptions.Kubeconfig.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	token, err := c.ServiceAccountToken(ctx, namespace, name, ttl)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(c.opts.Dir, "kubeconfigs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, namespace+"."+name+".kubeconfig")
	cfg := &rest.Config{
		Host:            c.restCfg.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.certs.CA.CertPEM()},
		BearerToken:     token,
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	return path, writeKubeconfig(path, cfg, user)
}

// writeKubeconfig writes a kubeconfig with one cluster, user and context
// ("kollect-local") from cfg, credentials embedded.
func writeKubeconfig(path string, cfg *rest.Config, user string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kollect-local"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
	}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.TLSClientConfig.CertData,
		ClientKeyData:         cfg.TLSClientConfig.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["kollect-local"] = &clientcmdapi.Context{Cluster: "kollect-local", AuthInfo: user, Namespace: "default"}
	kc.CurrentContext = "kollect-local"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

// KollectRESTConfig returns an admin client configuration that talks to
// replica p directly (not through kube-apiserver): TLS verified with the
// kollect CA, authenticated with the admin client certificate.
func (c *Cluster) KollectRESTConfig(p *Process) *rest.Config {
	cfg := c.adminConfig(p.URL())
	cfg.TLSClientConfig.CAData = c.certs.KollectCA.CertPEM()
	return cfg
}
