// Command snfs is the snfs network file server and its FUSE client.
//
//	snfs serve [flags] DIR...     export DIRs over NFSv3 + MOUNT v3
//	snfs mount [flags] SERVER:/EXPORT MOUNTPOINT   mount an export through FUSE
//	snfs umount MOUNTPOINT        unmount, after everything is written back
//	snfs stat [MOUNTPOINT | --metrics ADDR]   per-procedure call counts of a mount or a server
//	snfs status [--json] MOUNTPOINT   connection, unwritten data, permits, log, conflicts of a mount
//	snfs conflicts [--cache-dir D | MOUNTPOINT]   conflicts an snfs mount kept
//	snfs install [--dir DIR]      mount(8)'s helpers for types snfs and fuse.snfs
//	snfs version                  the version and the commit it was built from
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

const usage = `usage: snfs COMMAND [flags]

commands:
  serve [flags] DIR...   export DIRs over NFSv3 + MOUNT v3 (snfs serve -h for its flags)
  mount [flags] SERVER:/EXPORT MOUNTPOINT
                         mount an export through FUSE; --mode=nfs (plain NFSv3,
                         close-to-open), snfs (consistency protocol) or auto
  umount MOUNTPOINT      unmount, once everything is written back
  stat [MOUNTPOINT | --metrics ADDR]
                         per-procedure call counts of the mount on MOUNTPOINT
                         (like nfsstat -c) or of a server started with --metrics
                         ADDR (like nfsstat -s)
  status [--json] MOUNTPOINT
                         whether the mount on MOUNTPOINT reaches its server, the
                         data not yet on it, write-back permits, the modification
                         log and conflicts (like Coda's cfs lsv and cfs listcml)
  conflicts [--cache-dir D | MOUNTPOINT]
                         list the conflicts an snfs-mode mount kept (its data
                         saved beside a file another client changed)
  install [--dir DIR]    link DIR/mount.snfs and DIR/mount.fuse.snfs (DIR: /sbin)
                         to this binary, for mount -t snfs, mount -t fuse.snfs, fstab
  version                print the version and the commit it was built from
                         (also --version, -V)
  help                   print this
`

func main() {
	if isHelper(os.Args[0]) {
		exit(mountHelper(os.Args[1:]))
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "mount":
		err = mountCmd(os.Args[2:])
	case "umount", "unmount":
		err = umountCmd(os.Args[2:])
	case "stat":
		err = stat(os.Args[2:])
	case "status":
		err = status(os.Args[2:])
	case "conflicts":
		err = conflicts(os.Args[2:])
	case "install":
		err = installCmd(os.Args[2:])
	case "version", "--version", "-version", "-V":
		fmt.Println(version())
		return
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		if strings.Contains(os.Args[1], ":/") {
			// `snfs SERVER:/EXPORT MOUNTPOINT -o OPTS`: how fuse3's
			// mount.fuse3 runs the program of type fuse.snfs (found on
			// mount(8)'s PATH) where no mount.fuse.snfs is installed.
			err = mountHelper(os.Args[1:])
			break
		}
		fmt.Fprintf(os.Stderr, "snfs: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	exit(err)
}

// exit ends the process with err's status: 0 for nil or errHelp, 2 for
// errUsage (already explained), 1 with the error printed otherwise.
func exit(err error) {
	switch {
	case errors.Is(err, errHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "snfs:", err)
		os.Exit(1)
	}
}
