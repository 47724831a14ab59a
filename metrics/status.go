package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MountStatus are the figures of `snfs status MOUNTPOINT` that are numbers,
// served as gauges (RegisterStatus). The snfs-mode ones are left out of an
// nfs-mode mount's metrics.
type MountStatus struct {
	Connected         bool      // the mount reaches its server
	ConnectionChanged time.Time // when Connected last changed
	DirtyBytes        int64     // written here, not yet stably on the server
	DirtyFiles        int
	// snfs mode only.
	Recovering   bool          // the mount's recovery after a server restart has not ended
	Disconnected bool          // disconnected operation: offline, serving the cache (--disconnected=auto)
	DirtyOldest  time.Duration // age of the oldest dirty data waiting for write-back
	PermitsHeld  int           // write-back permits held
	LogRecords   int           // modification log: records not yet reintegrated
	LogBytes     int64         // their encoded size
	LogOldest    time.Duration // age of the oldest of them
	Conflicts    int           // conflicts listed in the cache directory
}

// statusGauge is one gauge of MountStatus.
type statusGauge struct {
	desc  *prometheus.Desc
	snfs  bool // snfs mode only
	value func(*MountStatus) float64
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var statusGauges = []statusGauge{
	{prometheus.NewDesc("snfs_client_connected", "1 while the mount reaches its server (a connection is open and the server answers), else 0.", nil, nil),
		false, func(s *MountStatus) float64 { return b2f(s.Connected) }},
	{prometheus.NewDesc("snfs_client_connection_changed_timestamp_seconds", "When snfs_client_connected last changed (the mount's start before any change), in seconds since the epoch.", nil, nil),
		false, func(s *MountStatus) float64 { return float64(s.ConnectionChanged.UnixNano()) / 1e9 }},
	{prometheus.NewDesc("snfs_client_dirty_bytes", "Data written on the mount and not yet stably on the server: snfs mode's dirty cache files and either mode's data held in memory until committed.", nil, nil),
		false, func(s *MountStatus) float64 { return float64(s.DirtyBytes) }},
	{prometheus.NewDesc("snfs_client_dirty_files", "Files with data written on the mount and not yet stably on the server.", nil, nil),
		false, func(s *MountStatus) float64 { return float64(s.DirtyFiles) }},
	{prometheus.NewDesc("snfs_client_recovering", "1 while the mount's recovery after a server restart (reclaim, reintegration) has not ended, else 0.", nil, nil),
		true, func(s *MountStatus) float64 { return b2f(s.Recovering) }},
	{prometheus.NewDesc("snfs_client_disconnected", "1 while the mount is offline (--disconnected=auto: the server answered nothing for --disconnect-after; it serves its cache alone), else 0.", nil, nil),
		true, func(s *MountStatus) float64 { return b2f(s.Disconnected) }},
	{prometheus.NewDesc("snfs_client_dirty_oldest_seconds", "Age of the oldest dirty data waiting for delayed write-back (0: none).", nil, nil),
		true, func(s *MountStatus) float64 { return s.DirtyOldest.Seconds() }},
	{prometheus.NewDesc("snfs_client_permits_held", "Write-back permits the mount holds.", nil, nil),
		true, func(s *MountStatus) float64 { return float64(s.PermitsHeld) }},
	{prometheus.NewDesc("snfs_client_cml_records", "Modification log records not yet reintegrated.", nil, nil),
		true, func(s *MountStatus) float64 { return float64(s.LogRecords) }},
	{prometheus.NewDesc("snfs_client_cml_bytes", "Encoded size of the modification log records not yet reintegrated.", nil, nil),
		true, func(s *MountStatus) float64 { return float64(s.LogBytes) }},
	{prometheus.NewDesc("snfs_client_cml_oldest_seconds", "Age of the oldest modification log record not yet reintegrated (0: none).", nil, nil),
		true, func(s *MountStatus) float64 { return s.LogOldest.Seconds() }},
	{prometheus.NewDesc("snfs_client_conflicts_listed", "Conflicts listed in the cache directory (snfs conflicts).", nil, nil),
		true, func(s *MountStatus) float64 { return float64(s.Conflicts) }},
}

// statusCollector reads a MountStatus once per scrape.
type statusCollector struct {
	snfs bool
	f    func() MountStatus
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range statusGauges {
		if c.snfs || !g.snfs {
			ch <- g.desc
		}
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.f()
	for _, g := range statusGauges {
		if c.snfs || !g.snfs {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(&s))
		}
	}
}

// RegisterStatus adds the gauges of `snfs status` (MountStatus; those of
// snfs mode if snfs), read from f once per scrape. Call once, and do not
// set ClientSources.DirtyBytes too (snfs_client_dirty_bytes is here).
func (c *Client) RegisterStatus(snfs bool, f func() MountStatus) {
	c.reg.MustRegister(&statusCollector{snfs: snfs, f: f})
}
