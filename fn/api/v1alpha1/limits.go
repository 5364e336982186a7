package v1alpha1

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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
	"MPS.Replicas":         {Min: 2, Max: config.MaxMPSClients},
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

// Limits on what a policy may hold. They sit far above any real fleet and exist so a mistake
// (a generated list gone wrong, a file that is not a policy) is refused at once with its limit
// named, instead of costing minutes and gigabytes and rendering objects the API server refuses.
// Decoding checks them before it reads a list's or map's entries, so the cost of a refused
// input stays that of parsing it. The reference (README.md, "Limits") lists every one; a test
// keeps the two in step.
const (
	// MaxPolicyBytes bounds a policy file (render -f, audit, diff) and the GPUPolicy of a KRM
	// function call. A policy with every field set and 100 node pools is about 20 KiB.
	MaxPolicyBytes = 1 << 20
	// MaxResourceListBytes bounds the KRM function's stdin: the policy and the items passed
	// through (a kpt package).
	MaxResourceListBytes = 16 << 20
	// MaxEntries bounds every list and map the table below does not name.
	MaxEntries = 256
	// maxDecodeErrors is how many decoding errors one file reports; a file that is not a
	// policy at all would otherwise draw one per line.
	maxDecodeErrors = 50
)

// EntryLimit is the most entries one list or map of a policy may hold, and how to stay below.
type EntryLimit struct {
	// Field is the field path, with [*] for any node pool.
	Field string
	Max   int
	// Fix is what to do instead, in a few words.
	Fix string
}

// EntryLimits are the lists and maps whose size drives the cost of rendering or the size of
// the rendered objects.
var EntryLimits = []EntryLimit{
	{"metadata.labels", 256, "keep the policy's own labels few; they are not copied to the rendered objects"},
	{"metadata.annotations", 256, "keep the policy's own annotations few; they are not copied to the rendered objects"},
	{"spec.imagePullSecrets", 32, "one secret can hold the credentials of every registry (a .dockerconfigjson with several auths)"},
	{"spec.nodeSelector", 32, "select GPU nodes on one or a few labels, e.g. nvidia.com/gpu.present: \"true\""},
	{"spec.tolerations", 64, "tolerate a taint key with operator: Exists instead of listing each value"},
	{"spec.devicePlugin.healthChecks.ignoredXIDs", 256, "list each XID once"},
	{"spec.nodePools", 1000, "give pools that share device plugin settings one label and one pool"},
	{"spec.nodePools[*].nodeSelector", 32, "give each pool one label that tells it apart, e.g. gpupolicy.dev/pool: <name>"},
	{"spec.nodePools[*].devicePlugin.healthChecks.ignoredXIDs", 256, "list each XID once"},
}

// entryLimit returns the limit of the list or map at path (a field.Path's String()).
func entryLimit(path string) EntryLimit {
	generic := genericPath(path)
	for _, l := range EntryLimits {
		if l.Field == generic {
			return l
		}
	}
	return EntryLimit{Field: generic, Max: MaxEntries, Fix: "a real policy needs far fewer"}
}

// genericPath replaces list indices by [*] ("spec.nodePools[3].nodeSelector" →
// "spec.nodePools[*].nodeSelector"); map keys ([gpu]) stay, none of the limited fields is in
// a map.
func genericPath(path string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(path, '[')
		if i < 0 {
			b.WriteString(path)
			return b.String()
		}
		j := strings.IndexByte(path[i:], ']')
		if j < 0 {
			b.WriteString(path)
			return b.String()
		}
		idx := path[i+1 : i+j]
		b.WriteString(path[:i])
		if idx != "" && strings.Trim(idx, "0123456789") == "" {
			b.WriteString("[*]")
		} else {
			b.WriteString(path[i : i+j+1])
		}
		path = path[i+j+1:]
	}
}

// CheckSize refuses input of size bytes over limit; what names it ("the policy file").
func CheckSize(what string, size, limit int64) error {
	if size <= limit {
		return nil
	}
	return sizeError(what, byteSize(size), limit)
}

