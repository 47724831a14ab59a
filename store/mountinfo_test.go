package store

import "testing"

func TestDiscardsIn(t *testing.T) {
	const info = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard,resv_strict
23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw
40 22 7:0 / /var/tmp/x rw,relatime shared:20 - ext4 /dev/loop0 rw
41 22 7:1 / /var/tmp/y rw,relatime,discard shared:21 - xfs /dev/loop1 rw
42 22 7:2 / /var/tmp/z rw shared:22 - btrfs /dev/loop2 rw,discard=async,space_cache=v2
43 22 7:3 / /var/tmp/n rw shared:23 - ext4 /dev/loop3 rw,nodiscard
44 22 7:4 / /var/tmp/short rw -
garbage
`
	for _, tc := range []struct {
		id   int
		want bool
	}{{22, true}, {23, false}, {40, false}, {41, true}, {42, true}, {43, false}, {44, false}, {99, false}} {
		if got := discardsIn([]byte(info), tc.id); got != tc.want {
			t.Errorf("mount %d: discards %v, want %v", tc.id, got, tc.want)
		}
	}
}
