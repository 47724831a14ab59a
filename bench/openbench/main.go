// Command openbench measures the consistency protocol's OPEN and CLOSE under
// load (issue 13): many protocol clients on loopback, each with its own
// connection, REGISTERed and serving SNFS_CB, open and close their own files in a
// loop; a fraction of the opens (-conflict) instead open a "hot" file that
// another client holds open for writing with caching, so that the OPEN waits for
// a callback (CB_WRITEBACK_INVALIDATE) to the holder. GETATTR is measured in the
// same run by the same clients on the same files, in phases that alternate with
// the OPEN/CLOSE phases (-reps of each; which goes first alternates too), and
// every figure is the median of the per-phase values.
//
// By default the server runs inside this process (server.New, as `snfs serve`
// configures it: metrics and the RPC observer on, export options
// rw,no_root_squash), serving -dir with its state in -state; its callback round
// trip histogram (snfs_server_consist_callback_seconds) is read from its
// registry. With -addr it measures an external server instead (NFS and MOUNT on
// that one address, as `snfs serve --mount-port` equal to `--nfs-port`), and
// reads that histogram from -metrics-url if given.
//
//	openbench -dir /var/tmp/ob/export -state /var/tmp/ob/state -out results.md
//	openbench -addr 127.0.0.1:22049 -export /srv/x -metrics-url http://127.0.0.1:9100/metrics
//
// Hot files: each is held open for writing, with caching granted, by one client
// (file i by client i mod -clients); a conflicting open takes an armed hot file,
// opens it for reading (the holder is called back; the file becomes
// WRITE_SHARED), and closes it. Re-arming goroutines then close the holder's
// open and open it for writing again until the server grants caching (after the
// recall back-off, 2 s by default). An open that finds no armed hot file is an
// ordinary one; the achieved conflict fraction is reported.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"snfs/bench/internal/stats"
	"snfs/state"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"snfs/client"
	"snfs/metrics"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

var (
	addr       = flag.String("addr", "", "external snfs server host:port (NFS and MOUNT); empty: run the server in this process")
	export     = flag.String("export", "", "export path to MNT (external server)")
	metricsURL = flag.String("metrics-url", "", "external server's /metrics URL, for the callback histogram")
	dir        = flag.String("dir", "/var/tmp/openbench/export", "in-process server: the export directory (made if missing; use a disk file system)")
	stateDir   = flag.String("state", "/var/tmp/openbench/state", "in-process server: its state directory")
	exportOpts = flag.String("export-options", "rw,no_root_squash", "in-process server: export options")
	nClients   = flag.Int("clients", 64, "protocol clients, each with its own connection")
	nFiles     = flag.Int("files", 16, "files per client, in a directory per client (clients*files+hot within the server's descriptor cache, 4096, keeps open_by_handle_at out of the measurement)")
	nHot       = flag.Int("hot", 2560, "hot files (held open for writing by another client) for conflicting opens")
	armers     = flag.Int("armers", 8, "goroutines re-arming hot files")
	conflict   = flag.Float64("conflict", 0.03, "fraction of opens that open a hot file (a callback)")
	mode       = flag.String("mode", "read", "mode of the ordinary OPENs: read or write")
	duration   = flag.Duration("duration", 3*time.Second, "length of each phase")
	ops        = flag.Int("ops", 0, "if > 0: operations per client per phase instead of -duration")
	reps       = flag.Int("reps", 5, "phases of each kind")
	cpuProfile = flag.String("cpuprofile", "", "after the measured phases, profile one more OPEN phase to FILE.open and one GETATTR phase to FILE.getattr")
	backoff    = flag.Duration("backoff", 2100*time.Millisecond, "re-arm a hot file this long after it was called back (the server's recall back-off: 2 s by default)")
	null       = flag.Bool("null", false, "also time NFS NULL against SNFS NULL in each repetition (phases of -duration/3)")
	out        = flag.String("out", "", "write the Markdown results here (default: stdout only)")
	command    = flag.String("command", "", "the command that ran this, for the results file")
	entryBytes = flag.String("entry-bytes", "", "server memory per table entry at 1,000,000 entries, one client per file (from state's BenchmarkEntryMemory)")
	entry3     = flag.String("entry-bytes3", "", "the same with three clients per file")
)

