package itemstore

import (
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
)

// NewClient connects to the etcd the registry uses, with the registry's
// transport settings (endpoints, TLS) and timeouts; without its tracing and
// per-call metrics interceptors, which the items' writes would pay for
// each item.
func NewClient(c storagebackend.TransportConfig) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            c.ServerList,
		DialTimeout:          20 * time.Second,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		Logger:               zap.NewNop(),
	}
	if c.CertFile != "" || c.KeyFile != "" || c.TrustedCAFile != "" {
		tls, err := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.TrustedCAFile}.ClientConfig()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tls
	}
	return clientv3.New(cfg)
}
