// Package git implements the git snapshot sink: one document per
// inventory, committed to a branch of a remote repository (https://,
// ssh:// or file://; http:// for tests) and pushed.
//
// The sink keeps a bare clone in a private work directory and builds
// trees and commits directly in its object store. Without a worktree
// nothing is checked out, so symlinks or odd files in the repository can
// never redirect a write onto the local file system, and a commit only
// ever touches the one document it is about.
//
// Every network connection goes through the sink's netguard.Dialer (see
// transport.go): https:// and http:// through go-git's protocol registry,
// with redirects refused, and ssh:// through a dialer go-git takes as a
// proxy.
package git

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	ctrlplumbing "kollect.dev/kollect/pkg/controllers/plumbing" // go-git has a plumbing package too
	"kollect.dev/kollect/pkg/netguard"
)

// Defaults of the git sink configuration: the API's (admission stores
// them in the spec), for specs that were not defaulted.
const (
	DefaultBranch        = v1alpha1.DefaultGitBranch
	DefaultPathTemplate  = v1alpha1.DefaultPathTemplate // a directory per cluster
	DefaultCommitMessage = v1alpha1.DefaultGitCommitMessage
	DefaultAuthorName    = v1alpha1.DefaultGitAuthorName
	DefaultAuthorEmail   = v1alpha1.DefaultGitAuthorEmail
	// DefaultUsername is the HTTP basic auth user sent with a token when the
	// Secret has no "username"; hosts that authenticate by token alone
	// ignore it.
	DefaultUsername = "kollect"
)

// ClusterNamespace stands in for the namespace of a ClusterInventory in
// paths and commit messages.
const ClusterNamespace = "_cluster"

// maxPushRetries bounds how often a push rejected because someone else
// moved the branch is rebuilt on the new head and tried again.
const maxPushRetries = 3

// retryPause scales the random pause before a retried push: up to
// retryPause<<n before retry n.
const retryPause = 25 * time.Millisecond

const remoteName = "origin"

// Sink commits snapshot documents to one branch of one repository.
type Sink struct {
	endpoint        string
	branch          plumbing.ReferenceName // refs/heads/<branch>, local and remote
	tracking        plumbing.ReferenceName // refs/remotes/origin/<branch>
	format          sink.Format
	pathTemplate    string
	messageTemplate string
	authorName      string
	authorEmail     string

	auth            transport.AuthMethod
	caBundle        []byte
	insecureSkipTLS bool
	// dialer makes the network connections; proxy routes ssh:// through it.
	dialer *netguard.Dialer
	proxy  transport.ProxyOptions
	// secrets are the credential values (and encodings of them) removed
	// from every error message.
	secrets []string

	// mu serializes all operations: they share one clone and its refs.
	mu   sync.Mutex
	repo *gogit.Repository
}

var _ sink.SnapshotSink = (*Sink)(nil)

// ErrLocalDisabled refuses a file:// repository on a server without
// --allow-local-git-sinks. Admission refuses them too; this covers sinks
// admitted by a server that had the flag, or before the flag existed.
var ErrLocalDisabled = fmt.Errorf("git repositories on the server's file system (file://) are disabled: the server runs without --allow-local-git-sinks: %w", sink.ErrPermanent)

func init() {
	sink.Snapshots.Register(string(v1alpha1.SnapshotSinkGit), build)
}

// build is the git type's sink.Factory: the clone lives in p.StateDir.
func build(_ context.Context, spec *v1alpha1.SnapshotSinkSpec, p sink.Params) (sink.SnapshotSink, error) {
	if spec != nil && isLocalEndpoint(spec.Endpoint) && !p.AllowLocal {
		return nil, ErrLocalDisabled
	}
	s, err := New(spec, p.Secret, p.StateDir, p.Dialer)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// isLocalEndpoint reports whether a URL names the server's file system.
// One that does not parse is not local: New refuses it.
func isLocalEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err == nil && strings.EqualFold(u.Scheme, "file")
}

