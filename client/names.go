package client

import (
	"strconv"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// CallNames names the calls of this package's programs for a
// sunrpc.Observer (sunrpc.WithObserver): "nfs", "mount" and "snfs", with
// the procedure names of nfs3.ProcNames, mount3.ProcNames and
// snfs1.ProcNames; any other program or procedure by its number.
func CallNames(prog, vers, proc uint32) (program, procName string) {
	var names []string
	switch prog {
	case nfs3.Program:
		program, names = "nfs", nfs3.ProcNames[:]
	case mount3.Program:
		program, names = "mount", mount3.ProcNames[:]
	case snfs1.Program:
		program, names = "snfs", snfs1.ProcNames[:]
	default:
		program = strconv.FormatUint(uint64(prog), 10)
	}
	if int(proc) < len(names) {
		return program, names[proc]
	}
	return program, strconv.FormatUint(uint64(proc), 10)
}

// WithObserver is sunrpc.WithObserver with CallNames.
func WithObserver(o sunrpc.Observer) sunrpc.DialOption { return sunrpc.WithObserver(o, CallNames) }
