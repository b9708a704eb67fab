package nats

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// signJWT makes a NATS JWT: the server checks the issuer's signature, not
// who wrote the claims, so the test needs no jwt library.
func signJWT(t *testing.T, issuer nkeys.KeyPair, subject, name string, nats map[string]any) string {
	t.Helper()
	iss, err := issuer.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"typ": "JWT", "alg": "ed25519-nkey"}) + "." + enc(map[string]any{
		"jti": strings.ToUpper(randSuffix(t) + randSuffix(t)), "iat": time.Now().Unix(),
		"iss": iss, "sub": subject, "name": name, "nats": nats,
	})
	sig, err := issuer.Sign([]byte(signing))
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// credsFile is what `nsc generate creds` writes.
func credsFile(jwt string, seed []byte) []byte {
	return fmt.Appendf(nil, `-----BEGIN NATS USER JWT-----
%s
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
%s
------END USER NKEY SEED------

*************************************************************
`, jwt, seed)
}

// TestCredsAuth runs a server in operator mode, whose account trusts only
// the user of a generated creds file.
func TestCredsAuth(t *testing.T) {
	operator, _ := nkeys.CreateOperator()
	system, _ := nkeys.CreateAccount()
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	sysPub, accPub := publicKey(t, system), publicKey(t, account)

	// JetStream needs a system account in operator mode.
	opJWT := signJWT(t, operator, publicKey(t, operator), "op", map[string]any{"type": "operator", "version": 2, "system_account": sysPub})
	sysJWT := signJWT(t, operator, sysPub, "SYS", map[string]any{"type": "account", "version": 2})
	accJWT := signJWT(t, operator, accPub, "acc", map[string]any{
		"type": "account", "version": 2,
		"limits": map[string]any{
			"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
			"conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
		},
	})
	userJWT := signJWT(t, account, publicKey(t, user), "kollect", map[string]any{
		"type": "user", "version": 2, "pub": map[string]any{}, "sub": map[string]any{},
		"subs": -1, "data": -1, "payload": -1,
	})
	seed, _ := user.Seed()

	conf := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\n",
		opJWT, sysPub, sysPub, sysJWT, accPub, accJWT), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startServer(t, "-c", conf)
	creds := credsFile(userJWT, seed)
	credsPath := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(credsPath, creds, 0o600); err != nil {
		t.Fatal(err)
	}

	js := admin(t, url, natsgo.UserCredentials(credsPath))
	st, prefix := newStream(t, js)
	name := st.CachedInfo().Config.Name

	s := newSink(t, url, name, prefix+".{inventory}", sink.Secret{"creds": creds})
	if err := s.Probe(ctxT(t)); err != nil {
		t.Fatalf("Probe with creds: %v", err)
	}
	cs := changes(t, 2)
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, cs)); err != nil {
		t.Fatalf("Publish with creds: %v", err)
	}
	checkMsg(t, st, 2, prefix+".web_prod", teamInv, cs[1])

	// A user the account did not sign is rejected, and neither its JWT nor
	// its seed shows in the error.
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherJWT := signJWT(t, operator, publicKey(t, other), "intruder", map[string]any{"type": "user", "version": 2})
	err := newSink(t, url, name, "", sink.Secret{"creds": credsFile(otherJWT, otherSeed)}).Probe(ctxT(t))
	if err == nil {
		t.Fatal("Probe with creds the account did not issue succeeded")
	}
	t.Log(err)
	if strings.Contains(err.Error(), otherJWT) || strings.Contains(err.Error(), string(otherSeed)) || !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("want a permanent error without the creds, got %v", err)
	}
}
