package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mountEntry is one line of /proc/self/mountinfo (proc(5)).
type mountEntry struct {
	dir    string // mount point, unescaped
	fsType string // "fuse.snfs" for an snfs mount
	source string // "SERVER:/EXPORT" for an snfs mount
}

// mountAt returns the topmost mount on dir (an absolute, clean path), if
// any: mountinfo lists mounts in the order they were made, so the last one
// on dir is the one in view.
func mountAt(dir string) (e mountEntry, ok bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return e, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		for i, x := range fields {
			if x == "-" && i+2 < len(fields) {
				e, ok = mountEntry{dir: dir, fsType: fields[i+1], source: unescapeMountinfo(fields[i+2])}, true
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return e, false, fmt.Errorf("/proc/self/mountinfo: %w", err)
	}
	return e, ok, nil
}

// unescapeMountinfo undoes the kernel's octal escapes of space, tab,
// newline and backslash in mountinfo's fields ("\040").
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