// New validates the spec and the Secret, and opens or prepares the clone
// in workDir: a clone of the same endpoint left by an earlier run is
// reused, anything else in workDir is removed. New does not contact the
// remote. Network endpoints connect only through dialer; file:// ones need
// none.
func New(spec *v1alpha1.SnapshotSinkSpec, secret sink.Secret, workDir string, dialer *netguard.Dialer) (*Sink, error) {
	if spec == nil {
		return nil, fmt.Errorf("git sink: no spec: %w", sink.ErrPermanent)
	}
	if workDir == "" {
		return nil, fmt.Errorf("git sink: no work directory: %w", sink.ErrPermanent)
	}
	cfg := spec.Git
	if cfg == nil {
		cfg = &v1alpha1.GitSinkConfig{}
	}
	s := &Sink{
		endpoint:        spec.Endpoint,
		format:          sink.Format(spec.Serialization.Format),
		pathTemplate:    orDefault(cfg.PathTemplate, DefaultPathTemplate),
		messageTemplate: orDefault(cfg.CommitMessage, DefaultCommitMessage),
		authorName:      orDefault(cfg.AuthorName, DefaultAuthorName),
		authorEmail:     orDefault(cfg.AuthorEmail, DefaultAuthorEmail),
	}
	s.secrets = secretValues(secret)

	branch := orDefault(cfg.Branch, DefaultBranch)
	s.branch = plumbing.NewBranchReferenceName(branch)
	s.tracking = plumbing.NewRemoteReferenceName(remoteName, branch)
	if s.branch.Validate() != nil || !s.branch.IsSafe() {
		return nil, fmt.Errorf("git sink: invalid branch %q: %w", branch, sink.ErrPermanent)
	}
	switch s.format {
	case "", sink.JSON, sink.YAML, sink.NDJSON:
	default:
		return nil, fmt.Errorf("git sink: unknown serialization format %q: %w", s.format, sink.ErrPermanent)
	}
	// A template that cannot give a valid path fails now, not at the first
	// export.
	if _, err := s.path(sink.Inventory{Cluster: "cluster", Namespace: "ns", Name: "name"}); err != nil {
		return nil, err
	}

	u, err := parseEndpoint(spec.Endpoint)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "file" {
		if dialer == nil {
			return nil, fmt.Errorf("git sink: no dialer for a network endpoint: %w", sink.ErrPermanent)
		}
		s.dialer = dialer
		if u.Scheme == "ssh" {
			s.proxy = sshProxy(dialer)
		}
	}
	if s.auth, err = authMethod(u, secret); err != nil {
		return nil, s.scrub(err)
	}
	if tls := spec.TLS; tls != nil {
		// go-git adds the bundle to the system roots rather than replacing
		// them, and has no server name override.
		if tls.ServerName != "" {
			return nil, fmt.Errorf("git sink: tls.serverName is not supported: %w", sink.ErrPermanent)
		}
		if _, err := sink.TLSConfig(tls); err != nil {
			return nil, fmt.Errorf("git sink: %w", err)
		}
		s.caBundle = tls.CABundle
		s.insecureSkipTLS = tls.InsecureSkipVerify
	}

	if s.repo, err = openClone(workDir, s.endpoint); err != nil {
		return nil, s.scrub(fmt.Errorf("git sink: preparing the clone in %s: %w", workDir, err))
	}
	return s, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func parseEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("git sink: endpoint is not a URL: %w", sink.ErrPermanent)
	}
	switch u.Scheme {
	case "https", "http", "ssh":
		if u.Host == "" {
			return nil, fmt.Errorf("git sink: endpoint %s has no host: %w", ctrlplumbing.RedactURL(u), sink.ErrPermanent)
		}
	case "file":
		if u.Host != "" || !path.IsAbs(u.Path) {
			return nil, fmt.Errorf("git sink: endpoint %s must be file:///absolute/path: %w", ctrlplumbing.RedactURL(u), sink.ErrPermanent)
		}
	default:
		return nil, fmt.Errorf("git sink: endpoint must be https://, ssh:// or file://: %w", sink.ErrPermanent)
	}
	// Credentials belong in the Secret, where they stay out of status,
	// events and the clone's config.
	if _, hasPassword := u.User.Password(); hasPassword {
		return nil, fmt.Errorf("git sink: endpoint %s holds a password; use the Secret: %w", ctrlplumbing.RedactURL(u), sink.ErrPermanent)
	}
	return u, nil
}

