// Package kubeclient is how `gpupolicy-fn doctor` reaches the API server: a kubeconfig
// loaded the way kubectl loads it (--kubeconfig, else $KUBECONFIG's files merged, else
// ~/.kube/config, else the in-cluster service account) and HTTPS GETs with its credentials
// (client certificates, bearer tokens, basic auth, exec credential plugins, impersonation).
//
// It stands in for client-go's clientcmd, rest and dynamic packages. Those register schemes,
// feature gates and the exec plugin's tables at package initialisation, which every
// gpupolicy-fn process paid, the KRM function and render included, although only doctor reads
// a cluster: about 0.5 ms and 2.2 MiB of each call (BENCHMARKS.md, issue 18). The kubeconfig
// format, its merge rules and the exec protocol (client.authentication.k8s.io) are client-go's.
package kubeclient

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of a kubeconfig file (clientcmd/api/v1) a read-only client uses.
type kubeconfig struct {
	CurrentContext string         `json:"current-context"`
	Clusters       []namedCluster `json:"clusters"`
	AuthInfos      []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
}

type namedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

type namedUser struct {
	Name string `json:"name"`
	User User   `json:"user"`
}

type namedContext struct {
	Name    string      `json:"name"`
	Context kubeContext `json:"context"`
}

// Cluster is where the API server is and how its certificate is checked.
type Cluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthority     string `json:"certificate-authority,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
	DisableCompression       bool   `json:"disable-compression,omitempty"`
}

// User is how the client authenticates, and whom it impersonates.
type User struct {
	ClientCertificate     string              `json:"client-certificate"`
	ClientCertificateData []byte              `json:"client-certificate-data"`
	ClientKey             string              `json:"client-key"`
	ClientKeyData         []byte              `json:"client-key-data"`
	Token                 string              `json:"token"`
	TokenFile             string              `json:"tokenFile"`
	Impersonate           string              `json:"as"`
	ImpersonateUID        string              `json:"as-uid"`
	ImpersonateGroups     []string            `json:"as-groups"`
	ImpersonateUserExtra  map[string][]string `json:"as-user-extra"`
	Username              string              `json:"username"`
	Password              string              `json:"password"`
	AuthProvider          *struct {
		Name string `json:"name"`
	} `json:"auth-provider"`
	Exec *ExecConfig `json:"exec"`
}

type kubeContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// Config is one context of a kubeconfig resolved: file paths made absolute against the file
// that named them.
type Config struct {
	Context string // "" for the in-cluster configuration
	Cluster Cluster
	User    User
}

// The in-cluster service account, where Kubernetes mounts it.
var (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	errNoConfig       = errors.New("no kubeconfig found ($KUBECONFIG unset, no ~/.kube/config) and not running inside a cluster")
)

// Load reads the kubeconfig as kubectl does and returns the context contextName ("" = the
// current context): explicitPath alone if set (it must exist), else the files of $KUBECONFIG
// merged (the first file to define a name or the current context wins; missing files are
// skipped), else ~/.kube/config; without any, the in-cluster service account.
func Load(explicitPath, contextName string) (*Config, error) {
	var files []string
	switch env := os.Getenv("KUBECONFIG"); {
	case explicitPath != "":
		files = []string{explicitPath}
	case env != "":
		files = filepath.SplitList(env)
	default:
		if home, err := os.UserHomeDir(); err == nil {
			files = []string{filepath.Join(home, ".kube", "config")}
		}
	}
	var merged kubeconfig
	loaded := false
	seen := map[string]bool{}
	for _, f := range files {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		kc, err := readFile(f)
		if errors.Is(err, fs.ErrNotExist) && explicitPath == "" {
			continue
		}
		if err != nil {
			return nil, err
		}
		loaded = true
		merge(&merged, kc)
	}
	if !loaded || len(merged.Clusters)+len(merged.AuthInfos)+len(merged.Contexts) == 0 && contextName == "" {
		if cfg, ok, err := inCluster(); ok || err != nil {
			return cfg, err
		}
		if !loaded {
			return nil, errNoConfig
		}
	}
	return merged.resolve(contextName)
}

// readFile parses one kubeconfig file and makes its relative paths absolute, as clientcmd's
// ResolveLocalPaths does: a path in a kubeconfig is relative to the file, not to the working
// directory.
func readFile(path string) (*kubeconfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i := range kc.Clusters {
		abs(&kc.Clusters[i].Cluster.CertificateAuthority)
	}
	for i := range kc.AuthInfos {
		u := &kc.AuthInfos[i].User
		abs(&u.ClientCertificate)
		abs(&u.ClientKey)
		abs(&u.TokenFile)
		// An exec command is looked up on $PATH unless it names a path.
		if u.Exec != nil && strings.ContainsRune(u.Exec.Command, filepath.Separator) {
			abs(&u.Exec.Command)
		}
	}
	return &kc, nil
}

// merge adds what kc defines that into does not yet: earlier files win, name by name.
func merge(into, kc *kubeconfig) {
	if into.CurrentContext == "" {
		into.CurrentContext = kc.CurrentContext
	}
	into.Clusters = mergeNamed(into.Clusters, kc.Clusters, func(c namedCluster) string { return c.Name })
	into.AuthInfos = mergeNamed(into.AuthInfos, kc.AuthInfos, func(u namedUser) string { return u.Name })
	into.Contexts = mergeNamed(into.Contexts, kc.Contexts, func(c namedContext) string { return c.Name })
}

func mergeNamed[T any](into, more []T, name func(T) string) []T {
	for _, m := range more {
		if !slices.ContainsFunc(into, func(x T) bool { return name(x) == name(m) }) {
			into = append(into, m)
		}
	}
	return into
}

// resolve picks the context and the cluster and user it names.
func (kc *kubeconfig) resolve(name string) (*Config, error) {
	if name == "" {
		name = kc.CurrentContext
	}
	if name == "" {
		return nil, errors.New("the kubeconfig has no current-context; pass --context or run kubectl config use-context")
	}
	var ctx *kubeContext
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == name {
			ctx = &kc.Contexts[i].Context
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("context %q does not exist in the kubeconfig", name)
	}
	cfg := &Config{Context: name}
	found := false
	for _, c := range kc.Clusters {
		if c.Name == ctx.Cluster {
			cfg.Cluster, found = c.Cluster, true
		}
	}
	if !found {
		return nil, fmt.Errorf("context %q names cluster %q, which the kubeconfig does not define", name, ctx.Cluster)
	}
	if cfg.Cluster.Server == "" {
		return nil, fmt.Errorf("cluster %q of context %q has no server", ctx.Cluster, name)
	}
	if ctx.User != "" {
		found = false
		for _, u := range kc.AuthInfos {
			if u.Name == ctx.User {
				cfg.User, found = u.User, true
			}
		}
		if !found {
			return nil, fmt.Errorf("context %q names user %q, which the kubeconfig does not define", name, ctx.User)
		}
	}
	return cfg, nil
}

// inCluster is the service account's configuration when this runs in a pod (ok false
// elsewhere), as rest.InClusterConfig builds it.
func inCluster() (*Config, bool, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, false, nil
	}
	token := filepath.Join(serviceAccountDir, "token")
	if _, err := os.Stat(token); err != nil {
		return nil, false, nil // not a pod with a service account token: fall through to the kubeconfig's error
	}
	cfg := &Config{Cluster: Cluster{Server: "https://" + joinHostPort(host, port)}, User: User{TokenFile: token}}
	if ca := filepath.Join(serviceAccountDir, "ca.crt"); fileExists(ca) {
		cfg.Cluster.CertificateAuthority = ca
	}
	return cfg, true, nil
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