var ctx = context.Background()

// cl is one protocol client.
type cl struct {
	idx       int
	rpc       *sunrpc.Client // SNFS
	nfs       *sunrpc.Client // NFSv3 on the same connection
	id        atomic.Uint64
	files     []nfs3.FH
	cbUnknown atomic.Int64 // callbacks for files that are not hot files
}

// hot is one hot file.
type hot struct {
	fh       nfs3.FH
	holder   *cl
	cbs      atomic.Int64 // callbacks the holder got for it
	cbAt     atomic.Int64 // when the last one arrived (UnixNano)
	held     bool         // the holder has it open for writing (armers only)
	recalled time.Time    // when its holder was last called back (set before it goes to disarmed)
}

var (
	hotByFH   = map[string]*hot{} // read-only once set up
	hotByID   = map[uint64]*hot{} // by fileid, in case a callback's handle differs
	armed     chan *hot
	disarmed  chan *hot
	openMode  state.Mode
	startTime = time.Now()
)

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "openbench: "+f+"\n", a...)
	os.Exit(1)
}

func (c *cl) callback(_ context.Context, _ *sunrpc.Call, r *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.CallbackArgs
	if a.Decode(r) != nil {
		return sunrpc.ErrGarbageArgs
	}
	h := hotByFH[string(a.File)]
	if h == nil && a.Attr != nil {
		h = hotByID[a.Attr.FileID]
	}
	if h != nil {
		h.cbAt.Store(time.Now().UnixNano())
		h.cbs.Add(1)
	} else {
		c.cbUnknown.Add(1)
	}
	res := snfs1.CallbackRes{Status: state.OK}
	res.Encode(w)
	return nil
}

func dial(srvAddr string, i int) *cl {
	c := &cl{idx: i}
	cb := &sunrpc.Program{Name: "snfs_cb", Number: snfs1.CBProgram, Versions: map[uint32][]sunrpc.Proc{snfs1.CBVersion: {
		snfs1.CBProcNull:     {Name: "CB_NULL", Handler: func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil }},
		snfs1.CBProcCallback: {Name: "CB_CALLBACK", Handler: c.callback},
	}}}
	name := fmt.Sprintf("openbench-%d-%d", os.Getpid(), i)
	var verf snfs1.Verifier
	binaryPut(verf[:], uint64(startTime.UnixNano())+uint64(i))
	rpc, err := sunrpc.Dial(ctx, "tcp", srvAddr, snfs1.Program, snfs1.Version, sunrpc.WithPrograms(cb),
		sunrpc.WithOnConnect(func(ctx context.Context, conn *sunrpc.Conn) error {
			var res snfs1.RegisterRes
			err := conn.Call(ctx, snfs1.Program, snfs1.Version, snfs1.ProcRegister, sunrpc.OpaqueAuth{Flavor: sunrpc.AuthNone},
				&snfs1.RegisterArgs{Name: []byte(name), ClientVerf: verf}, &res)
			if err == nil && res.Status != nfs3.OK {
				err = res.Status
			}
			c.id.Store(uint64(res.Client))
			return err
		}))
	if err != nil {
		die("client %d: %v", i, err)
	}
	c.rpc, c.nfs = rpc, rpc.Program(nfs3.Program, nfs3.Version)
	return c
}

