package sink

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// Secret is the data of the sink's Secret, read by the exporter from the
// host cluster. Nothing derived from it may reach status, Events or logs.
type Secret map[string][]byte

// Get returns the value of key, or "".
func (s Secret) Get(key string) string { return string(s[key]) }

// TLSConfig builds the client TLS configuration of a sink's tls field; nil
// means the system roots.
func TLSConfig(spec *v1alpha1.TLSConfig) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if spec == nil {
		return cfg, nil
	}
	cfg.ServerName = spec.ServerName
	cfg.InsecureSkipVerify = spec.InsecureSkipVerify //nolint:gosec // opt-in, reported by the probe
	if len(spec.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(spec.CABundle) {
			return nil, fmt.Errorf("tls.caBundle holds no PEM certificate: %w", ErrPermanent)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
