package main

import "testing"

// TestMountLockOptions: -o's lock settings, Linux's nfs(5) names included,
// and --locks's check.
func TestMountLockOptions(t *testing.T) {
	for _, c := range []struct{ opts, want string }{
		{"nolock", "local"}, {"lock", "nlm"}, {"local_lock=all", "local"}, {"local_lock=flock", "local"},
		{"local_lock=none", "nlm"}, {"locks=local", "local"}, {"locks=nlm", "nlm"},
	} {
		f := mountFlags{locks: "nlm"}
		if c.want == "nlm" {
			f.locks = "local"
		}
		if err := f.applyOpts(c.opts); err != nil || f.locks != c.want {
			t.Errorf("-o %s: locks %q, %v; want %q", c.opts, f.locks, err, c.want)
		}
	}
	var f mountFlags
	if err := f.applyOpts("nlm-port=4045,rpcbind-port=1111"); err != nil || f.nlmPort != 4045 || f.rpcbindPort != 1111 {
		t.Fatalf("nlm-port=4045,rpcbind-port=1111: %+v, %v", f, err)
	}
	_, _, _, _, err := parseMountArgs([]string{"--locks=maybe", "127.0.0.1:/srv", "/mnt"})
	if err == nil || err.Error() != `--locks: want nlm or local, not "maybe"` {
		t.Fatalf("--locks=maybe: %v", err)
	}
}
