// Command snfs is the snfs network file server (and, later, client).
//
//	snfs serve [flags] DIR...     export DIRs over NFSv3 + MOUNT v3
//	snfs stat --metrics ADDR      per-procedure call counts of a running server
package main

import (
	"fmt"
	"os"
)

const usage = `usage:
  snfs serve [--bind ADDR] [--nfs-port N] [--mount-port N] [--exports FILE] [--state-dir DIR]
             [--export-options OPTS] [--portmap-port N] [--metrics ADDR] [--log-level LEVEL]
             [--write-gather on|off|adaptive] [--write-gather-max-wait DURATION] [DIR...]
  snfs stat --metrics ADDR
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "stat":
		err = stat(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "snfs: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "snfs:", err)
		os.Exit(1)
	}
}
