package localcluster

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Certificate lifetimes. CAs outlive leaves so that a leaf can be re-issued
// without changing any trust bundle (the APIService caBundle in etcd, the
// kubeconfig files handed out).
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 2 * 365 * 24 * time.Hour
	// A certificate that expires sooner than this is re-issued at start.
	renewBefore = 7 * 24 * time.Hour
)

// keyPair is a certificate and its private key on disk, PEM encoded.
type keyPair struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
	Key               crypto.Signer
}

// CertPEM returns the PEM encoded certificate.
func (k *keyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: k.Cert.Raw})
}

// KeyPEM returns the PEM encoded private key.
func (k *keyPair) KeyPEM() ([]byte, error) { return keyutil.MarshalPrivateKeyToPEM(k.Key) }

// leafSpec describes a certificate issued by a CA.
type leafSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Usages       []x509.ExtKeyUsage
}

// certs is every certificate and key of a local cluster, under <Dir>/pki.
type certs struct {
	Dir string

	CA           *keyPair // cluster CA: kube-apiserver serving cert, client certs (--client-ca-file)
	FrontProxyCA *keyPair // --requestheader-client-ca-file
	FrontProxy   *keyPair // front-proxy-client: the aggregator's client cert to aggregated servers
	APIServer    *keyPair // kube-apiserver serving cert
	Admin        *keyPair // O=system:masters client cert
	KCM          *keyPair // system:kube-controller-manager client cert
	KollectCA    *keyPair // the APIService caBundle
	Kollect      *keyPair // kollect-apiserver serving cert

	ServiceAccountKeyFile    string // private key: --service-account-signing-key-file
	ServiceAccountPubKeyFile string // public key: --service-account-key-file
}

