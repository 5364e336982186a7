package collector

import (
	"math"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/nodefacts"
)

// Field is one value the collector reads for a GPU or MIG device. The metrics package maps
// each to its dcgm-exporter name; NaN in a Values array means "not read" (unsupported, or the
// GPU is lost), and such a series is left out of the scrape rather than reported as 0.
type Field int

// Whole-GPU fields, in the units dcgm-exporter documents.
const (
	GPUUtil               Field = iota // %
	MemCopyUtil                        // %
	EncUtil                            // %
	DecUtil                            // %
	FBFree                             // MiB
	FBUsed                             // MiB
	FBReserved                         // MiB
	GPUTemp                            // C
	MemoryTemp                         // C
	PowerUsage                         // W
	TotalEnergy                        // mJ since driver load
	SMClock                            // MHz
	MemClock                           // MHz
	PCIeReplays                        // count
	ECCSBEVolatile                     // count
	ECCDBEVolatile                     // count
	ECCSBEAggregate                    // count
	ECCDBEAggregate                    // count
	RemappedCorrectable                // rows
	RemappedUncorrectable              // rows
	RowRemapPending                    // 0/1
	RowRemapFailure                    // 0/1
	ClockEventReasons                  // bitmask
	PowerViolation                     // us
	ThermalViolation                   // us
	SyncBoostViolation                 // us
	BoardLimitViolation                // us
	LowUtilViolation                   // us
	ReliabilityViolation               // us
	ProfGrEngineActive                 // ratio 0..1 (GPM)
	ProfSMActive                       // ratio
	ProfSMOccupancy                    // ratio
	ProfTensorActive                   // ratio
	ProfDRAMActive                     // ratio
	ProfFP64Active                     // ratio
	ProfFP32Active                     // ratio
	ProfFP16Active                     // ratio
	ProfPCIeTxBytes                    // bytes/s
	ProfPCIeRxBytes                    // bytes/s
	ProfNVLinkTxBytes                  // bytes/s
	ProfNVLinkRxBytes                  // bytes/s
	NumFields
)

// Values holds one reading per Field; NaN = not available.
type Values [NumFields]float64

// emptyValues returns Values with every field unavailable.
func emptyValues() Values {
	var v Values
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

// Identity names a GPU with dcgm-exporter's labels (nodefacts.Identity). It is read once at
// start (and retried while incomplete), so a GPU that falls off the bus keeps its labels.
type Identity = nodefacts.Identity

// LastError is the most recent failed NVML call on a GPU.
type LastError struct {
	Call  string // NVML function, e.g. "nvmlDeviceGetTemperature"
	Error string // NVML return name, e.g. "ERROR_GPU_IS_LOST"
	Time  time.Time
}

// XIDCount is how many times one XID was reported for a GPU since the exporter started.
type XIDCount struct {
	XID   uint64
	Count uint64
}

// MIG is one MIG device (GPU instance + compute instance) of a GPU.
type MIG struct {
	UUID    string // "MIG-..."
	GIID    int    // label GPU_I_ID
	CIID    int
	Profile string // label GPU_I_PROFILE, e.g. "1g.5gb"
	Values  Values // FBFree/FBUsed/FBReserved and Prof* where GPM supports MIG
}

// GPU is one GPU in a snapshot.
type GPU struct {
	Identity
	Up        bool
	LastError *LastError
	Values    Values
	MIG       []MIG
	LastXID   uint64     // DCGM_FI_DEV_XID_ERRORS: the last XID seen, 0 = none
	XIDs      []XIDCount // sorted by XID
}

// CallError counts failed NVML calls of one function with one return code.
type CallError struct {
	Call  string
	Error string
	Count uint64
}

// Driver is the node's NVML/driver identity.
type Driver = nodefacts.Driver

// Snapshot is one complete, immutable collection; scrapes read the latest without touching NVML.
type Snapshot struct {
	Seq         uint64 // increases with every published snapshot
	Time        time.Time
	Duration    time.Duration // how long the NVML collection took
	Collections uint64
	Hostname    string
	Driver      Driver
	GPUs        []GPU
	CallErrors  []CallError // cumulative, sorted by call then error
}