// authMethod builds the credentials the endpoint's scheme uses from the
// Secret.
func authMethod(u *url.URL, secret sink.Secret) (transport.AuthMethod, error) {
	token, key := secret.Get("token"), secret["ssh-privatekey"]
	switch u.Scheme {
	case "https", "http":
		if token != "" {
			return &githttp.BasicAuth{Username: orDefault(secret.Get("username"), DefaultUsername), Password: token}, nil
		}
		if len(key) > 0 {
			return nil, fmt.Errorf("git sink: Secret key ssh-privatekey needs an ssh:// endpoint: %w", sink.ErrPermanent)
		}
		return nil, nil
	case "ssh":
		if len(key) == 0 {
			return nil, fmt.Errorf("git sink: an ssh:// endpoint needs Secret key ssh-privatekey: %w", sink.ErrPermanent)
		}
		knownHosts := secret["known_hosts"]
		if len(knownHosts) == 0 {
			// Never trust whatever host answers: the key would be handed to it.
			return nil, fmt.Errorf("git sink: an ssh:// endpoint needs Secret key known_hosts: %w", sink.ErrPermanent)
		}
		user := u.User.Username()
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, key, "")
		if err != nil {
			return nil, fmt.Errorf("git sink: Secret key ssh-privatekey: %w: %w", err, sink.ErrPermanent)
		}
		port := u.Port()
		if port == "" {
			port = "22"
		}
		if err := setHostKeys(keys, knownHosts, net.JoinHostPort(u.Hostname(), port)); err != nil {
			return nil, fmt.Errorf("git sink: Secret key known_hosts: %w: %w", err, sink.ErrPermanent)
		}
		return keys, nil
	default: // file
		return nil, nil
	}
}

// setHostKeys makes keys verify the server against known_hosts content.
// The parsers only read files, so the content goes through a temp file
// that is removed at once; the database is in memory afterwards.
func setHostKeys(keys *gitssh.PublicKeys, knownHosts []byte, hostWithPort string) error {
	f, err := os.CreateTemp("", "kollect-known-hosts-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, err = f.Write(knownHosts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	db, err := gitssh.NewKnownHostsDb(f.Name())
	if err != nil {
		return err
	}
	keys.HostKeyCallback = db.HostKeyCallback()
	// Offer only the key types known_hosts holds for the host, so the
	// server does not pick one the callback would then reject.
	keys.HostKeyAlgorithms = db.HostKeyAlgorithms(hostWithPort)
	return nil
}

// secretValues lists what must never appear in an error: the credentials
// and the forms go-git could put them in (URL userinfo, a basic auth
// header, single lines of a key).
func secretValues(secret sink.Secret) []string {
	var values []string
	add := func(v string) {
		if v != "" && !slices.Contains(values, v) {
			values = append(values, v)
		}
	}
	if token := secret.Get("token"); token != "" {
		add(token)
		add(url.QueryEscape(token))
		add(url.PathEscape(token))
		add(url.UserPassword(orDefault(secret.Get("username"), DefaultUsername), token).String())
		add(base64.StdEncoding.EncodeToString([]byte(orDefault(secret.Get("username"), DefaultUsername) + ":" + token)))
	}
	if key := secret.Get("ssh-privatekey"); key != "" {
		add(strings.TrimSpace(key))
		for line := range strings.Lines(key) {
			if line = strings.TrimSpace(line); len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				add(line)
			}
		}
	}
	// Longest first, so a value containing another is replaced whole.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	return values
}

