package health

import "time"

// SetClock makes m read the time from now; call it before Start.
func SetClock(m *Monitor, now func() time.Time) { m.now = now }
