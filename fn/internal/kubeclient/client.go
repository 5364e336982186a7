package kubeclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	pathpkg "path"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Client GETs from one API server with one context's credentials.
type Client struct {
	base      *url.URL
	http      *http.Client
	userAgent string
	auth      func(*http.Request) error
	// unauthorized tells the credential source the server refused what it sent (an exec
	// plugin's token is then fetched again for the next request).
	unauthorized func()
}

// maxRetries is how often a GET is retried when the server asks for it (429 or 5xx with
// Retry-After), as client-go's rest client does.
const maxRetries = 10

// New builds the client for cfg. timeout bounds each request, userAgent names the program.
func New(cfg *Config, timeout time.Duration, userAgent string) (*Client, error) {
	base, err := url.Parse(cfg.Cluster.Server)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("server %q of the kubeconfig is not a URL (want https://HOST[:PORT])", cfg.Cluster.Server)
	}
	if base.Scheme != "https" && base.Scheme != "http" {
		return nil, fmt.Errorf("server %q of the kubeconfig: scheme %q, want https or http", cfg.Cluster.Server, base.Scheme)
	}
	tlsConfig, err := clusterTLS(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	transport.DisableCompression = cfg.Cluster.DisableCompression
	if cfg.Cluster.ProxyURL != "" {
		proxy, err := url.Parse(cfg.Cluster.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("proxy-url %q of the kubeconfig: %w", cfg.Cluster.ProxyURL, err)
		}
		transport.Proxy = http.ProxyURL(proxy)
	}
	c := &Client{base: base, http: &http.Client{Transport: transport, Timeout: timeout}, userAgent: userAgent,
		auth: func(*http.Request) error { return nil }, unauthorized: func() {}}
	if err := c.authenticate(cfg, tlsConfig); err != nil {
		return nil, err
	}
	return c, nil
}

// Host is the API server's URL.
func (c *Client) Host() string { return c.base.String() }

