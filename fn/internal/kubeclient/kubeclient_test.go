package kubeclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// isolate leaves no kubeconfig but the test's own to find: no $KUBECONFIG, an empty home, not
// in a cluster.
func isolate(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

// $KUBECONFIG's files merge as kubectl merges them: the first to name a cluster, user, context
// or the current context wins; a missing file is skipped; relative paths are the file's.
func TestLoadMergesLikeKubectl(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	first := write(t, filepath.Join(dir, "a", "config"), `
current-context: dev
clusters:
- name: dev
  cluster: {server: "https://dev.example:6443", certificate-authority: certs/ca.pem}
contexts:
- name: dev
  context: {cluster: dev, user: alice}
`)
	second := write(t, filepath.Join(dir, "b", "config"), `
current-context: prod
clusters:
- name: dev
  cluster: {server: "https://shadowed.example"}
- name: prod
  cluster: {server: "https://prod.example", insecure-skip-tls-verify: true}
users:
- name: alice
  user: {client-certificate: alice.crt, client-key: /abs/alice.key, exec: {command: ./bin/login, apiVersion: client.authentication.k8s.io/v1}}
- name: bob
  user: {token: b0b, exec: {command: aws}}
contexts:
- name: prod
  context: {cluster: prod, user: bob}
`)
	t.Setenv("KUBECONFIG", strings.Join([]string{filepath.Join(dir, "missing"), first, second}, string(os.PathListSeparator)))

	cfg, err := Load("", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Context != "dev" || cfg.Cluster.Server != "https://dev.example:6443" ||
		cfg.Cluster.CertificateAuthority != filepath.Join(dir, "a", "certs", "ca.pem") {
		t.Errorf("current context: %+v", cfg)
	}
	if u := cfg.User; u.ClientCertificate != filepath.Join(dir, "b", "alice.crt") || u.ClientKey != "/abs/alice.key" ||
		u.Exec.Command != filepath.Join(dir, "b", "bin", "login") {
		t.Errorf("alice's paths are not resolved against the file that names them: %+v", u)
	}
	cfg, err = Load("", "prod")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.Server != "https://prod.example" || cfg.User.Token != "b0b" || cfg.User.Exec.Command != "aws" {
		t.Errorf("--context prod: %+v (a command without a slash stays a $PATH lookup)", cfg)
	}

	// --kubeconfig alone, ignoring $KUBECONFIG.
	cfg, err = Load(second, "")
	if err != nil || cfg.Context != "prod" {
		t.Errorf("--kubeconfig %s: %+v, %v", second, cfg, err)
	}
	for _, tc := range []struct{ path, context, want string }{
		{filepath.Join(dir, "missing"), "", "no such file"},
		{second, "staging", `context "staging" does not exist`},
		{write(t, filepath.Join(dir, "c"), "clusters: []\n"), "", "no current-context"},
		{write(t, filepath.Join(dir, "d"), "current-context: x\ncontexts: [{name: x, context: {cluster: gone}}]\n"), "", `names cluster "gone"`},
		{write(t, filepath.Join(dir, "e"), "current-context: x\nclusters: [{name: c, cluster: {server: 'https://c'}}]\ncontexts: [{name: x, context: {cluster: c, user: carol}}]\n"), "", `names user "carol"`},
		{write(t, filepath.Join(dir, "f"), "current-context: [\n"), "", filepath.Join(dir, "f")},
	} {
		if _, err := Load(tc.path, tc.context); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s, %q): %v; want an error with %q", tc.path, tc.context, err, tc.want)
		}
	}
}