func binaryPut(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

func (c *cl) open(fh nfs3.FH, m state.Mode) (*snfs1.OpenRes, error) {
	var res snfs1.OpenRes
	err := c.rpc.Call(ctx, snfs1.ProcOpen, &snfs1.OpenArgs{Client: snfs1.ClientID(c.id.Load()), File: fh, Mode: m}, &res)
	if err == nil && res.Status != nfs3.OK {
		err = res.Status
	}
	return &res, err
}

func (c *cl) close(fh nfs3.FH, m state.Mode) error {
	var res snfs1.CloseRes
	err := c.rpc.Call(ctx, snfs1.ProcClose, &snfs1.CloseArgs{Client: snfs1.ClientID(c.id.Load()), File: fh, Mode: m}, &res)
	if err == nil && res.Status != nfs3.OK {
		err = res.Status
	}
	return err
}

func (c *cl) getattr(fh nfs3.FH) error {
	var res nfs3.GetattrRes
	err := c.nfs.Call(ctx, nfs3.ProcGetattr, &nfs3.FHArgs{FH: fh}, &res)
	if err == nil && res.Status != nfs3.OK {
		err = res.Status
	}
	return err
}

func (c *cl) create(dir nfs3.FH, name string) (nfs3.FH, *nfs3.Fattr) {
	mode := uint32(0o666)
	var res nfs3.CreateRes
	err := c.nfs.Call(ctx, nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Mode: nfs3.Unchecked,
		Attr: nfs3.Sattr{Mode: &mode, Size: new(uint64)}}, &res)
	if err == nil && res.Status != nfs3.OK {
		err = res.Status
	}
	if err != nil || res.Object == nil {
		die("CREATE %s: %v (handle %v)", name, err, res.Object != nil)
	}
	return res.Object, res.Attr
}

func (c *cl) mkdir(dir nfs3.FH, name string) nfs3.FH {
	mode := uint32(0o777)
	var res nfs3.CreateRes
	err := c.nfs.Call(ctx, nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Attr: nfs3.Sattr{Mode: &mode}}, &res)
	if err == nil && res.Status == nfs3.ErrExist {
		var lr nfs3.LookupRes
		err = c.nfs.Call(ctx, nfs3.ProcLookup, &nfs3.DirOpArgs{Dir: dir, Name: name}, &lr)
		if err == nil && lr.Status != nfs3.OK {
			err = lr.Status
		}
		return lr.Object
	}
	if err == nil && res.Status != nfs3.OK {
		err = res.Status
	}
	if err != nil || res.Object == nil {
		die("MKDIR %s: %v", name, err)
	}
	return res.Object
}

// arm keeps hot files armed: it closes the holder's open of a file that was
// called back, waits out the recall back-off (-backoff after the conflicting
// open; the server's default is 2 s), and opens it for writing again; if the
// server grants no caching yet, it closes it and tries again 100 ms later,
// without holding up the other files.
func arm() {
	for h := range disarmed {
		if h.held {
			if err := h.holder.close(h.fh, state.Write); err != nil {
				die("holder CLOSE: %v", err)
			}
			h.held = false
		}
		if wait := time.Until(h.recalled.Add(*backoff)); wait > 0 {
			time.AfterFunc(wait, func() { disarmed <- h })
			continue
		}
		res, err := h.holder.open(h.fh, state.Write)
		rearms.Add(1)
		if err == nil && res.CacheEnabled {
			h.held = true
			armed <- h
			continue
		}
		rearmFails.Add(1)
		if err == nil {
			if err := h.holder.close(h.fh, state.Write); err != nil {
				die("holder CLOSE: %v", err)
			}
		} else if !errors.Is(err, nfs3.ErrJukebox) {
			die("holder OPEN: %v", err)
		}
		time.AfterFunc(100*time.Millisecond, func() { disarmed <- h })
	}
}

var rearms, rearmFails atomic.Int64

// phase results.
type result struct {
	kind                      string
	secs                      float64
	pairs                     int     // OPEN+CLOSE pairs (or GETATTRs)
	plain, conf, getattr      []int64 // latencies, ns
	toCB, cbToReply           []int64 // conflicting OPEN: sent to callback arrival, callback to reply
	wantConf, noArmed, noCB   int
	cacheOff, jukebox, openOK int
	confCached                int
}

func pct(s []int64, p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)) * p)
	if i >= len(s) {
		i = len(s) - 1
	}
	return float64(s[i]) / 1e3 // µs
}