// path is the inventory's document path in the repository.
func (s *Sink) path(inv sink.Inventory) (string, error) {
	if strings.Contains(s.pathTemplate, "{cluster}") {
		if err := checkSegment(inv.Cluster); err != nil {
			return "", fmt.Errorf("git sink: the cluster name %q cannot be a path element: %w: %w", inv.Cluster, err, sink.ErrPermanent)
		}
	}
	p := sink.Expand(s.pathTemplate, map[string]string{
		"cluster":   inv.Cluster,
		"namespace": namespaceOf(inv),
		"inventory": inv.Name,
		"ext":       s.format.Ext(),
	})
	if err := checkPath(p); err != nil {
		return "", fmt.Errorf("git sink: pathTemplate %q gives %q: %w: %w", s.pathTemplate, p, err, sink.ErrPermanent)
	}
	return p, nil
}

func namespaceOf(inv sink.Inventory) string {
	if inv.Namespace == "" {
		return ClusterNamespace
	}
	return inv.Namespace
}

// checkSegment accepts a value that stands for exactly one path element.
// The server's --cluster-name is a DNS label; checking here keeps any other
// value from moving a document into another cluster's directory.
func checkSegment(v string) error {
	switch {
	case v == "":
		return errors.New("it is empty")
	case v == "." || v == ".." || strings.EqualFold(v, ".git"):
		return errors.New("it is ., .. or .git")
	case strings.ContainsAny(v, "/\\\x00"):
		return errors.New("it contains a slash, backslash or NUL")
	}
	return nil
}

// checkPath accepts a relative slash-separated path of plain names: no
// empty, "." or ".." elements and nothing named .git, which git would
// refuse to check out (or worse, treat as repository metadata).
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return errors.New("path is absolute")
	case strings.ContainsRune(p, 0):
		return errors.New("path contains NUL")
	}
	for _, elem := range strings.Split(p, "/") {
		switch {
		case elem == "..":
			return errors.New("path contains a .. element")
		case elem == "" || elem == ".":
			return errors.New("path contains an empty or . element")
		case strings.EqualFold(elem, ".git"):
			return errors.New("path contains a .git element")
		}
	}
	return nil
}

// openClone returns the bare clone in workDir, or a fresh empty one when
// workDir holds no clone of endpoint.
func openClone(workDir, endpoint string) (*gogit.Repository, error) {
	if repo, err := gogit.PlainOpen(workDir); err == nil && isCloneOf(repo, endpoint) {
		return repo, nil
	}
	// workDir is this sink's private copy: whatever else is in it (a clone
	// of a former endpoint, a clone interrupted half-way) is discarded.
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(workDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(workDir, e.Name())); err != nil {
			return nil, err
		}
	}
	repo, err := gogit.PlainInit(workDir, true)
	if err != nil {
		return nil, err
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{endpoint}}); err != nil {
		return nil, err
	}
	return repo, nil
}

func isCloneOf(repo *gogit.Repository, endpoint string) bool {
	cfg, err := repo.Config()
	if err != nil || !cfg.Core.IsBare {
		return false
	}
	remote, ok := cfg.Remotes[remoteName]
	return ok && len(remote.URLs) == 1 && remote.URLs[0] == endpoint
}

