package v1alpha1

import (
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Range is the inclusive range of a number field of the contract.
type Range struct{ Min, Max int64 }

// Limits of the contract's number fields, keyed by "<GoType>.<GoField>". Validation refuses a
// value outside its range, the decoder names the range when a number does not even fit an
// int64, and the generated schema and reference (fn/internal/schemagen) print it.
var Limits = map[string]Range{
	// The kubelet's ListAndWatch message limit, see config.MaxReplicas.
	"TimeSlicing.Replicas": {Min: 1, Max: config.MaxReplicas},
	// The exporter runs without NET_BIND_SERVICE, so it cannot listen below 1024.
	"Exporter.Port": {Min: 1024, Max: 65535},
}

// Exporter interval bounds. The interval is also the ServiceMonitor's scrape interval:
// Prometheus drops a series it has not scraped for 5 minutes (its lookback delta), so a
// longer interval makes every GPU series disappear between scrapes and the alerts on them
// never fire. MaxExporterInterval is half of that, so one failed scrape leaves no gap, and
// the rendered alerts' shortest range ([10m]) still holds four samples.
const (
	MinExporterInterval = time.Second
	MaxExporterInterval = PrometheusLookback / 2
	// PrometheusLookback is Prometheus' default lookback delta (--query.lookback-delta).
	PrometheusLookback = 5 * time.Minute
)