// CheckRead is CheckSize for data read through io.LimitReader(r, limit+1), whose size beyond
// the limit is unknown.
func CheckRead(what string, data []byte, limit int64) error {
	if int64(len(data)) <= limit {
		return nil
	}
	return sizeError(what, "more than that", limit)
}

func sizeError(what, size string, limit int64) error {
	return fmt.Errorf("%s is over the %s limit (it is %s; see Limits in the GPUPolicy reference): a GPUPolicy is a few KiB; check that this is the right input", what, byteSize(limit), size)
}

// CheckResourceListRead is CheckRead for a KRM function's stdin, read through
// io.LimitReader(r, MaxResourceListBytes+1). Its bulk is the items the orchestrator passes
// through, not the policy, so the error says where the bytes come from and how to shed them.
func CheckResourceListRead(data []byte) error {
	if int64(len(data)) <= MaxResourceListBytes {
		return nil
	}
	return fmt.Errorf("the ResourceList on stdin is over the %s limit (it is more than that; see Limits in the GPUPolicy reference): it holds the GPUPolicy (a few KiB) and every item the orchestrator passes through, the other resources of the kustomization or kpt package: generate the GPU stack in a kustomization or package of its own, so that only the policy reaches the function", byteSize(MaxResourceListBytes))
}

// CheckText refuses what YAML cannot read, naming the line: bytes that are not UTF-8 (a file
// saved as Latin-1) and control characters. YAML parsers report both without a line.
func CheckText(what string, data []byte) error {
	if enc := utf16Encoding(data); enc != "" {
		return fmt.Errorf("%s is %s, not UTF-8; YAML files must be UTF-8: re-save the file as UTF-8 (e.g. iconv -f %s -t UTF-8)", what, enc, strings.Fields(enc)[0])
	}
	line, col := 1, 1
	for off := 0; off < len(data); {
		r, size := utf8.DecodeRune(data[off:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return fmt.Errorf("%s is not UTF-8: line %d, column %d (byte offset %d) holds the byte 0x%02X, which is not valid UTF-8; YAML files must be UTF-8: re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)", what, line, col, off, data[off])
		case r == '\n':
			line, col = line+1, 0
		case r < 0x20 && r != '\t' && r != '\r', r == 0x7f, r >= 0x80 && r <= 0x9f && r != 0x85, r == 0xfffe, r == 0xffff:
			// What YAML's c-printable excludes (yaml.v3 says only "control characters are
			// not allowed").
			return fmt.Errorf("%s holds the control character U+%04X at line %d, column %d (byte offset %d), which YAML does not allow: remove it", what, r, line, col, off)
		}
		off += size
		col++
	}
	return nil
}

// utf16Encoding names the encoding of data when it is UTF-16 (Windows editors and PowerShell's
// redirection save it), "" otherwise: by its byte order mark, or without one by the NUL bytes
// the ASCII characters of a YAML file have in every other position.
func utf16Encoding(data []byte) string {
	switch {
	case len(data) >= 2 && data[0] == 0xff && data[1] == 0xfe:
		return "UTF-16LE (it starts with the byte order mark FF FE)"
	case len(data) >= 2 && data[0] == 0xfe && data[1] == 0xff:
		return "UTF-16BE (it starts with the byte order mark FE FF)"
	}
	n := min(len(data), 256) &^ 1
	if n < 4 {
		return ""
	}
	var evenNUL, oddNUL int
	for i := 0; i < n; i += 2 {
		if data[i] == 0 {
			evenNUL++
		}
		if data[i+1] == 0 {
			oddNUL++
		}
	}
	switch half := n / 4; {
	case oddNUL > half && evenNUL == 0:
		return "UTF-16LE (every other byte is NUL)"
	case evenNUL > half && oddNUL == 0:
		return "UTF-16BE (every other byte is NUL)"
	}
	return ""
}

// byteSize writes n for a person: "812 bytes", "19.1 MiB".
func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MiB"
	case n >= 1<<10:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	}
	return fmt.Sprintf("%d bytes", n)
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }
