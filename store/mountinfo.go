package store

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// mountDiscards reports whether the mount with id (name_to_handle_at's mount id)
// has online discard on (Export.slowFree). Unknown counts as no.
func mountDiscards(id int) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return err == nil && discardsIn(b, id)
}

// discardsIn finds mount id in a mountinfo(5) text and reports whether its mount
// or super options hold discard (or discard=...). Lines it cannot read are skipped.
func discardsIn(mountinfo []byte, id int) bool {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != strconv.Itoa(id) {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) {
			return false
		}
		for _, opts := range []string{f[5], f[sep+3]} {
			for _, o := range strings.Split(opts, ",") {
				if o == "discard" || strings.HasPrefix(o, "discard=") {
					return true
				}
			}
		}
		return false
	}
	return false
}
