package doctor

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ReadError is a failed read of the cluster, named by verb and resource so a person knows which
// RBAC rule is missing or which call could not reach the API server.
type ReadError struct {
	Verb      string // get | list
	Resource  string // nodes, pods, runtimeclasses.node.k8s.io, ...
	Namespace string // "" for cluster-scoped reads and lists across all namespaces
	Name      string // "" for lists
	Server    string // API server URL, when known, for unreachable errors
	// Essential reads stop the diagnosis; their message lists every right doctor needs.
	Essential bool
	Err       error
}

func (e *ReadError) Error() string {
	what := e.Verb + " " + e.Resource
	if e.Name != "" {
		what += " " + e.Name
	}
	switch {
	case e.Namespace != "":
		what += " in namespace " + e.Namespace
	case e.Verb == "list":
		what += " cluster-wide"
	}
	switch {
	case apierrors.IsForbidden(e.Err):
		msg := fmt.Sprintf("RBAC forbids %s: %v; grant the verb %q on %q to this identity", what, e.Err, e.Verb, e.Resource)
		if e.Essential {
			msg += " (doctor is read-only and needs get/list on nodes, pods, events, configmaps and runtimeclasses.node.k8s.io, and get on every rendered object with -f)"
		}
		return msg
	case apierrors.IsUnauthorized(e.Err):
		return fmt.Sprintf("the API server rejected the credentials for %s: %v; check the user of the kubeconfig context (--kubeconfig, --context) or renew its token", what, e.Err)
	case unreachable(e.Err):
		server := e.Server
		if server == "" {
			server = "the API server"
		}
		return fmt.Sprintf("cannot reach %s to %s: %v; check --kubeconfig/--context (or KUBECONFIG) and that the cluster is up", server, what, e.Err)
	}
	return fmt.Sprintf("%s: %v", what, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// unreachable reports whether err means no API server answered (as opposed to one that refused).
func unreachable(err error) bool {
	var urlErr *url.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH):
		return true
	case errors.As(err, &urlErr):
		return urlErr.Timeout() || !isAPIStatus(err)
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err)
}

func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// fatalRead says whether a read failure must stop the diagnosis: without nodes and pods there is
// nothing to say; for the other reads doctor reports what it could not check and carries on.
func fatalRead(err error) bool {
	return unreachable(err) || apierrors.IsUnauthorized(err)
}
