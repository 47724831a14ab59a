package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"snfs/gather"
	"snfs/metrics"
	"snfs/store"
	"snfs/sunrpc"
)

// Options are an export's options for one set of clients (exports(5) names).
type Options struct {
	ReadOnly   bool
	RootSquash bool
	AllSquash  bool
	AnonUID    uint32
	AnonGID    uint32
	Async      bool // reply to namespace operations before they are on disk
	// Secure refuses calls from source ports at or above 1024, as knfsd does for
	// its default "secure". snfs defaults to insecure, as nfs-ganesha does: the
	// port proves nothing on a network where anyone can be root on a client, and
	// user-space clients (libnfs) use unprivileged ports.
	Secure bool
}

// DefaultOptions are exports(5)'s defaults: ro, root_squash, sync, anon 65534.
var DefaultOptions = Options{ReadOnly: true, RootSquash: true, AnonUID: 65534, AnonGID: 65534}

// ClientRule grants the clients in Net (nil: every client) access with Opts.
type ClientRule struct {
	Spec string // as written: "*", an address or a CIDR
	Net  *net.IPNet
	Opts Options
}

// ExportConfig is one exported directory and who may mount it.
type ExportConfig struct {
	Path    string
	Clients []ClientRule
}

// ErrExportOption is wrapped by every error about an export option.
var ErrExportOption = errors.New("unknown export option")

// ParseOptions applies a comma-separated exports(5) option list to base.
func ParseOptions(base Options, list string) (Options, error) {
	o := base
	if list == "" {
		return o, nil
	}
	for _, opt := range strings.Split(list, ",") {
		k, v, hasV := strings.Cut(strings.TrimSpace(opt), "=")
		switch k {
		case "ro":
			o.ReadOnly = true
		case "rw":
			o.ReadOnly = false
		case "root_squash":
			o.RootSquash = true
		case "no_root_squash":
			o.RootSquash = false
		case "all_squash":
			o.AllSquash = true
		case "no_all_squash":
			o.AllSquash = false
		case "sync":
			o.Async = false
		case "async":
			o.Async = true
		case "anonuid", "anongid":
			n, err := strconv.ParseUint(v, 10, 32)
			if !hasV || err != nil {
				return o, fmt.Errorf("%w: %s needs a number, got %q", ErrExportOption, k, v)
			}
			if k == "anonuid" {
				o.AnonUID = uint32(n)
			} else {
				o.AnonGID = uint32(n)
			}
		case "secure":
			o.Secure = true
		case "insecure":
			o.Secure = false
		case "no_subtree_check", "subtree_check", "wdelay", "no_wdelay", "hide", "nohide", "crossmnt", "":
			// accepted for compatibility; snfs behaves as with no_subtree_check
		default:
			return o, fmt.Errorf("%w %q", ErrExportOption, k)
		}
	}
	return o, nil
}

// ParseClient parses a client spec: "*", an IP address, or a CIDR.
func ParseClient(spec string) (*net.IPNet, error) {
	if spec == "*" || spec == "" {
		return nil, nil
	}
	if _, n, err := net.ParseCIDR(spec); err == nil {
		return n, nil
	}
	if ip := net.ParseIP(spec); ip != nil {
		bits := 128
		if ip.To4() != nil {
			ip, bits = ip.To4(), 32
		}
		return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}, nil
	}
	return nil, fmt.Errorf("client %q: only *, addresses and CIDR networks are supported", spec)
}

// ParseExports reads an exports(5)-style file: each line is a directory followed by
// client specs with optional parenthesised options, e.g.
//
//	/srv/share 127.0.0.1(rw,no_root_squash) 10.0.0.0/8(ro) *(ro,all_squash)
//
// A directory with no client spec is exported read-only to everyone. '#' starts a
// comment; a trailing backslash continues a line.
func ParseExports(path string) ([]ExportConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseExports(path, f)
}

// parseExports parses exports read from r; name (the file's path) prefixes every
// error with the line it is about.
func parseExports(name string, r io.Reader) ([]ExportConfig, error) {
	var out []ExportConfig
	sc := bufio.NewScanner(r)
	lineNo, pending := 0, ""
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, pending = pending+line, ""
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		ec, err := parseExportLine(fields)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, lineNo, err)
		}
		out = append(out, ec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, lineNo+1, err)
	}
	if pending != "" {
		return nil, fmt.Errorf("%s:%d: the last line ends with a backslash", name, lineNo)
	}
	return out, nil
}

