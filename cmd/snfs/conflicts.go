package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"snfs/mount/cachemgr"
)

// conflicts lists the conflicts an snfs-mode mount kept (docs/mount.md,
// "Recovery"): files whose dirty data could not be written back because the
// server's copy had changed, and the names their copies were saved under
// (reason "disconnected": written, or left dirty, while the mount was offline:
// docs/mount.md, "Disconnected operation").
func conflicts(args []string) error {
	fs := newFlagSet("conflicts", "snfs conflicts [--cache-dir D | MOUNTPOINT]")
	cacheDir := fs.String("cache-dir", "", "the mount's cache directory")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *cacheDir != "" && len(pos) == 0:
	case *cacheDir == "" && len(pos) == 1:
		dir, err := filepath.Abs(pos[0])
		if err != nil {
			return err
		}
		if *cacheDir, err = cacheDirOf(dir); err != nil {
			return err
		}
	default:
		fs.Usage()
		return errUsage
	}
	list, err := cachemgr.ReadConflicts(*cacheDir)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Printf("no conflicts in %s\n", *cacheDir)
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tFILE\tOUR VERSION SAVED AS\tSIZE\tUNKNOWN BYTES\tREASON")
	for _, c := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", c.Time.Local().Format(time.DateTime), c.Name, c.Conflict, c.Size, c.Unknown, c.Reason)
	}
	return tw.Flush()
}

// cacheDirFile is where a mount of dir records its cache directory (kept
// after unmount, for snfs conflicts).
func cacheDirFile(dir string) string {
	return strings.TrimSuffix(pidFile(dir), ".pid") + ".cache-dir"
}

// writeCacheDirFile records cacheDir as dir's (best effort).
func writeCacheDirFile(dir, cacheDir string) {
	os.MkdirAll(runDir(), 0o755)
	os.WriteFile(cacheDirFile(dir), []byte(cacheDir+"\n"), 0o644)
}

// cacheDirOf finds the cache directory of the snfs mount on dir: the one its
// mount process recorded, else the default one for the export mounted there.
func cacheDirOf(dir string) (string, error) {
	if b, err := os.ReadFile(cacheDirFile(dir)); err == nil {
		if d := strings.TrimSpace(string(b)); d != "" {
			return d, nil
		}
	}
	e, ok, err := mountAt(dir)
	if err != nil {
		return "", err
	}
	if host, export, found := strings.Cut(e.source, ":"); ok && found {
		return defaultCacheDir(host, export), nil
	}
	return "", fmt.Errorf("%s: no snfs mount there and no cache directory recorded for it: use --cache-dir", dir)
}
