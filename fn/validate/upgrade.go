package validate

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// driverUpgrade checks spec.driver.onDrift and spec.driver.upgrade: what the node agents do
// when a node's driver differs from the policy's, and how they replace a driver container.
func (c *checker) driverUpgrade(s *v1alpha1.Spec, p *field.Path) {
	d := &s.Driver
	c.oneOf(p.Child("onDrift"), d.OnDrift, v1alpha1.OnDriftReport, v1alpha1.OnDriftTaint)
	u := d.Upgrade
	if u == nil {
		return
	}
	up := p.Child("upgrade")
	c.maxUnavailable(up.Child("maxUnavailable"), u.MaxUnavailable)
	if u.Drain != nil {
		dp := up.Child("drain")
		c.timeout(dp.Child("timeout"), u.Drain.Timeout, "10m")
		c.podSelector(dp.Child("podSelector"), u.Drain.PodSelector)
		if !v1alpha1.Bool(u.Drain.Enabled) && s.UsesDriverSource(v1alpha1.SourceContainer) {
			c.warnf(dp.Child("enabled"), false, "the driver pod is replaced with GPU pods still running on the node: their GPUs vanish under them while the old driver unloads; keep drain enabled unless the jobs tolerate it")
		}
	}
	if u.WaitForJobs != nil {
		wp := up.Child("waitForJobs")
		c.timeout(wp.Child("timeout"), u.WaitForJobs.Timeout, "30m")
		c.podSelector(wp.Child("podSelector"), u.WaitForJobs.PodSelector)
	}
}

// duration is a Go duration of 0s or more; 0s means for ever.
func (c *checker) timeout(p *field.Path, v, example string) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		c.errorf(p, v, "%q is not a Go duration: write e.g. %q (or \"0s\" to wait for ever)", v, example)
	case d < 0:
		c.errorf(p, v, "%s is negative: write e.g. %q (or \"0s\" to wait for ever)", v, example)
	}
}

// podSelector is a label selector in kubectl's syntax ("app=batch,tier!=web"); "" selects none.
func (c *checker) podSelector(p *field.Path, v string) {
	if v == "" {
		return
	}
	if _, err := labels.Parse(v); err != nil {
		c.errorf(p, v, "%q is not a label selector: %v; write it as kubectl -l takes it, e.g. \"app=batch\" or \"team in (ml,research)\"", v, err)
	}
}

// poolDriver checks a pool's driver override like spec.driver, and its version against
// cuda.version and the branch lifecycle of the version matrix.
func (c *checker) poolDriver(s *v1alpha1.Spec, np *v1alpha1.NodePool, p *field.Path) {
	o := np.Driver
	if *o == (v1alpha1.NodePoolDriver{}) {
		c.errorf(p, nil, "overrides nothing: set version, source, image, enforce or kernelModuleType, or remove driver so the pool runs spec.driver's stage")
		return
	}
	if o.Source != "" {
		c.oneOf(p.Child("source"), o.Source, v1alpha1.SourcePreinstalled, v1alpha1.SourceContainer)
	}
	if o.Enforce != "" {
		c.oneOf(p.Child("enforce"), o.Enforce, v1alpha1.EnforceExact, v1alpha1.EnforceBranch, v1alpha1.EnforceNone)
	}
	if o.Image != "" {
		c.repository(p.Child("image"), o.Image, "the pool's driver version and spec.driver.os")
	}
	if o.KernelModuleType != "" {
		d, _ := s.PoolDriver(np)
		where := p.Child("version").String()
		if o.Version == "" {
			where = "spec.driver.version"
		}
		c.kernelModules(p.Child("kernelModuleType"), o.KernelModuleType, d.Version, where)
	}
	if o.Version != "" && c.driverVersion(p.Child("version"), o.Version) {
		c.driverLifecycle(o.Version, p.Child("version"))
		if cudaRE.MatchString(s.CUDA.Version) {
			d, _ := s.PoolDriver(np)
			pooled := *s
			pooled.Driver = d
			c.cudaMatrixAt(&pooled, p.Child("version"), "nodePools["+np.Name+"].driver.version")
		}
	}
}