func parseExportLine(fields []string) (ExportConfig, error) {
	ec := ExportConfig{Path: fields[0]}
	if !filepath.IsAbs(ec.Path) {
		return ec, fmt.Errorf("export path %q is not absolute", ec.Path)
	}
	if len(fields) == 1 {
		fields = append(fields, "*")
	}
	for _, f := range fields[1:] {
		spec, opts := f, ""
		if i := strings.IndexByte(f, '('); i >= 0 {
			if !strings.HasSuffix(f, ")") {
				return ec, fmt.Errorf("unbalanced parenthesis in %q", f)
			}
			spec, opts = f[:i], f[i+1:len(f)-1]
		}
		n, err := ParseClient(spec)
		if err != nil {
			return ec, err
		}
		o, err := ParseOptions(DefaultOptions, opts)
		if err != nil {
			return ec, fmt.Errorf("%w for %s", err, f)
		}
		if spec == "" {
			spec = "*"
		}
		ec.Clients = append(ec.Clients, ClientRule{Spec: spec, Net: n, Opts: o})
	}
	return ec, nil
}

// export is an export in service.
type export struct {
	// conf is who may use the export and how: replaced as a whole by an
	// exports reload (reload.go), read once per call.
	conf    atomic.Pointer[exportConf]
	st      *store.Export
	gather  *gather.Gatherer
	metrics *metrics.Export // nil without a registry

	stats gatherStats
}

// exportConf is an export's configuration as one reload left it.
type exportConf struct {
	cfg   ExportConfig
	async bool // every client rule is async: namespace changes never flush
}

// config returns the export's configuration now.
func (e *export) config() *exportConf { return e.conf.Load() }

// setConfig installs ec as the export's configuration.
func (e *export) setConfig(ec ExportConfig) {
	e.conf.Store(&exportConf{cfg: ec, async: allAsync(ec)})
}

// exportTable is the set of exports in service: replaced as a whole by a
// reload, so that a call sees one set or the other.
type exportTable struct {
	list   []*export          // in configuration order
	byID   map[uint32]*export // by store export id
	byPath map[string]*export // by the path as configured and as resolved
}

// allAsync reports whether every client rule of ec is async.
func allAsync(ec ExportConfig) bool {
	for i := range ec.Clients {
		if !ec.Clients[i].Opts.Async {
			return false
		}
	}
	return len(ec.Clients) > 0
}

// rule returns the options for client ip, or false if it may not use the export.
func (e *export) rule(ip net.IP) (*Options, bool) {
	cfg := &e.config().cfg
	for i := range cfg.Clients {
		r := &cfg.Clients[i]
		if r.Net == nil || (ip != nil && r.Net.Contains(ip)) {
			return &r.Opts, true
		}
	}
	return nil, false
}

// access returns the options for c's client, or errAccess if it may not use the
// export, or errInsecurePort if the export is secure and c came from a port at or
// above 1024 (knfsd answers NFS3ERR_PERM there, and mountd MNT3ERR_ACCES).
func (e *export) access(c *sunrpc.Call) (*Options, error) {
	o, ok := e.rule(c.ClientIP())
	if !ok {
		return nil, errAccess
	}
	if o.Secure && c.ClientPort() >= 1024 {
		return nil, errInsecurePort
	}
	return o, nil
}

// credFor maps a call's credential through the export's squashing options.
func credFor(a *sunrpc.AuthSysParams, o *Options) store.Cred {
	anon := store.Cred{UID: o.AnonUID, GID: o.AnonGID}
	if a.Flavor != sunrpc.AuthSys || o.AllSquash {
		return anon
	}
	c := store.Cred{UID: a.UID, GID: a.GID, Groups: append([]uint32(nil), a.GIDs...)}
	if o.RootSquash {
		if c.UID == 0 {
			c.UID = o.AnonUID
		}
		if c.GID == 0 {
			c.GID = o.AnonGID
		}
		for i, g := range c.Groups {
			if g == 0 {
				c.Groups[i] = o.AnonGID
			}
		}
	}
	return c
}
