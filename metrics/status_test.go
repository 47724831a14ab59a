package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStatusGauges: RegisterStatus serves each figure of the status as a
// gauge, read once per scrape; an nfs-mode mount's metrics have no
// snfs-mode gauge.
func TestStatusGauges(t *testing.T) {
	get := func(c *Client) string {
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return string(b)
	}
	st := MountStatus{Connected: true, ConnectionChanged: time.Unix(1700000000, 500e6), DirtyBytes: 4096, DirtyFiles: 2,
		Recovering: true, DirtyOldest: 1500 * time.Millisecond, PermitsHeld: 3, LogRecords: 7, LogBytes: 900,
		LogOldest: 2 * time.Second, Conflicts: 1}
	reads := 0
	c := NewClient()
	c.RegisterStatus(true, func() MountStatus { reads++; return st })
	out := get(c)
	for _, want := range []string{
		"# TYPE snfs_client_connected gauge", "snfs_client_connected 1\n",
		"snfs_client_connection_changed_timestamp_seconds 1.7000000005e+09\n",
		"snfs_client_dirty_bytes 4096\n", "snfs_client_dirty_files 2\n", "snfs_client_recovering 1\n",
		"snfs_client_dirty_oldest_seconds 1.5\n", "snfs_client_permits_held 3\n", "snfs_client_cml_records 7\n",
		"snfs_client_cml_bytes 900\n", "snfs_client_cml_oldest_seconds 2\n", "snfs_client_conflicts_listed 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("snfs mode: missing %q in\n%s", want, out)
		}
	}
	if reads != 1 {
		t.Errorf("the status was read %d times in one scrape, want 1", reads)
	}

	n := NewClient()
	st.Connected = false
	n.RegisterStatus(false, func() MountStatus { return st })
	out = get(n)
	for _, want := range []string{"snfs_client_connected 0\n", "snfs_client_dirty_bytes 4096\n", "snfs_client_dirty_files 2\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("nfs mode: missing %q in\n%s", want, out)
		}
	}
	for _, not := range []string{"snfs_client_recovering", "snfs_client_permits_held", "snfs_client_cml_", "snfs_client_conflicts_listed", "snfs_client_dirty_oldest"} {
		if strings.Contains(out, not) {
			t.Errorf("nfs mode has %s:\n%s", not, out)
		}
	}
}
