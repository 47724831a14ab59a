package consist

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"snfs/snfs1"
)

// TestGraceOverAfterMetrics: whoever waits for the end of the grace period
// (GraceOver) finds it counted: the reason's counter and the length gauge
// are set before GraceOver is closed. They used to be set after, and a
// reader woken by GraceOver could find grace_end_total{reason=timeout} still
// 0 (TestSNFSGraceTimeout in CI). The window is a few instructions wide:
// the test ends many grace periods, a reader parked on each one's GraceOver.
func TestGraceOverAfterMetrics(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "consist-grace-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range 200 {
		// A client recorded before the start, which never comes back: the
		// grace period ends at its bound (and deletes the record).
		rec, err := openRecords(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := rec.register("gone", snfs1.Verifier{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := rec.close(); err != nil {
			t.Fatal(err)
		}
		clock := new(OffsetClock)
		d, err := New(Config{StateDir: dir, Grace: time.Hour, Clock: clock, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan [2]float64)
		go func() {
			<-d.GraceOver()
			var end, length dto.Metric
			d.met.graceEnd.WithLabelValues(GraceTimeout).Write(&end)
			d.met.graceSeconds.Write(&length)
			seen <- [2]float64{end.GetCounter().GetValue(), length.GetGauge().GetValue()}
		}()
		clock.Advance(time.Hour)
		var got [2]float64
		select {
		case got = <-seen:
		case <-time.After(30 * time.Second):
			t.Fatal("the grace period did not end 30 s after its bound")
		}
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		if got[0] != 1 || got[1] < time.Hour.Seconds() {
			t.Fatalf("grace period %d: as GraceOver was closed, grace_end_total{reason=timeout} = %v and grace_seconds = %v; want 1 and at least 3600",
				i, got[0], got[1])
		}
	}
}