func run(cs []*cl, kind string, d time.Duration) *result {
	var mu sync.Mutex
	r := &result{kind: kind}
	var wg sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c.idx), uint64(time.Now().UnixNano())))
			var l result
			<-start
			i := rng.IntN(len(c.files))
			for n := 0; ; n++ {
				if *ops > 0 && n >= *ops || *ops <= 0 && n%8 == 0 && time.Now().After(deadline) {
					break
				}
				fh := c.files[i%len(c.files)]
				i++
				if kind != "open" {
					t0 := time.Now()
					var err error
					switch kind {
					case "getattr":
						err = c.getattr(fh)
					case "nfsnull":
						err = c.nfs.Call(ctx, nfs3.ProcNull, nil, nil)
					case "snfsnull":
						err = c.rpc.Call(ctx, snfs1.ProcNull, nil, nil)
					}
					if err != nil {
						die("%s: %v", kind, err)
					}
					l.getattr = append(l.getattr, int64(time.Since(t0)))
					l.pairs++
					continue
				}
				if *conflict > 0 && rng.Float64() < *conflict {
					l.wantConf++
					var h *hot
					select {
					case h = <-armed:
					default:
					}
					if h != nil && h.holder == c {
						armed <- h
						h = nil
					}
					if h == nil {
						l.noArmed++
					} else {
						n0 := h.cbs.Load()
						t0 := time.Now()
						res, err := c.open(h.fh, state.Read)
						t1 := time.Now()
						if errors.Is(err, nfs3.ErrJukebox) {
							l.jukebox++
							h.recalled = t0
							disarmed <- h
							continue
						}
						if err != nil {
							die("conflicting OPEN: %v", err)
						}
						if h.cbs.Load() > n0 {
							l.conf = append(l.conf, int64(t1.Sub(t0)))
							cb := h.cbAt.Load()
							l.toCB = append(l.toCB, cb-t0.UnixNano())
							l.cbToReply = append(l.cbToReply, t1.UnixNano()-cb)
						} else {
							l.noCB++
						}
						if res.CacheEnabled {
							l.confCached++ // a write-shared open must not cache
						}
						if err := c.close(h.fh, state.Read); err != nil {
							die("CLOSE after conflicting OPEN: %v", err)
						}
						l.pairs++
						h.recalled = t0
						disarmed <- h
						continue
					}
				}
				t0 := time.Now()
				res, err := c.open(fh, openMode)
				lat := time.Since(t0)
				if errors.Is(err, nfs3.ErrJukebox) {
					l.jukebox++
					continue
				}
				if err != nil {
					die("OPEN: %v", err)
				}
				l.plain = append(l.plain, int64(lat))
				l.openOK++
				if !res.CacheEnabled {
					l.cacheOff++
				}
				if err := c.close(fh, openMode); err != nil {
					die("CLOSE: %v", err)
				}
				l.pairs++
			}
			mu.Lock()
			r.pairs += l.pairs
			r.plain = append(r.plain, l.plain...)
			r.conf = append(r.conf, l.conf...)
			r.getattr = append(r.getattr, l.getattr...)
			r.toCB = append(r.toCB, l.toCB...)
			r.cbToReply = append(r.cbToReply, l.cbToReply...)
			r.wantConf += l.wantConf
			r.noArmed += l.noArmed
			r.noCB += l.noCB
			r.cacheOff += l.cacheOff
			r.jukebox += l.jukebox
			r.openOK += l.openOK
			r.confCached += l.confCached
			mu.Unlock()
		}()
	}
	t0 := time.Now()
	deadline = t0.Add(d)
	close(start)
	wg.Wait()
	r.secs = time.Since(t0).Seconds()
	return r
}

// cbHist returns the server's callback round-trip histogram (all modes summed):
// upper bounds and cumulative counts.
func cbHist(reg *metrics.Registry) (bounds []float64, cum []uint64, err error) {
	type bucket interface {
		GetUpperBound() float64
		GetCumulativeCount() uint64
	}
	add := func(bs []bucket) {
		if bounds == nil {
			for _, b := range bs {
				bounds = append(bounds, b.GetUpperBound())
				cum = append(cum, 0)
			}
		}
		for i, b := range bs {
			if i < len(cum) {
				cum[i] += b.GetCumulativeCount()
			}
		}
	}
	if reg != nil {
		mfs, err := reg.Gatherer().Gather()
		if err != nil {
			return nil, nil, err
		}
		for _, mf := range mfs {
			if mf.GetName() != "snfs_server_consist_callback_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				var bs []bucket
				for _, b := range m.GetHistogram().GetBucket() {
					bs = append(bs, b)
				}
				add(bs)
			}
		}
		return bounds, cum, nil
	}
	if *metricsURL == "" {
		return nil, nil, nil
	}
	resp, err := http.Get(*metricsURL)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if mf := mfs["snfs_server_consist_callback_seconds"]; mf != nil {
		for _, m := range mf.GetMetric() {
			var bs []bucket
			for _, b := range m.GetHistogram().GetBucket() {
				bs = append(bs, b)
			}
			add(bs)
		}
	}
	return bounds, cum, nil
}