// Write commits the encoded envelope to the inventory's path and pushes.
// It makes no commit, and returns false, when the branch already holds a
// document with the same checksum and generation: a new exportedAt alone
// is not a change worth a commit.
func (s *Sink) Write(ctx context.Context, inv sink.Inventory, env *sink.Envelope) (bool, error) {
	p, err := s.path(inv)
	if err != nil {
		return false, err
	}
	doc, err := sink.Encode(env, s.format)
	if err != nil {
		return false, fmt.Errorf("git sink: encoding: %w: %w", err, sink.ErrPermanent)
	}
	message := sink.Expand(s.messageTemplate, map[string]string{
		"cluster":   inv.Cluster,
		"namespace": namespaceOf(inv),
		"inventory": inv.Name,
		"itemCount": strconv.Itoa(env.ItemCount),
		"checksum":  env.Checksum,
	})
	when := env.ExportedAt
	if when.IsZero() {
		when = time.Now()
	}
	unchanged := func(current []byte) bool {
		header, err := sink.Header(current, s.format)
		// An unreadable document is replaced.
		return err == nil && header.Checksum == env.Checksum && header.Generation == env.Generation
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	written, err := s.commitAndPush(ctx, p, message, when, func(current []byte, exists bool) ([]byte, bool) {
		if exists && unchanged(current) {
			return nil, false
		}
		return doc, true
	})
	if err != nil {
		return false, s.scrub(fmt.Errorf("git sink: writing %s: %w", p, err))
	}
	return written, nil
}

// Delete removes the inventory's document in a commit and pushes; nothing
// happens when the branch does not hold it.
func (s *Sink) Delete(ctx context.Context, inv sink.Inventory) error {
	p, err := s.path(inv)
	if err != nil {
		return err
	}
	message := fmt.Sprintf("kollect: remove %s/%s", namespaceOf(inv), inv.Name)
	if inv.Cluster != "" {
		message = fmt.Sprintf("kollect: remove %s/%s/%s", inv.Cluster, namespaceOf(inv), inv.Name)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.commitAndPush(ctx, p, message, time.Now(), func(_ []byte, exists bool) ([]byte, bool) {
		return nil, exists
	})
	if err != nil {
		return s.scrub(fmt.Errorf("git sink: removing %s: %w", p, err))
	}
	return nil
}

// decision says what to commit at a path given what the remote branch
// holds there: the new content (nil removes the file), and whether to
// commit at all.
type decision func(current []byte, exists bool) (content []byte, commit bool)

// commitAndPush brings the local branch to the remote head, commits what
// decide asks for on top and pushes. When the push is rejected because the
// branch moved meanwhile, it starts over from the new head (deciding
// again: the other writer may have written the same document), at most
// maxPushRetries times. Callers hold mu.
func (s *Sink) commitAndPush(ctx context.Context, p, message string, when time.Time, decide decision) (bool, error) {
	if s.repo == nil {
		return false, errors.New("sink is closed")
	}
	var pushErr error
	for attempt := range 1 + maxPushRetries {
		if attempt > 0 {
			// Another writer won the race (a replica, or another cluster's
			// server on the same branch): a short jittered pause lets it
			// finish instead of racing it again in lockstep.
			if err := pause(ctx, time.Duration(rand.Int64N(int64(retryPause<<attempt)))); err != nil {
				return false, fmt.Errorf("pushing: %w (stopped retrying: %w)", pushErr, err)
			}
		}
		head, err := s.fetch(ctx)
		if err != nil {
			return false, fmt.Errorf("fetching: %w", err)
		}
		current, exists, err := s.readFile(head, p)
		if err != nil {
			return false, err
		}
		content, ok := decide(current, exists)
		if !ok {
			return false, nil
		}
		changed, err := s.commit(head, p, content, message, when)
		if err != nil || !changed {
			return false, err
		}
		pushErr = s.push(ctx)
		if pushErr == nil {
			return true, nil
		}
		if !isRejected(pushErr) {
			return false, fmt.Errorf("pushing: %w", pushErr)
		}
	}
	return false, fmt.Errorf("pushing: branch moved on every one of %d attempts: %w", 1+maxPushRetries, pushErr)
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// fetch updates the remote-tracking ref and hard-resets the local branch
// to it. It returns the remote head, the zero hash when the branch does
// not exist yet.
func (s *Sink) fetch(ctx context.Context) (plumbing.Hash, error) {
	err := s.repo.FetchContext(s.dialContext(ctx), &gogit.FetchOptions{
		RemoteName:      remoteName,
		RefSpecs:        []config.RefSpec{config.RefSpec("+" + s.branch + ":" + s.tracking)},
		Auth:            s.auth,
		CABundle:        s.caBundle,
		InsecureSkipTLS: s.insecureSkipTLS,
		ProxyOptions:    s.proxy,
		Tags:            gogit.NoTags,
	})
	var head plumbing.Hash
	switch {
	case err == nil || errors.Is(err, gogit.NoErrAlreadyUpToDate):
		ref, err := s.repo.Storer.Reference(s.tracking)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		head = ref.Hash()
	case errors.Is(err, transport.ErrEmptyRemoteRepository) || errors.Is(err, gogit.NoMatchingRefSpecError{}):
		// No branch yet: the first commit creates it.
	default:
		return plumbing.ZeroHash, err
	}
	if head.IsZero() {
		if err := s.repo.Storer.RemoveReference(s.branch); err != nil {
			return plumbing.ZeroHash, err
		}
		return head, nil
	}
	return head, s.repo.Storer.SetReference(plumbing.NewHashReference(s.branch, head))
}

// readFile returns the content of the regular file at p in commit head.
func (s *Sink) readFile(head plumbing.Hash, p string) ([]byte, bool, error) {
	if head.IsZero() {
		return nil, false, nil
	}
	commit, err := object.GetCommit(s.repo.Storer, head)
	if err != nil {
		return nil, false, err
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, false, err
	}
	f, err := tree.File(p)
	if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	r, err := f.Reader()
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = r.Close() }()
	content, err := io.ReadAll(r)
	return content, err == nil, err
}

// commit creates a commit on top of head (none when head is zero) that
// sets p to content, or removes p when content is nil, and points the
// local branch at it. It reports false when the tree would not change.
func (s *Sink) commit(head plumbing.Hash, p string, content []byte, message string, when time.Time) (bool, error) {
	st := s.repo.Storer
	var base *object.Tree
	var parents []plumbing.Hash
	if !head.IsZero() {
		c, err := object.GetCommit(st, head)
		if err != nil {
			return false, err
		}
		if base, err = c.Tree(); err != nil {
			return false, err
		}
		parents = []plumbing.Hash{head}
	}
	var blob plumbing.Hash
	if content != nil {
		var err error
		if blob, err = storeBlob(st, content); err != nil {
			return false, err
		}
	}
	tree, _, changed, err := editTree(st, base, strings.Split(p, "/"), blob, content == nil)
	if err != nil || !changed {
		return false, err
	}
	sig := object.Signature{Name: s.authorName, Email: s.authorEmail, When: when}
	c := &object.Commit{
		Author:       sig,
		Committer:    sig,
		Message:      message,
		TreeHash:     tree,
		ParentHashes: parents,
	}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return false, err
	}
	hash, err := st.SetEncodedObject(obj)
	if err != nil {
		return false, err
	}
	return true, st.SetReference(plumbing.NewHashReference(s.branch, hash))
}

func storeBlob(st storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(content); err != nil {
		_ = w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

// editTree stores a copy of tree (nil: an empty tree) with the file at
// parts set to blob, or removed when remove is set, creating and pruning
// subtrees as needed. It returns the new tree's hash, whether it is empty
// (git stores no empty subtrees), and whether anything changed.
func editTree(st storer.EncodedObjectStorer, tree *object.Tree, parts []string, blob plumbing.Hash, remove bool) (plumbing.Hash, bool, bool, error) {
	var entries []object.TreeEntry
	if tree != nil {
		entries = slices.Clone(tree.Entries)
	}
	name := parts[0]
	i := slices.IndexFunc(entries, func(e object.TreeEntry) bool { return e.Name == name })
	isDir := i >= 0 && (entries[i].Mode == filemode.Dir || entries[i].Mode == filemode.Submodule)

	if len(parts) == 1 {
		switch {
		case isDir:
			return plumbing.ZeroHash, false, false, fmt.Errorf("%s is a directory in the repository", name)
		case remove && i < 0:
			return plumbing.ZeroHash, false, false, nil
		case remove:
			entries = slices.Delete(entries, i, i+1)
		case i >= 0 && entries[i].Hash == blob && entries[i].Mode == filemode.Regular:
			return plumbing.ZeroHash, false, false, nil
		case i >= 0:
			entries[i] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: blob}
		default:
			entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: blob})
		}
	} else {
		var sub *object.Tree
		switch {
		case i >= 0 && entries[i].Mode == filemode.Dir:
			var err error
			if sub, err = object.GetTree(st, entries[i].Hash); err != nil {
				return plumbing.ZeroHash, false, false, err
			}
		case remove:
			// Nothing to remove below a file or a missing directory.
			return plumbing.ZeroHash, false, false, nil
		case i >= 0:
			return plumbing.ZeroHash, false, false, fmt.Errorf("%s is not a directory in the repository", name)
		}
		subHash, subEmpty, changed, err := editTree(st, sub, parts[1:], blob, remove)
		if err != nil || !changed {
			return plumbing.ZeroHash, false, changed, err
		}
		switch {
		case subEmpty:
			entries = slices.Delete(entries, i, i+1)
		case i >= 0:
			entries[i].Hash = subHash
		default:
			entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: subHash})
		}
	}

	// Git orders entries by name, comparing a directory as if its name
	// ended in "/".
	sortKey := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(entries, func(a, b int) bool { return sortKey(entries[a]) < sortKey(entries[b]) })
	obj := st.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, false, false, err
	}
	hash, err := st.SetEncodedObject(obj)
	return hash, len(entries) == 0, true, err
}