// loadOrCreateCerts reads the certificates under dir, creating (or
// re-issuing) whatever is missing, unreadable, about to expire or no longer
// matches what the cluster needs. Data persists across runs this way while
// a damaged file never stops a start.
func loadOrCreateCerts(dir string) (*certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &certs{Dir: dir}
	var err error
	if c.CA, err = loadOrCreateCA(dir, "ca", "kollect-localcluster-ca"); err != nil {
		return nil, err
	}
	if c.FrontProxyCA, err = loadOrCreateCA(dir, "front-proxy-ca", "kollect-localcluster-front-proxy-ca"); err != nil {
		return nil, err
	}
	if c.KollectCA, err = loadOrCreateCA(dir, "kollect-ca", "kollect-localcluster-kollect-ca"); err != nil {
		return nil, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	if c.APIServer, err = loadOrCreateLeaf(dir, "kube-apiserver", c.CA, leafSpec{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:        append(loopback, net.ParseIP("10.0.0.1")),
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, err
	}
	if c.Admin, err = loadOrCreateLeaf(dir, "admin", c.CA, leafSpec{
		CommonName:   "kollect-admin",
		Organization: []string{"system:masters"},
		Usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	if c.KCM, err = loadOrCreateLeaf(dir, "kube-controller-manager", c.CA, leafSpec{
		CommonName: "system:kube-controller-manager",
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	if c.FrontProxy, err = loadOrCreateLeaf(dir, "front-proxy-client", c.FrontProxyCA, leafSpec{
		CommonName: FrontProxyClientName,
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	svc := KollectServiceName + "." + KollectNamespace
	if c.Kollect, err = loadOrCreateLeaf(dir, "kollect-apiserver", c.KollectCA, leafSpec{
		CommonName: svc + ".svc",
		// The aggregator verifies the serving cert against the APIService
		// caBundle with ServerName <service>.<namespace>.svc, whatever
		// address it dials; clients on the host use localhost/127.0.0.1.
		DNSNames: []string{"localhost", svc, svc + ".svc", svc + ".svc.cluster.local"},
		IPs:      loopback,
		Usages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, err
	}
	if err := c.loadOrCreateServiceAccountKey(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certs) loadOrCreateServiceAccountKey() error {
	c.ServiceAccountKeyFile = filepath.Join(c.Dir, "sa.key")
	c.ServiceAccountPubKeyFile = filepath.Join(c.Dir, "sa.pub")
	if data, err := os.ReadFile(c.ServiceAccountKeyFile); err == nil {
		if key, err := keyutil.ParsePrivateKeyPEM(data); err == nil {
			if signer, ok := key.(crypto.Signer); ok {
				// Always rewrite the public half: it must match.
				return writePublicKey(c.ServiceAccountPubKeyFile, signer.Public())
			}
		}
	}
	key, err := newKey()
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(c.ServiceAccountKeyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writePublicKey(c.ServiceAccountPubKeyFile, key.Public())
}

func writePublicKey(path string, pub crypto.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

// loadKeyPair reads name.crt and name.key from dir.
func loadKeyPair(dir, name string) (*keyPair, error) {
	kp := &keyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	certs, err := cert.CertsFromFile(kp.CertFile)
	if err != nil {
		return nil, err
	}
	key, err := keyutil.PrivateKeyFromFile(kp.KeyFile)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", kp.KeyFile)
	}
	kp.Cert, kp.Key = certs[0], signer
	pub, err := x509.MarshalPKIXPublicKey(signer.Public())
	if err != nil {
		return nil, err
	}
	certPub, err := x509.MarshalPKIXPublicKey(kp.Cert.PublicKey)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(pub, certPub) {
		return nil, fmt.Errorf("%s does not match %s", kp.KeyFile, kp.CertFile)
	}
	if time.Until(kp.Cert.NotAfter) < renewBefore {
		return nil, fmt.Errorf("%s expires %s", kp.CertFile, kp.Cert.NotAfter)
	}
	return kp, nil
}

func (kp *keyPair) write() error {
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	// Key first: a crash in between leaves a cert/key mismatch, which the
	// next load detects and repairs.
	if err := writeFileAtomic(kp.KeyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(kp.CertFile, kp.CertPEM(), 0o644)
}

func loadOrCreateCA(dir, name, commonName string) (*keyPair, error) {
	if kp, err := loadKeyPair(dir, name); err == nil && kp.Cert.IsCA && kp.Cert.Subject.CommonName == commonName {
		return kp, nil
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	crt, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName, NotBefore: time.Now().Add(-time.Hour)}, key)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", name, err)
	}
	kp := &keyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), Cert: crt, Key: key}
	return kp, kp.write()
}

func loadOrCreateLeaf(dir, name string, ca *keyPair, spec leafSpec) (*keyPair, error) {
	if kp, err := loadKeyPair(dir, name); err == nil && leafMatches(kp.Cert, ca, spec) {
		return kp, nil
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(1)),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		NotBefore:    now.Add(-time.Hour).UTC(),
		NotAfter:     now.Add(leafLifetime).UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  spec.Usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", name, err)
	}
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kp := &keyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), Cert: crt, Key: key}
	return kp, kp.write()
}

// leafMatches reports whether an existing certificate was issued by ca and
// carries exactly what spec asks for.
func leafMatches(crt *x509.Certificate, ca *keyPair, spec leafSpec) bool {
	if crt.CheckSignatureFrom(ca.Cert) != nil {
		return false
	}
	if crt.Subject.CommonName != spec.CommonName || !slices.Equal(crt.Subject.Organization, spec.Organization) {
		return false
	}
	if !slices.Equal(crt.DNSNames, spec.DNSNames) || !slices.Equal(crt.ExtKeyUsage, spec.Usages) {
		return false
	}
	if len(crt.IPAddresses) != len(spec.IPs) {
		return false
	}
	for i := range spec.IPs {
		if !crt.IPAddresses[i].Equal(spec.IPs[i]) {
			return false
		}
	}
	return true
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), perm)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