// histPct interpolates a percentile linearly within its bucket (the first
// bucket from 0).
func histPct(bounds []float64, cum []uint64, p float64) float64 {
	if len(cum) == 0 || cum[len(cum)-1] == 0 {
		return math.NaN()
	}
	target := p * float64(cum[len(cum)-1])
	lo, prev := 0.0, uint64(0)
	for i, b := range bounds {
		if float64(cum[i]) >= target {
			n := float64(cum[i] - prev)
			return (lo + (b-lo)*(target-float64(prev))/n) * 1e6
		}
		lo, prev = b, cum[i]
	}
	return math.Inf(1) // beyond the last bound
}

func main() {
	flag.Parse()
	switch *mode {
	case "read":
		openMode = state.Read
	case "write":
		openMode = state.Write
	default:
		die("-mode: read or write")
	}
	var reg *metrics.Registry
	srvAddr, exp := *addr, *export
	where := ""
	if srvAddr == "" {
		syscall.Umask(0)
		if err := os.MkdirAll(*dir, 0o777); err != nil {
			die("%v", err)
		}
		os.Chmod(*dir, 0o777)
		if err := os.MkdirAll(*stateDir, 0o700); err != nil {
			die("%v", err)
		}
		o, err := server.ParseOptions(server.DefaultOptions, *exportOpts)
		if err != nil {
			die("-export-options: %v", err)
		}
		reg = metrics.New()
		srv, err := server.New(server.Config{StateDir: *stateDir, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Observer: reg, Metrics: reg,
			Exports: []server.ExportConfig{{Path: *dir, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
		if err != nil {
			die("server: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			die("%v", err)
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			die("%v", err)
		}
		go srv.Serve(ln, pc)
		srvAddr, exp = ln.Addr().String(), *dir
		where = fmt.Sprintf("server in this process (server.New with metrics and observer, as `snfs serve`), export `%s` (options `%s`), state `%s`", *dir, *exportOpts, *stateDir)
	} else {
		where = fmt.Sprintf("external server %s, export `%s`", srvAddr, exp)
	}

	m, err := client.DialMount(ctx, "tcp", srvAddr)
	if err != nil {
		die("mount: %v", err)
	}
	mr, err := m.Mnt(ctx, exp)
	m.Close()
	if err != nil || mr.Status != 0 {
		die("MNT %s: %v %v", exp, err, mr.Status)
	}
	root := nfs3.FH(mr.FH)

	fmt.Fprintf(os.Stderr, "openbench: %d clients, %d files each, %d hot files: setting up\n", *nClients, *nFiles, *nHot)
	cs := make([]*cl, *nClients)
	for i := range cs {
		cs[i] = dial(srvAddr, i)
	}
	// Files: a directory per client, and one for the hot files.
	top := cs[0].mkdir(root, fmt.Sprintf("run-%d", time.Now().Unix()))
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := c.mkdir(top, fmt.Sprint("c", c.idx))
			for j := range *nFiles {
				fh, _ := c.create(d, fmt.Sprint("f", j))
				c.files = append(c.files, fh)
			}
		}()
	}
	wg.Wait()
	hdir := cs[0].mkdir(top, "hot")
	hots := make([]*hot, *nHot)
	for i := range hots {
		h := &hot{holder: cs[i%len(cs)]}
		var a *nfs3.Fattr
		h.fh, a = h.holder.create(hdir, fmt.Sprint("h", i))
		hotByFH[string(h.fh)] = h
		if a != nil {
			hotByID[a.FileID] = h
		}
		hots[i] = h
	}
	armed = make(chan *hot, len(hots))
	disarmed = make(chan *hot, len(hots))
	// Wait for every client's callback path to be verified (caching granted).
	for _, c := range cs {
		for deadline := time.Now().Add(10 * time.Second); ; {
			res, err := c.open(c.files[0], state.Read)
			if err != nil {
				die("OPEN: %v", err)
			}
			c.close(c.files[0], state.Read)
			if res.CacheEnabled {
				break
			}
			if time.Now().After(deadline) {
				die("client %d: OPEN never granted caching", c.idx)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, h := range hots {
		disarmed <- h
	}
	for range *armers {
		go arm()
	}
	for len(armed) < len(hots)*9/10 {
		time.Sleep(50 * time.Millisecond)
	}

	// Warm-up, then the measured phases.
	run(cs, "getattr", *duration/3)
	run(cs, "open", *duration/3)
	var rs, nulls [][2]*result
	for i := range *reps {
		if *null {
			// NFS NULL runs on the connection's reader (Inline), as GETATTR,
			// OPEN and CLOSE do; SNFS NULL on a goroutine of its own.
			order := []string{"nfsnull", "snfsnull"}
			if i%2 == 1 {
				order = []string{"snfsnull", "nfsnull"}
			}
			var pair [2]*result
			for _, k := range order {
				r := run(cs, k, *duration/3)
				pair[map[string]int{"nfsnull": 0, "snfsnull": 1}[k]] = r
				fmt.Fprintf(os.Stderr, "rep %d %-8s %8.0f/s p50 %6.0f µs p99 %6.0f µs\n", i+1, k, float64(r.pairs)/r.secs, pct(r.getattr, .5), pct(r.getattr, .99))
			}
			nulls = append(nulls, pair)
		}
		order := []string{"getattr", "open"}
		if i%2 == 1 {
			order = []string{"open", "getattr"}
		}
		var pair [2]*result
		for _, k := range order {
			r := run(cs, k, *duration)
			if k == "getattr" {
				pair[0] = r
			} else {
				pair[1] = r
			}
			fmt.Fprintf(os.Stderr, "rep %d %-7s %8.0f/s", i+1, k, float64(r.pairs)/r.secs)
			if k == "getattr" {
				fmt.Fprintf(os.Stderr, " p50 %6.0f µs p99 %6.0f µs\n", pct(r.getattr, .5), pct(r.getattr, .99))
			} else {
				fmt.Fprintf(os.Stderr, " OPEN p50 %6.0f µs p99 %6.0f µs, with callback (%d) p50 %6.0f µs p99 %6.0f µs; conflicts wanted %d, none armed %d\n",
					pct(r.plain, .5), pct(r.plain, .99), len(r.conf), pct(r.conf, .5), pct(r.conf, .99), r.wantConf, r.noArmed)
			}
		}
		rs = append(rs, pair)
	}
	bounds, cum, herr := cbHist(reg)
	if *cpuProfile != "" {
		for _, k := range []string{"open", "getattr"} {
			f, err := os.Create(*cpuProfile + "." + k)
			if err != nil {
				die("%v", err)
			}
			pprof.StartCPUProfile(f)
			r := run(cs, k, *duration)
			pprof.StopCPUProfile()
			f.Close()
			fmt.Fprintf(os.Stderr, "profiled %s phase: %.0f/s\n", k, float64(r.pairs)/r.secs)
		}
	}
	report(cs, rs, nulls, bounds, cum, herr, where)
}

func report(cs []*cl, rs, nulls [][2]*result, bounds []float64, cum []uint64, herr error, where string) {
	col := func(f func(g, o *result) float64) float64 {
		var v []float64
		for _, p := range rs {
			v = append(v, f(p[0], p[1]))
		}
		return stats.Median(v)
	}
	gaRate := col(func(g, _ *result) float64 { return float64(g.pairs) / g.secs })
	pairRate := col(func(_, o *result) float64 { return float64(o.pairs) / o.secs })
	ga50 := col(func(g, _ *result) float64 { return pct(g.getattr, .5) })
	ga99 := col(func(g, _ *result) float64 { return pct(g.getattr, .99) })
	op50 := col(func(_, o *result) float64 { return pct(o.plain, .5) })
	op99 := col(func(_, o *result) float64 { return pct(o.plain, .99) })
	cf50 := col(func(_, o *result) float64 { return pct(o.conf, .5) })
	cf99 := col(func(_, o *result) float64 { return pct(o.conf, .99) })
	tc50 := col(func(_, o *result) float64 { return pct(o.toCB, .5) })
	tc99 := col(func(_, o *result) float64 { return pct(o.toCB, .99) })
	cr50 := col(func(_, o *result) float64 { return pct(o.cbToReply, .5) })
	cr99 := col(func(_, o *result) float64 { return pct(o.cbToReply, .99) })
	ratio := col(func(g, o *result) float64 { return pct(o.plain, .5) / pct(g.getattr, .5) })
	var conf, opens, want, noArmed, noCB, cacheOff, jukebox, confCached int
	for _, p := range rs {
		o := p[1]
		conf += len(o.conf)
		opens += o.openOK + len(o.conf) + o.noCB
		want += o.wantConf
		noArmed += o.noArmed
		noCB += o.noCB
		cacheOff += o.cacheOff
		jukebox += o.jukebox
		confCached += o.confCached
	}
	var unknown int64
	for _, c := range cs {
		unknown += c.cbUnknown.Load()
	}
	ok := func(b bool) string {
		if b {
			return "met"
		}
		return "**not met**"
	}
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("# snfs consistency protocol — OPEN/CLOSE benchmark (openbench)\n\n")
	if *command != "" {
		w("Command: `%s` on %s, %d cores (GOMAXPROCS %d).\n", *command, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	} else {
		w("Run on %s, %d cores (GOMAXPROCS %d).\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	w("openbench: `%s`.\n", strings.Join(os.Args[1:], " "))
	w("%s.\n", where)
	w("%d protocol clients on loopback (one TCP connection each, REGISTERed, serving SNFS_CB; all in this process),"+
		" each opening (OPEN_%s) and closing its own %d files in turn, one call at a time; a conflicting open (%.0f%% asked) opens for reading"+
		" one of %d hot files that another client holds open for writing with caching, so the server calls that client back (CB_WRITEBACK_INVALIDATE) before it answers.\n",
		len(cs), strings.ToUpper(*mode), *nFiles, *conflict*100, *nHot)
	w("GETATTR: the same clients on the same files. %d phases of each kind, %v each (after a warm-up of each), GETATTR and OPEN/CLOSE phases alternating, the first alternating too;"+
		" every figure is the median over the phases of that phase's value (throughput, percentile).\n\n", len(rs), *duration)
	w("| measure | value | bound or peer | ratio | target |\n|---|---|---|---|---|\n")
	w("| OPEN+CLOSE pairs/s (all %d clients) | %.0f | GETATTR calls/s: %.0f | %.2f pairs per GETATTR | |\n", len(cs), pairRate, gaRate, pairRate/gaRate)
	w("| OPEN p50 / p99, uncontended, µs | %.0f / %.0f | GETATTR p50 / p99: %.0f / %.0f | %.2f (p50, median of per-phase ratios) / %.2f (p99) | p50 ratio ≤ 1.2: %s |\n",
		op50, op99, ga50, ga99, ratio, op99/ga99, ok(ratio <= 1.2))
	w("| OPEN p50 / p99 with a callback, µs | %.0f / %.0f | uncontended OPEN p50 / p99 | %.2f / %.2f | |\n", cf50, cf99, cf50/op50, cf99/op99)
	w("| conflicting OPEN, client side: sent → callback arrives at the holder, p50 / p99, µs | %.0f / %.0f | | | |\n", tc50, tc99)
	w("| conflicting OPEN, client side: callback arrives → OPEN reply arrives, p50 / p99, µs | %.0f / %.0f | | | |\n", cr50, cr99)
	switch {
	case herr != nil:
		w("| callback round trip (server histogram) | error: %v | | | |\n", herr)
	case len(cum) > 0 && cum[len(cum)-1] > 0:
		w("| callback round trip, server side (snfs_server_consist_callback_seconds: written → answer read; %d callbacks, whole run incl. warm-up; p50 / p99 interpolated in buckets %s), µs | %.0f / %.0f | GETATTR p50 / p99 | %.2f / %.2f | |\n",
			cum[len(cum)-1], bucketList(bounds), histPct(bounds, cum, .5), histPct(bounds, cum, .99), histPct(bounds, cum, .5)/ga50, histPct(bounds, cum, .99)/ga99)
	default:
		w("| callback round trip (server histogram) | not available (external server without -metrics-url) | | | |\n")
	}
	if len(nulls) > 0 {
		var a, b, c, d []float64
		for _, p := range nulls {
			a = append(a, pct(p[0].getattr, .5))
			b = append(b, pct(p[0].getattr, .99))
			c = append(c, pct(p[1].getattr, .5))
			d = append(d, pct(p[1].getattr, .99))
		}
		w("| SNFS NULL p50 / p99 (served on a goroutine per call; OPEN and CLOSE run inline, as GETATTR), µs | %.0f / %.0f | NFS NULL p50 / p99 (served on the connection's reader, as GETATTR): %.0f / %.0f | %.2f / %.2f | |\n",
			stats.Median(c), stats.Median(d), stats.Median(a), stats.Median(b), stats.Median(c)/stats.Median(a), stats.Median(d)/stats.Median(b))
	}
	if *entryBytes != "" {
		v := 0.0
		fmt.Sscan(*entryBytes, &v)
		w("| server memory per table entry at 1,000,000 entries, one client per file (state BenchmarkEntryMemory), bytes | %s | bound 300 | %.2f | ≤ 300: %s |\n", *entryBytes, v/300, ok(v <= 300))
	}
	if *entry3 != "" {
		w("| the same, three clients per file, bytes | %s | | | |\n", *entry3)
	}
	w("\nConflicts: %d opens with a callback out of %d measured opens (%.2f%%); %d conflicting opens wanted, %d found no armed hot file (done as ordinary opens), %d hot-file opens saw no callback,"+
		" %d answered NFS3ERR_JUKEBOX; ordinary opens not granted caching: %d (want 0); conflicting opens granted caching: %d (want 0); callbacks for other files: %d.\n",
		conf, opens, 100*float64(conf)/float64(max(opens, 1)), want, noArmed, noCB, jukebox, cacheOff, confCached, unknown)
	w("Pairs/s counts the measured clients' OPEN+CLOSE pairs only: each conflict also costs the holder a CLOSE and an OPEN (re-arming, by %d goroutines on the same connections, %v after the callback), not counted:"+
		" %d re-arming OPENs in the whole run, %d of them not granted caching (closed and tried again 100 ms later).\n", *armers, *backoff, rearms.Load(), rearmFails.Load())
	w("\nPer phase (pairs/s or GETATTR/s; µs: GETATTR p50/p99 | OPEN p50/p99, with callback p50/p99 (n)):\n\n```\n")
	for i, p := range rs {
		g, o := p[0], p[1]
		w("rep %d  getattr %7.0f/s %5.0f %6.0f | open %7.0f/s %5.0f %6.0f, cb %6.0f %6.0f (%d)\n", i+1,
			float64(g.pairs)/g.secs, pct(g.getattr, .5), pct(g.getattr, .99),
			float64(o.pairs)/o.secs, pct(o.plain, .5), pct(o.plain, .99), pct(o.conf, .5), pct(o.conf, .99), len(o.conf))
	}
	w("```\n")
	fmt.Print(b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			die("%v", err)
		}
	}
}

func bucketList(b []float64) string {
	var s []string
	for _, x := range b {
		if x >= 1e-3 && x <= 0.1 {
			s = append(s, fmt.Sprintf("%gms", x*1e3))
		} else if x < 1e-3 {
			s = append(s, fmt.Sprintf("%gµs", x*1e6))
		}
	}
	return strings.Join(s, ", ") + ", ..."
}
