package kubeclient

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/term"
)

// ExecConfig is a kubeconfig user's exec credential plugin (client.authentication.k8s.io):
// a command that prints an ExecCredential with a token or a client certificate.
type ExecConfig struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	APIVersion         string `json:"apiVersion"`
	InstallHint        string `json:"installHint"`
	ProvideClusterInfo bool   `json:"provideClusterInfo"`
	InteractiveMode    string `json:"interactiveMode"`
}

// execCredential is the plugin protocol's message, both ways.
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster     *Cluster `json:"cluster,omitempty"`
		Interactive bool     `json:"interactive"`
	} `json:"spec"`
	Status *struct {
		ExpirationTimestamp   *time.Time `json:"expirationTimestamp,omitempty"`
		Token                 string     `json:"token,omitempty"`
		ClientCertificateData string     `json:"clientCertificateData,omitempty"`
		ClientKeyData         string     `json:"clientKeyData,omitempty"`
	} `json:"status,omitempty"`
}

// execPlugin runs the command when a credential is first needed and again once it expired or
// the server refused it, as client-go's exec authenticator does.
type execPlugin struct {
	cfg         *ExecConfig
	info        []byte // KUBERNETES_EXEC_INFO
	interactive bool

	mu      sync.Mutex
	token   string
	cert    *tls.Certificate
	expires time.Time // zero: until refused
	valid   bool
}

var execAPIVersions = map[string]bool{
	"client.authentication.k8s.io/v1":      true,
	"client.authentication.k8s.io/v1beta1": true,
}

func newExecPlugin(cfg *ExecConfig, cluster Cluster) (*execPlugin, error) {
	if !execAPIVersions[cfg.APIVersion] {
		return nil, fmt.Errorf("exec plugin %s of the kubeconfig: apiVersion %q, want client.authentication.k8s.io/v1 or v1beta1", cfg.Command, cfg.APIVersion)
	}
	mode := cfg.InteractiveMode
	if mode == "" && cfg.APIVersion == "client.authentication.k8s.io/v1beta1" {
		mode = "IfAvailable"
	}
	stdinTerminal := term.IsTerminal(int(os.Stdin.Fd()))
	p := &execPlugin{cfg: cfg}
	switch mode {
	case "Never":
	case "IfAvailable":
		p.interactive = stdinTerminal
	case "Always":
		if !stdinTerminal {
			return nil, fmt.Errorf("exec plugin %s of the kubeconfig needs a terminal (interactiveMode: Always) and standard input is not one; run doctor from a terminal", cfg.Command)
		}
		p.interactive = true
	default:
		return nil, fmt.Errorf("exec plugin %s of the kubeconfig: interactiveMode %q, want Never, IfAvailable or Always", cfg.Command, cfg.InteractiveMode)
	}
	var req execCredential
	req.APIVersion, req.Kind, req.Spec.Interactive = cfg.APIVersion, "ExecCredential", p.interactive
	if cfg.ProvideClusterInfo {
		c := cluster
		ca, err := dataOrFile(c.CertificateAuthorityData, c.CertificateAuthority, "certificate-authority")
		if err != nil {
			return nil, err
		}
		c.CertificateAuthorityData, c.CertificateAuthority = ca, ""
		req.Spec.Cluster = &c
	}
	info, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	p.info = info
	return p, nil
}

// credential returns a current token or certificate, running the plugin when there is none.
func (p *execPlugin) credential() (string, *tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.valid && (p.expires.IsZero() || time.Now().Before(p.expires)) {
		return p.token, p.cert, nil
	}
	if err := p.run(); err != nil {
		return "", nil, err
	}
	return p.token, p.cert, nil
}

func (p *execPlugin) run() error {
	cmd := exec.Command(p.cfg.Command, p.cfg.Args...)
	cmd.Env = os.Environ()
	for _, e := range p.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(p.info))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if p.interactive {
		cmd.Stdin = os.Stdin
	}
	if err := cmd.Run(); err != nil {
		msg := fmt.Sprintf("exec plugin %s of the kubeconfig: %v", p.cfg.Command, err)
		if errors.Is(err, exec.ErrNotFound) && p.cfg.InstallHint != "" {
			msg += "\n\n" + p.cfg.InstallHint
		}
		return errors.New(msg)
	}
	var got execCredential
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		return fmt.Errorf("exec plugin %s of the kubeconfig printed no ExecCredential: %w", p.cfg.Command, err)
	}
	switch {
	case got.Kind != "ExecCredential" || got.APIVersion != p.cfg.APIVersion:
		return fmt.Errorf("exec plugin %s of the kubeconfig printed %s %s, want %s ExecCredential", p.cfg.Command, got.APIVersion, got.Kind, p.cfg.APIVersion)
	case got.Status == nil:
		return fmt.Errorf("exec plugin %s of the kubeconfig printed an ExecCredential without status", p.cfg.Command)
	case (got.Status.ClientCertificateData == "") != (got.Status.ClientKeyData == ""):
		return fmt.Errorf("exec plugin %s of the kubeconfig printed only one of clientCertificateData and clientKeyData", p.cfg.Command)
	case got.Status.Token == "" && got.Status.ClientCertificateData == "":
		return fmt.Errorf("exec plugin %s of the kubeconfig printed neither a token nor a client certificate", p.cfg.Command)
	}
	p.token, p.cert = got.Status.Token, nil
	if got.Status.ClientCertificateData != "" {
		cert, err := tls.X509KeyPair([]byte(got.Status.ClientCertificateData), []byte(got.Status.ClientKeyData))
		if err != nil {
			return fmt.Errorf("exec plugin %s of the kubeconfig: its client certificate: %w", p.cfg.Command, err)
		}
		p.cert = &cert
	}
	p.expires = time.Time{}
	if got.Status.ExpirationTimestamp != nil {
		p.expires = *got.Status.ExpirationTimestamp
	}
	p.valid = true
	return nil
}

// authorize adds the plugin's token to a request (and runs the plugin first if needed, so a
// certificate is current for the handshake).
func (p *execPlugin) authorize(r *http.Request) error {
	token, _, err := p.credential()
	if err != nil {
		return err
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return nil
}

// forget drops the credential after the server refused it.
func (p *execPlugin) forget() {
	p.mu.Lock()
	p.valid = false
	p.mu.Unlock()
}

// clientCertificate offers the plugin's certificate in the TLS handshake, else the
// kubeconfig's own (static).
func (p *execPlugin) clientCertificate(static []tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		_, cert, err := p.credential()
		if err != nil {
			return nil, err
		}
		if cert != nil {
			return cert, nil
		}
		if len(static) > 0 {
			return &static[0], nil
		}
		return &tls.Certificate{}, nil
	}
}