func (s *Sink) push(ctx context.Context) error {
	err := s.repo.PushContext(s.dialContext(ctx), &gogit.PushOptions{
		RemoteName:      remoteName,
		RefSpecs:        []config.RefSpec{config.RefSpec(s.branch + ":" + s.branch)},
		Auth:            s.auth,
		CABundle:        s.caBundle,
		InsecureSkipTLS: s.insecureSkipTLS,
		ProxyOptions:    s.proxy,
	})
	if errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return nil
	}
	return err
}

// isRejected reports whether a push failed because the remote branch is
// not where the commit was built on: go-git's own fast-forward check
// against the advertised refs, or the server refusing the ref update when
// another push won the race.
func isRejected(err error) bool {
	if errors.Is(err, gogit.ErrNonFastForwardUpdate) || errors.Is(err, gogit.ErrForceNeeded) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"non-fast-forward", "fetch first", "command error on"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Probe lists the remote's refs with the sink's credentials. It reads
// only, so it proves the remote is reachable and the credentials can read;
// write access shows at the first push.
func (s *Sink) Probe(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	remote := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: remoteName, URLs: []string{s.endpoint}})
	_, err := remote.ListContext(s.dialContext(ctx), &gogit.ListOptions{
		Auth:            s.auth,
		CABundle:        s.caBundle,
		InsecureSkipTLS: s.insecureSkipTLS,
		ProxyOptions:    s.proxy,
	})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return s.scrub(fmt.Errorf("git sink: listing remote refs: %w", err))
	}
	return nil
}

