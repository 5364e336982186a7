package upgrade

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// LabelSlotPool names the pool ("default" for the nodes outside the driver pools) on every
// slot Lease, so an agent lists its pool's slots in one request.
const LabelSlotPool = "gpupolicy.dev/driver-upgrade-pool"

// defaultPool is the slot pool name of the default driver stage.
const defaultPool = "default"

// Slots are a pool's upgrade concurrency slots: Leases gpu-driver-upgrade-<pool>-<n> in the
// policy's namespace, n below maxUnavailable. A node upgrades only while it holds one and
// renews it on every pass; a slot whose holder stopped renewing (a dead agent, a deleted
// node) is free again after its lease duration. Lease updates carry the resourceVersion read,
// so two agents racing for one free slot cannot both win.
type Slots struct {
	Client    kubernetes.Interface
	Namespace string
	Pool      string // "" for the default driver stage
	Holder    string // this node's name
	Duration  time.Duration
	Now       func() time.Time
}

func (s *Slots) pool() string {
	if s.Pool == "" {
		return defaultPool
	}
	return s.Pool
}

func (s *Slots) name(i int) string {
	return config.UpgradeLeasePrefix + s.pool() + "-" + strconv.Itoa(i)
}

func (s *Slots) list(ctx context.Context) ([]coordinationv1.Lease, error) {
	sel := labels.SelectorFromSet(labels.Set{LabelSlotPool: s.pool()}).String()
	l, err := s.Client.CoordinationV1().Leases(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list upgrade slots (Leases %s%s-*): %w", config.UpgradeLeasePrefix, s.pool(), err)
	}
	return l.Items, nil
}

func (s *Slots) expired(l *coordinationv1.Lease) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		return true
	}
	d := s.Duration
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s.Now().After(l.Spec.RenewTime.Add(d))
}

// Held is the slot this node holds (renewed now), or "" when it holds none.
func (s *Slots) Held(ctx context.Context) (string, error) {
	leases, err := s.list(ctx)
	if err != nil {
		return "", err
	}
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.Holder {
			return l.Name, s.renew(ctx, l)
		}
	}
	return "", nil
}

// Acquire takes a free slot of the first n, or renews the one this node holds. It returns the
// slot, or "" and the holders of the taken slots when all n are taken.
func (s *Slots) Acquire(ctx context.Context, n int) (slot string, holders []string, err error) {
	leases, err := s.list(ctx)
	if err != nil {
		return "", nil, err
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.Holder {
			return l.Name, nil, s.renew(ctx, l)
		}
		byName[l.Name] = l
	}
	for i := range n {
		name := s.name(i)
		l, ok := byName[name]
		if !ok {
			switch err := s.create(ctx, name); {
			case err == nil:
				return name, nil, nil
			case apierrors.IsAlreadyExists(err):
				continue // another agent took it first
			default:
				return "", nil, err
			}
		}
		if s.expired(l) {
			switch err := s.renew(ctx, l); {
			case err == nil:
				return name, nil, nil
			case apierrors.IsConflict(err):
				continue
			default:
				return "", nil, err
			}
		}
		holders = append(holders, *l.Spec.HolderIdentity)
	}
	slices.Sort(holders)
	return "", holders, nil
}

// Release frees the slot this node holds, if any.
func (s *Slots) Release(ctx context.Context) error {
	leases, err := s.list(ctx)
	if err != nil {
		return err
	}
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.Holder {
			continue
		}
		err := s.Client.CoordinationV1().Leases(s.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release upgrade slot %s: %w", l.Name, err)
		}
	}
	return nil
}

// fresh reports whether this node holds l and renewed it within a third of its duration: no
// write then. Every agent watches the slots, so a renewal on every pass would wake them all,
// and their passes would renew again.
func (s *Slots) fresh(l *coordinationv1.Lease) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.Holder || l.Spec.RenewTime == nil {
		return false
	}
	return s.Now().Sub(l.Spec.RenewTime.Time) < s.Duration/3
}

func (s *Slots) spec() coordinationv1.LeaseSpec {
	now := metav1.NewMicroTime(s.Now())
	secs := int32(s.Duration / time.Second)
	holder := s.Holder
	return coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}
}

func (s *Slots) create(ctx context.Context, name string) error {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{LabelSlotPool: s.pool()}},
		Spec:       s.spec(),
	}
	_, err := s.Client.CoordinationV1().Leases(s.Namespace).Create(ctx, l, metav1.CreateOptions{FieldManager: "gpu-node-agent"})
	return err
}

// renew writes this node as holder with a fresh renew time; the update carries the
// resourceVersion read, so it fails with a conflict when another agent wrote the Lease since.
func (s *Slots) renew(ctx context.Context, l *coordinationv1.Lease) error {
	if s.fresh(l) {
		return nil
	}
	l = l.DeepCopy()
	spec := s.spec()
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == s.Holder && l.Spec.AcquireTime != nil {
		spec.AcquireTime = l.Spec.AcquireTime
	}
	l.Spec = spec
	_, err := s.Client.CoordinationV1().Leases(s.Namespace).Update(ctx, l, metav1.UpdateOptions{FieldManager: "gpu-node-agent"})
	return err
}
