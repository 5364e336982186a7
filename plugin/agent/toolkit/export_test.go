package toolkit

// GateCheck is the node agent's toolkit gate (stages.ToolkitCheck) for a policy whose drop-in
// has dropInSHA256 and handler "nvidia": set by gate_test.go (package toolkit_test, which may
// import stages; this package's tests may not), so the real-daemon tests assert the Reason the
// gate shows, not only the status file.
var GateCheck func(hostRoot, dropInSHA256 string) (ready bool, reason string)