// clusterTLS checks the server's certificate against the kubeconfig's CA, or the system's
// roots without one.
func clusterTLS(cl Cluster) (*tls.Config, error) {
	// InsecureSkipVerify is the kubeconfig's choice; kubectl honours it too.
	cfg := &tls.Config{ServerName: cl.TLSServerName, InsecureSkipVerify: cl.InsecureSkipTLSVerify}
	ca, err := dataOrFile(cl.CertificateAuthorityData, cl.CertificateAuthority, "certificate-authority")
	if err != nil {
		return nil, err
	}
	if len(ca) == 0 {
		return cfg, nil
	}
	if cl.InsecureSkipTLSVerify {
		return nil, errors.New("the kubeconfig's cluster sets both a certificate authority and insecure-skip-tls-verify; remove one")
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(ca) {
		return nil, errors.New("certificate-authority of the kubeconfig holds no PEM certificate")
	}
	return cfg, nil
}

// authenticate sets up the user's credentials: a client certificate in the TLS handshake, and
// one of a bearer token, basic auth or an exec plugin on each request, plus impersonation.
func (c *Client) authenticate(cfg *Config, tlsConfig *tls.Config) error {
	u := cfg.User
	if u.AuthProvider != nil {
		return fmt.Errorf("the kubeconfig's user uses auth-provider %q, which gpupolicy-fn does not include (client-go dropped its cloud providers too); use the provider's exec credential plugin (kubectl's own migration)", u.AuthProvider.Name)
	}
	if err := clientCert(u, tlsConfig); err != nil {
		return err
	}
	token := u.Token
	if token == "" && u.TokenFile != "" {
		b, err := os.ReadFile(u.TokenFile)
		if err != nil {
			return fmt.Errorf("tokenFile of the kubeconfig: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	basic := u.Username != "" || u.Password != ""
	if basic && token != "" {
		return errors.New("the kubeconfig's user sets both username/password and a bearer token; keep one")
	}
	switch {
	case u.Exec != nil && (token != "" || basic):
		return errors.New("the kubeconfig's user sets an exec plugin and a token or username/password; keep one")
	case u.Exec != nil:
		p, err := newExecPlugin(u.Exec, cfg.Cluster)
		if err != nil {
			return err
		}
		tlsConfig.GetClientCertificate = p.clientCertificate(tlsConfig.Certificates)
		tlsConfig.Certificates = nil
		c.auth, c.unauthorized = p.authorize, p.forget
	case token != "":
		c.auth = func(r *http.Request) error { r.Header.Set("Authorization", "Bearer "+token); return nil }
	case basic:
		c.auth = func(r *http.Request) error { r.SetBasicAuth(u.Username, u.Password); return nil }
	}
	if u.Impersonate == "" && (u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0) {
		return errors.New("the kubeconfig's user impersonates groups, a uid or extras without a user (as); set as")
	}
	if u.Impersonate != "" {
		auth := c.auth
		c.auth = func(r *http.Request) error {
			r.Header.Set("Impersonate-User", u.Impersonate)
			if u.ImpersonateUID != "" {
				r.Header.Set("Impersonate-Uid", u.ImpersonateUID)
			}
			for _, g := range u.ImpersonateGroups {
				r.Header.Add("Impersonate-Group", g)
			}
			for k, vs := range u.ImpersonateUserExtra {
				for _, v := range vs {
					r.Header.Add("Impersonate-Extra-"+headerKeyEscape(k), v)
				}
			}
			return auth(r)
		}
	}
	return nil
}

func clientCert(u User, tlsConfig *tls.Config) error {
	certPEM, err := dataOrFile(u.ClientCertificateData, u.ClientCertificate, "client-certificate")
	if err != nil {
		return err
	}
	keyPEM, err := dataOrFile(u.ClientKeyData, u.ClientKey, "client-key")
	if err != nil {
		return err
	}
	if len(certPEM) == 0 && len(keyPEM) == 0 {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("client certificate and key of the kubeconfig: %w", err)
	}
	tlsConfig.Certificates = []tls.Certificate{cert}
	return nil
}

// dataOrFile is a kubeconfig's inline *-data, else the file beside it, as client-go reads them.
func dataOrFile(data []byte, file, field string) ([]byte, error) {
	if len(data) > 0 || file == "" {
		return data, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s of the kubeconfig: %w", field, err)
	}
	return b, nil
}

// headerKeyEscape percent-encodes what an HTTP header name cannot hold, as client-go does for
// Impersonate-Extra- keys.
func headerKeyEscape(k string) string {
	var b strings.Builder
	for i := range len(k) {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$&'*+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Get reads path (query parameters with empty values left out, as client-go does) and returns
// the body. An answer other than 2xx is the server's *apierrors.StatusError: decoded from the
// Status it sent, else made from the HTTP code, as client-go's rest client does.
func (c *Client) Get(ctx context.Context, path string, query url.Values) ([]byte, error) {
	u := *c.base
	u.Path = pathpkg.Join("/", u.Path, path) // a server URL's path is a prefix (proxies, Rancher)
	q := url.Values{}
	for k, vs := range query {
		for _, v := range vs {
			if v != "" {
				q.Add(k, v)
			}
		}
	}
	u.RawQuery = q.Encode()
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.userAgent)
		if err := c.auth(req); err != nil {
			return nil, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the API server's answer to GET %s: %w", path, err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return body, nil
		}
		if resp.StatusCode == http.StatusUnauthorized {
			c.unauthorized()
		}
		wait, retry := retryAfter(resp)
		if !retry || attempt >= maxRetries {
			return nil, statusError(resp.StatusCode, path, body, wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// retryAfter: the server asked to be asked again (429, or 5xx with Retry-After).
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return 0, false
	}
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s < 0 {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}

func statusError(code int, path string, body []byte, retryAfter time.Duration) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Status != metav1.StatusSuccess {
		if st.Code == 0 {
			st.Code = int32(code)
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	msg := strings.TrimSpace(string(body))
	if msg == "" {
		msg = http.StatusText(code)
	}
	return apierrors.NewGenericServerResponse(code, "get", schema.GroupResource{}, "", msg+" (GET "+path+")", int(retryAfter.Seconds()), true)
}
