package git

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// sshServer is a minimal SSH server that runs git-upload-pack and
// git-receive-pack on repositories under root for one client key.
type sshServer struct {
	addr    string
	hostKey ssh.PublicKey
	wg      sync.WaitGroup
}

func newSSHServer(t *testing.T, root string, clientKey ssh.PublicKey) *sshServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) == string(clientKey.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &sshServer{addr: ln.Addr().String(), hostKey: hostSigner.PublicKey()}
	t.Cleanup(func() {
		_ = ln.Close()
		srv.wg.Wait()
	})
	srv.wg.Add(1)
	go func() {
		defer srv.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			srv.wg.Add(1)
			go func() {
				defer srv.wg.Done()
				srv.serve(t, conn, cfg, root)
			}()
		}
	}()
	return srv
}

func (srv *sshServer) serve(t *testing.T, conn net.Conn, cfg *ssh.ServerConfig, root string) {
	defer func() { _ = conn.Close() }()
	_, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return // a client that rejected the host key ends here
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		for req := range requests {
			if req.Type != "exec" {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			status := srv.exec(t, ch, req.Payload, root)
			var payload [4]byte
			binary.BigEndian.PutUint32(payload[:], status)
			_, _ = ch.SendRequest("exit-status", false, payload[:])
			_ = ch.Close()
		}
	}
}

// exec runs "git-upload-pack '/repo.git'" (or receive-pack) with the
// path taken below root.
func (srv *sshServer) exec(t *testing.T, ch ssh.Channel, payload []byte, root string) uint32 {
	if len(payload) < 4 {
		return 1
	}
	command := string(payload[4:])
	program, arg, _ := strings.Cut(command, " ")
	if program != "git-upload-pack" && program != "git-receive-pack" {
		t.Errorf("unexpected ssh command %q", command)
		return 1
	}
	repo := filepath.Join(root, filepath.Clean("/"+strings.Trim(arg, "'")))
	cmd := exec.Command("git", strings.TrimPrefix(program, "git-"), repo)
	cmd.Env = gitEnv(root)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
	if err := cmd.Run(); err != nil {
		return 1
	}
	return 0
}

func newClientKey(t *testing.T) ([]byte, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), sshPub
}

func knownHostsLine(addr string, key ssh.PublicKey) []byte {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Appendf(nil, "[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(key))
}

func TestSSH(t *testing.T) {
	ctx := testContext(t)
	root := t.TempDir()
	bare := newBare(t, root, "repo.git")
	privPEM, clientPub := newClientKey(t)
	srv := newSSHServer(t, root, clientPub)
	spec := &v1alpha1.SnapshotSinkSpec{
		Type:     v1alpha1.SnapshotSinkGit,
		Endpoint: "ssh://git@" + srv.addr + "/repo.git",
	}

	s := newSink(t, spec, sink.Secret{
		"ssh-privatekey": privPEM,
		"known_hosts":    knownHostsLine(srv.addr, srv.hostKey),
	}, t.TempDir())
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	mustWrite(t, ctx, s, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")), true)
	mustWrite(t, ctx, s, nsInv, envelope(nsInv, 1, exportedAt.Add(1), item("team-a", "x", "1")), false)
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Fatalf("commits = %d, want 1", n)
	}

	// A server whose key is not the one in known_hosts gets nothing.
	_, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherSigner, err := ssh.NewSignerFromKey(otherPriv)
	if err != nil {
		t.Fatal(err)
	}
	impostor := newSink(t, spec, sink.Secret{
		"ssh-privatekey": privPEM,
		"known_hosts":    knownHostsLine(srv.addr, otherSigner.PublicKey()),
	}, t.TempDir())
	_, err = impostor.Write(ctx, nsInv, envelope(nsInv, 2, exportedAt, item("team-a", "x", "2")))
	t.Logf("Write with a mismatching host key: %v", err)
	if err == nil || !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Write = %v, want a permanent host key error", err)
	}
	if c := sink.Classify(err); c.Outcome != sink.OutcomeTLS {
		t.Errorf("host key mismatch classified %+v, want TLS", c)
	}
	if err != nil && strings.Contains(err.Error(), strings.TrimSpace(string(privPEM))) {
		t.Errorf("error shows the key")
	}

	// A key the server does not accept is a permanent error as well.
	otherPEM, _ := newClientKey(t)
	stranger := newSink(t, spec, sink.Secret{
		"ssh-privatekey": otherPEM,
		"known_hosts":    knownHostsLine(srv.addr, srv.hostKey),
	}, t.TempDir())
	err = stranger.Probe(ctx)
	t.Logf("Probe with an unknown client key: %v", err)
	if err == nil || !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Probe = %v, want a permanent authentication error", err)
	}
	if c := sink.Classify(err); c.Outcome != sink.OutcomeAuth {
		t.Errorf("unknown client key classified %+v, want Auth", c)
	}
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Errorf("commits = %d, want 1", n)
	}
}
