package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"snfs/mount/cachedir"
)

// explainCacheBusy turns cachedir's "locked" (another mount process has the
// cache directory open) into what to do about it, naming the mount that
// holds it when one recorded it (writeCacheDirFile): the default cache
// directory is one per SERVER:/EXPORT, so the same export mounted twice in
// snfs mode meets it. Other errors are returned as they are.
func explainCacheBusy(err error, cacheDir string) error {
	if !errors.Is(err, cachedir.ErrLocked) {
		return err
	}
	holder := "another snfs-mode mount process"
	if dirs, e := snfsMountPoints(); e == nil {
		for _, d := range dirs {
			if b, e := os.ReadFile(cacheDirFile(d)); e == nil && strings.TrimSpace(string(b)) == cacheDir {
				holder = "the snfs-mode mount on " + d
				break
			}
		}
	}
	return fmt.Errorf("the cache directory %s is in use by %s: one mount at a time uses a cache directory "+
		"(by default one per SERVER:/EXPORT); unmount that one first, or give this mount its own: --cache-dir=DIR (-o cache-dir=DIR)",
		cacheDir, holder)
}

// snfsMountPoints lists the mount points of the fuse.snfs mounts in
// /proc/self/mountinfo.
func snfsMountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		for k := 5; k+1 < len(fields); k++ {
			if fields[k] == "-" {
				if fields[k+1] == "fuse.snfs" {
					dirs = append(dirs, unescapeMountinfo(fields[4]))
				}
				break
			}
		}
	}
	return dirs, sc.Err()
}