// With no kubeconfig anywhere, a pod's service account is used, as rest.InClusterConfig does;
// outside a pod the error says what was looked for.
func TestLoadInCluster(t *testing.T) {
	isolate(t)
	if _, err := Load("", ""); err == nil || !strings.Contains(err.Error(), "no kubeconfig found") {
		t.Errorf("outside a cluster: %v", err)
	}
	old := serviceAccountDir
	serviceAccountDir = t.TempDir()
	t.Cleanup(func() { serviceAccountDir = old })
	write(t, filepath.Join(serviceAccountDir, "token"), "sa-token\n")
	write(t, filepath.Join(serviceAccountDir, "ca.crt"), "pem")
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	cfg, err := Load("", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.Server != "https://[fd00::1]:443" || cfg.User.TokenFile != filepath.Join(serviceAccountDir, "token") ||
		cfg.Cluster.CertificateAuthority != filepath.Join(serviceAccountDir, "ca.crt") {
		t.Errorf("in-cluster: %+v", cfg)
	}
}

// testPKI is a CA and a client certificate it signed, PEM-encoded.
type testPKI struct {
	caPool          *x509.CertPool
	certPEM, keyPEM []byte
}

func newClientCert(t *testing.T, cn string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{caPool: pool,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
}

// seen is what the test API server saw of one request.
type seen struct {
	auth, user, uid, cn string
	groups              []string
	extra               string
}

// apiServer is an HTTPS server that trusts clients' certificates from pki and answers /ok
// with {}, /missing with a NotFound Status, /plain-forbidden with a bare 403, /busy with one
// 429 Retry-After: 0 and then {}, /refused with 401.
func apiServer(t *testing.T, pki testPKI) (*httptest.Server, *[]seen) {
	t.Helper()
	var log []seen
	var busy atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{auth: r.Header.Get("Authorization"), user: r.Header.Get("Impersonate-User"), uid: r.Header.Get("Impersonate-Uid"),
			groups: r.Header.Values("Impersonate-Group"), extra: r.Header.Get("Impersonate-Extra-Scopes%2Fa")}
		if len(r.TLS.PeerCertificates) > 0 {
			s.cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		log = append(log, s)
		switch r.URL.Path {
		case "/prefix/ok":
			fmt.Fprint(w, `{"query":"`+r.URL.RawQuery+`"}`)
		case "/prefix/missing":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"nodes \"x\" not found"}`)
		case "/prefix/plain-forbidden":
			http.Error(w, "go away", http.StatusForbidden)
		case "/prefix/busy":
			if busy.Add(1) == 1 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			fmt.Fprint(w, `{}`)
		case "/prefix/refused":
			w.WriteHeader(http.StatusUnauthorized)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pki.caPool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &log
}

func serverCA(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// Each kind of credential reaches a real TLS server as kubectl sends it, the server's
// certificate is checked against the kubeconfig's CA, and the server's errors are client-go's
// StatusErrors.
func TestClientCredentials(t *testing.T) {
	pki := newClientCert(t, "alice")
	srv, log := apiServer(t, pki)
	dir := t.TempDir()
	tokenFile := write(t, filepath.Join(dir, "token"), "from-file\n")
	cluster := Cluster{Server: srv.URL + "/prefix/", CertificateAuthorityData: serverCA(srv)}

	for _, tc := range []struct {
		name string
		user User
		want seen
	}{
		{"token", User{Token: "t0k"}, seen{auth: "Bearer t0k"}},
		{"tokenFile", User{TokenFile: tokenFile}, seen{auth: "Bearer from-file"}},
		{"basic", User{Username: "u", Password: "p"}, seen{auth: "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p"))}},
		{"client certificate", User{ClientCertificateData: pki.certPEM, ClientKeyData: pki.keyPEM}, seen{cn: "alice"}},
		{"impersonation", User{Token: "t", Impersonate: "bob", ImpersonateUID: "42", ImpersonateGroups: []string{"g1", "g2"},
			ImpersonateUserExtra: map[string][]string{"scopes/a": {"x"}}},
			seen{auth: "Bearer t", user: "bob", uid: "42", groups: []string{"g1", "g2"}, extra: "x"}},
	} {
		c, err := New(&Config{Cluster: cluster, User: tc.user}, 5*time.Second, "test")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, err := c.Get(context.Background(), "ok", map[string][]string{"fieldSelector": {"a=b"}, "empty": {""}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(body) != `{"query":"fieldSelector=a%3Db"}` {
			t.Errorf("%s: body %s", tc.name, body)
		}
		if got := (*log)[len(*log)-1]; fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: server saw %+v, want %+v", tc.name, got, tc.want)
		}
	}

	// The same from files beside the kubeconfig; inline data would win over them.
	files := &Config{Cluster: Cluster{Server: cluster.Server, CertificateAuthority: write(t, filepath.Join(dir, "ca.pem"), string(serverCA(srv)))},
		User: User{ClientCertificate: write(t, filepath.Join(dir, "alice.crt"), string(pki.certPEM)), ClientKey: write(t, filepath.Join(dir, "alice.key"), string(pki.keyPEM))}}
	c, err := New(files, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "/ok", nil); err != nil || (*log)[len(*log)-1].cn != "alice" {
		t.Errorf("CA and client certificate from files: %v, server saw %+v", err, (*log)[len(*log)-1])
	}
	files.Cluster.CertificateAuthority = filepath.Join(dir, "missing-ca.pem")
	if _, err := New(files, time.Second, "test"); err == nil || !strings.Contains(err.Error(), "certificate-authority of the kubeconfig") {
		t.Errorf("missing CA file: %v", err)
	}

	c, err = New(&Config{Cluster: cluster}, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "/missing", nil); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `nodes "x" not found`) {
		t.Errorf("NotFound Status: %v", err)
	}
	if _, err := c.Get(context.Background(), "/plain-forbidden", nil); !apierrors.IsForbidden(err) {
		t.Errorf("bare 403: %v", err)
	}
	if _, err := c.Get(context.Background(), "/busy", nil); err != nil {
		t.Errorf("429 with Retry-After was not retried: %v", err)
	}

	// Without the kubeconfig's CA the server's certificate is not trusted.
	c, err = New(&Config{Cluster: Cluster{Server: srv.URL}}, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "/ok", nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted server certificate: %v", err)
	}

	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Cluster: Cluster{Server: "dev.example:6443"}}, "not a URL"},
		{Config{Cluster: Cluster{Server: "https://x", CertificateAuthorityData: []byte("x"), InsecureSkipTLSVerify: true}}, "insecure-skip-tls-verify"},
		{Config{Cluster: Cluster{Server: "https://x", CertificateAuthorityData: []byte("x")}}, "no PEM certificate"},
		{Config{Cluster: Cluster{Server: "https://x"}, User: User{Token: "t", Username: "u"}}, "both username/password and a bearer token"},
		{Config{Cluster: Cluster{Server: "https://x"}, User: User{ImpersonateGroups: []string{"g"}}}, "without a user"},
		{Config{Cluster: Cluster{Server: "https://x"}, User: User{ClientCertificateData: pki.certPEM}}, "client certificate and key"},
		{Config{Cluster: Cluster{Server: "https://x"}, User: User{AuthProvider: &struct {
			Name string `json:"name"`
		}{Name: "gcp"}}}, `auth-provider "gcp"`},
		{Config{Cluster: Cluster{Server: "https://x"}, User: User{Exec: &ExecConfig{Command: "x", APIVersion: "v1"}}}, `apiVersion "v1"`},
		{Config{Cluster: Cluster{Server: "https://x"}, User: User{Exec: &ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v1"}}}, `interactiveMode ""`},
	} {
		if _, err := New(&tc.cfg, time.Second, "test"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v; want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

// An exec plugin runs once for its token, receives the cluster in KUBERNETES_EXEC_INFO, runs
// again once the token expired or the server refused it, and may hand out a client
// certificate instead.
func TestExecPlugin(t *testing.T) {
	pki := newClientCert(t, "exec-user")
	srv, log := apiServer(t, pki)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	expiry := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	plugin := write(t, filepath.Join(dir, "plugin"), `#!/bin/sh
echo run >> `+runs+`
echo "$KUBERNETES_EXEC_INFO" > `+filepath.Join(dir, "info")+`
n=$(wc -l < `+runs+`)
exp="$EXPIRES"
[ "$1" = expire-first ] && [ "$n" = 1 ] && exp=2000-01-01T00:00:00Z
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"exec-'$n'","expirationTimestamp":"'$exp'"}}'
`)
	cluster := Cluster{Server: srv.URL + "/prefix", CertificateAuthorityData: serverCA(srv)}
	newClient := func(args ...string) *Client {
		os.Remove(runs)
		exec := &ExecConfig{Command: plugin, Args: args, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: "Never", ProvideClusterInfo: true}
		exec.Env = append(exec.Env, struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		}{"EXPIRES", expiry})
		c, err := New(&Config{Cluster: cluster, User: User{Exec: exec}}, 5*time.Second, "test")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	get := func(c *Client, path string) {
		t.Helper()
		if _, err := c.Get(context.Background(), path, nil); err != nil && path == "/ok" {
			t.Fatal(err)
		}
	}
	lastAuth := func() string { return (*log)[len(*log)-1].auth }

	c := newClient()
	get(c, "/ok")
	get(c, "/ok")
	if n := countLines(t, runs); n != 1 || lastAuth() != "Bearer exec-1" {
		t.Errorf("a valid token: plugin ran %d times, last request sent %q", n, lastAuth())
	}
	info, err := os.ReadFile(filepath.Join(dir, "info"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(info), `"kind":"ExecCredential"`) || !strings.Contains(string(info), `"server":"`+cluster.Server+`"`) ||
		!strings.Contains(string(info), `"certificate-authority-data":"`+base64.StdEncoding.EncodeToString(cluster.CertificateAuthorityData)+`"`) ||
		!strings.Contains(string(info), `"interactive":false`) {
		t.Errorf("KUBERNETES_EXEC_INFO: %s", info)
	}
	get(c, "/refused")
	get(c, "/ok")
	if n := countLines(t, runs); n != 2 || lastAuth() != "Bearer exec-2" {
		t.Errorf("after a 401: plugin ran %d times, last request sent %q", n, lastAuth())
	}

	c = newClient("expire-first")
	get(c, "/ok")
	get(c, "/ok")
	if n := countLines(t, runs); n != 2 || lastAuth() != "Bearer exec-2" {
		t.Errorf("an expired token: plugin ran %d times, last request sent %q", n, lastAuth())
	}

	// A certificate from the plugin is what the handshake offers.
	certPlugin := write(t, filepath.Join(dir, "cert-plugin"), fmt.Sprintf(`#!/bin/sh
cat <<'EOF'
{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"clientCertificateData":%q,"clientKeyData":%q}}
EOF
`, pki.certPEM, pki.keyPEM))
	c, err = New(&Config{Cluster: cluster, User: User{Exec: &ExecConfig{Command: certPlugin, APIVersion: "client.authentication.k8s.io/v1beta1"}}}, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	get(c, "/ok")
	if got := (*log)[len(*log)-1]; got.cn != "exec-user" || got.auth != "" {
		t.Errorf("plugin certificate: server saw %+v", got)
	}

	// A plugin that is not installed names its install hint.
	c, err = New(&Config{Cluster: cluster, User: User{Exec: &ExecConfig{Command: "no-such-login-plugin", APIVersion: "client.authentication.k8s.io/v1",
		InteractiveMode: "IfAvailable", InstallHint: "install it with: brew install no-such-login-plugin"}}}, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "/ok", nil); err == nil || !strings.Contains(err.Error(), "brew install no-such-login-plugin") {
		t.Errorf("missing plugin: %v", err)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