// Close drops the clone handle; the clone stays in workDir for the next
// run to reuse.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.repo == nil {
		return nil
	}
	var err error
	if c, ok := s.repo.Storer.(io.Closer); ok {
		err = c.Close()
	}
	s.repo = nil
	return err
}

// permanentErrors are the failures retrying cannot fix: the remote refuses
// the credentials or does not exist.
var permanentErrors = []error{
	transport.ErrAuthenticationRequired,
	transport.ErrAuthorizationFailed,
	transport.ErrInvalidAuthMethod,
	transport.ErrRepositoryNotFound,
}

// scrub replaces every credential value in err's message (plumbing.RedactString) and
// keeps whether err is permanent or a context error.
func (s *Sink) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := ctrlplumbing.RedactString(err.Error(), s.secrets)
	var kinds []error
	permanent := errors.Is(err, sink.ErrPermanent) ||
		// x/crypto/ssh/knownhosts errors: the host key is unknown or changed.
		strings.Contains(msg, "knownhosts: key") ||
		// x/crypto/ssh: the server refused the key.
		strings.Contains(msg, "ssh: unable to authenticate")
	for _, k := range permanentErrors {
		if errors.Is(err, k) {
			permanent = true
		}
	}
	if permanent {
		kinds = append(kinds, sink.ErrPermanent)
	}
	kinds = append(kinds, classify(err, msg))
	for _, k := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, k) {
			kinds = append(kinds, k)
		}
	}
	// Not the original, which could still hold the credentials: only
	// the sentinels callers classify errors by.
	return ctrlplumbing.RedactedError(msg, kinds...)
}
