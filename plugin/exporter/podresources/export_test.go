package podresources

import "time"

// SetClock makes c read the time from now.
func SetClock(c *Client, now func() time.Time) { c.now = now }
