package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// helperName is the name under which mount(8) runs this binary for file
// systems of type snfs (`mount -t snfs`, an /etc/fstab line of type snfs):
// /sbin/mount.snfs, a symbolic link to snfs. For type fuse.snfs (the type the
// kernel lists) it runs /sbin/mount.fuse.snfs the same way (install.go).
const helperName = "mount.snfs"

const helperSynopsis = `mount.snfs SERVER:/EXPORT MOUNTPOINT [-sfnv] [-o OPTS]

mount(8)'s helper for file systems of type snfs and fuse.snfs (install: snfs
install, which links /sbin/mount.snfs and /sbin/mount.fuse.snfs to snfs):
snfs mount -o OPTS SERVER:/EXPORT MOUNTPOINT. -f checks the options and mounts
nothing; -s drops options it does not know; -n and -v are accepted (no mtab is
written).`

// isHelper says whether this process runs as mount.snfs or mount.fuse.snfs.
func isHelper(arg0 string) bool {
	b := filepath.Base(arg0)
	return b == helperName || b == "mount.fuse.snfs"
}

// mountHelper is `mount.snfs SPEC DIR [-sfnv] [-N NS] [-o OPTS] [-t TYPE]`,
// the command line mount(8) gives external helpers ("EXTERNAL HELPERS" in
// mount(8)), run as `snfs mount -o OPTS SPEC DIR`.
func mountHelper(args []string) error {
	var pos, opts []string
	var fake, sloppy bool
	for k := 0; k < len(args); k++ {
		a := args[k]
		switch {
		case a == "-h" || a == "--help":
			fmt.Println("usage: " + helperSynopsis)
			return errHelp
		case a == "-o" || a == "-N" || a == "-t":
			if k+1 == len(args) {
				return helperUsage("%s needs a value", a)
			}
			k++
			switch a {
			case "-o":
				opts = append(opts, args[k])
			case "-N":
				return fmt.Errorf("-N %s: mounting in another namespace is not supported", args[k])
			case "-t":
				if t := args[k]; t != "snfs" && t != "fuse.snfs" {
					return fmt.Errorf("-t %s: this helper mounts type snfs", t)
				}
			}
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, a[2:])
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, c := range a[1:] {
				switch c {
				case 'f':
					fake = true
				case 's':
					sloppy = true
				case 'n', 'v': // no mtab to skip; the mount logs anyway
				default:
					return helperUsage("unknown option -%c", c)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return helperUsage("want SERVER:/EXPORT MOUNTPOINT, got %q", pos)
	}
	o := strings.Join(opts, ",")
	if sloppy {
		var f mountFlags
		var kept []string
		for s := range strings.SplitSeq(o, ",") {
			if err := f.applyOpts(s); err != nil {
				fmt.Fprintf(os.Stderr, "mount.snfs: -s: ignoring %q: %v\n", s, err)
				continue
			}
			kept = append(kept, s)
		}
		o = strings.Join(kept, ",")
	}
	margs := []string{"-o", o, pos[0], pos[1]}
	if fake {
		return checkMountArgs(margs)
	}
	return mountCmd(margs)
}

func helperUsage(format string, a ...any) error {
	fmt.Fprintf(os.Stderr, "mount.snfs: "+format+"\nusage: %s\n", append(a, helperSynopsis)...)
	return errUsage
}
