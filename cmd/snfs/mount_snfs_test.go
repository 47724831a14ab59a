package main

import (
	"strings"
	"testing"
	"time"

	"snfs/state/clientfile"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "10G": 10 << 30, "512m": 512 << 20, "1T": 1 << 40, "3K": 3 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1", "1.5G", "ten"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}

func TestMountSNFSOptions(t *testing.T) {
	var f mountFlags
	if err := f.applyOpts("mode=snfs,cache-dir=/var/cache/x,cache-size=1G,writeback-delay=5s,close-delay=0,_netdev"); err != nil {
		t.Fatal(err)
	}
	if f.mode != "snfs" || f.cacheDir != "/var/cache/x" || f.cacheSize != "1G" || f.writebackDelay != 5*time.Second || f.closeDelay != 0 {
		t.Fatalf("got %+v", f)
	}
	if err := f.applyOpts("close-delay=500ms"); err != nil || time.Duration(f.closeDelay) != 500*time.Millisecond {
		t.Fatalf("close-delay=500ms: %v, %v", err, f.closeDelay)
	}
	if err := f.applyOpts("close-delay=forever,kept-opens=10"); err != nil || time.Duration(f.closeDelay) != clientfile.UntilRecalled ||
		f.keptOpens != 10 || f.closeDelay.String() != "forever" {
		t.Fatalf("close-delay=forever,kept-opens=10: %v, %v, %d", err, f.closeDelay, f.keptOpens)
	}
	if err := f.applyOpts("close-delay=-1s"); err == nil {
		t.Fatal("a negative close delay was taken")
	}
	if err := f.applyOpts("writeback-delay=soon"); err == nil {
		t.Fatal("a bad delay was taken")
	}
	f.passthrough = true // the flag's default
	for _, c := range []struct {
		opts string
		want bool
	}{{"passthrough=false", false}, {"passthrough", true}, {"nopassthrough", false}, {"passthrough=true", true}} {
		if err := f.applyOpts(c.opts); err != nil || f.passthrough != c.want {
			t.Fatalf("-o %s: %v, passthrough %v", c.opts, err, f.passthrough)
		}
	}
	if err := f.applyOpts("passthrough=maybe"); err == nil {
		t.Fatal("a bad passthrough value was taken")
	}
	if d := defaultCacheDir("srv", "/export"); !strings.HasPrefix(d, "/var/cache/snfs/") || d == defaultCacheDir("srv", "/other") {
		t.Fatalf("default cache directory %q", d)
	}
}
