package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spawnCmd is the part of exec.Cmd the tests use, its program started by
// the spawner (spawner_test.go: why this process forks nothing). command
// and commandContext replace exec.Command and exec.CommandContext; Wait's
// error for a child that failed is an *exitError, as exec's *ExitError.
type spawnCmd struct {
	Path        string
	Args        []string
	Env         []string
	Dir         string
	Stdin       io.Reader
	Stdout      io.Writer
	Stderr      io.Writer
	ExtraFiles  []*os.File
	SysProcAttr *syscall.SysProcAttr // Setsid, Setpgid, Pdeathsig only
	// WaitDelay bounds, once the child has exited (or the context is
	// done), the wait for its output copies, as exec.Cmd's does.
	WaitDelay time.Duration

	// Process is the child (by pidfd: Pid, Signal and Kill work; Wait is
	// spawnCmd's), ProcessState its exit once Wait has returned.
	Process      *os.Process
	ProcessState *procState

	// Err is the error of the program's look-up, returned by Start.
	Err error

	via        *spawnClient // the spawner, if not this run's
	ctx        context.Context
	call       *spawnCall
	afterStart []*os.File // the child's ends of pipes: closed once it has its copies
	afterWait  []io.Closer
	copies     []func() error
	copyErr    chan error
	killedCtx  chan error // the context's error if it was done before the child exited
	exited     chan struct{}
}

// command is exec.Command through the spawner.
func command(name string, args ...string) *spawnCmd {
	c := &spawnCmd{Path: name, Args: append([]string{name}, args...)}
	if filepath.Base(name) == name {
		lp, err := exec.LookPath(name)
		if lp != "" {
			c.Path = lp
		}
		c.Err = err
	}
	return c
}

// commandContext is exec.CommandContext through the spawner: the child is
// killed when ctx is done before it exits.
func commandContext(ctx context.Context, name string, args ...string) *spawnCmd {
	if ctx == nil {
		panic("nil Context")
	}
	c := command(name, args...)
	c.ctx = ctx
	return c
}

// String is the command line, as exec.Cmd's.
func (c *spawnCmd) String() string {
	b := new(strings.Builder)
	b.WriteString(c.Path)
	for _, a := range c.Args[1:] {
		b.WriteByte(' ')
		b.WriteString(a)
	}
	return b.String()
}

// Run starts the child and waits for it.
func (c *spawnCmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Output runs the child and returns its standard output.
func (c *spawnCmd) Output() ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("exec: Stdout already set")
	}
	var stdout, stderr bytes.Buffer
	c.Stdout = &stdout
	capture := c.Stderr == nil
	if capture {
		c.Stderr = &stderr
	}
	err := c.Run()
	var ee *exitError
	if capture && errors.As(err, &ee) {
		ee.Stderr = stderr.Bytes()
	}
	return stdout.Bytes(), err
}

// CombinedOutput runs the child and returns its standard output and error
// together.
func (c *spawnCmd) CombinedOutput() ([]byte, error) {
	if c.Stdout != nil || c.Stderr != nil {
		return nil, errors.New("exec: Stdout or Stderr already set")
	}
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	return b.Bytes(), err
}

// StdinPipe is a pipe to the child's standard input, closed by Wait.
func (c *spawnCmd) StdinPipe() (io.WriteCloser, error) {
	if c.Stdin != nil {
		return nil, errors.New("exec: Stdin already set")
	}
	if c.Process != nil {
		return nil, errors.New("exec: StdinPipe after process started")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.Stdin = pr
	c.afterStart = append(c.afterStart, pr)
	w := &closeOnce{File: pw}
	c.afterWait = append(c.afterWait, w)
	return w, nil
}

// StdoutPipe is a pipe from the child's standard output, closed by Wait.
func (c *spawnCmd) StdoutPipe() (io.ReadCloser, error) {
	if c.Stdout != nil {
		return nil, errors.New("exec: Stdout already set")
	}
	if c.Process != nil {
		return nil, errors.New("exec: StdoutPipe after process started")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.Stdout = pw
	c.afterStart = append(c.afterStart, pw)
	c.afterWait = append(c.afterWait, pr)
	return pr, nil
}

// StderrPipe is a pipe from the child's standard error, closed by Wait.
func (c *spawnCmd) StderrPipe() (io.ReadCloser, error) {
	if c.Stderr != nil {
		return nil, errors.New("exec: Stderr already set")
	}
	if c.Process != nil {
		return nil, errors.New("exec: StderrPipe after process started")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.Stderr = pw
	c.afterStart = append(c.afterStart, pw)
	c.afterWait = append(c.afterWait, pr)
	return pr, nil
}

type closeOnce struct {
	*os.File
	once sync.Once
	err  error
}

func (c *closeOnce) Close() error {
	c.once.Do(func() { c.err = c.File.Close() })
	return c.err
}

// Start has the spawner start the child, and returns once it has (its
// execve done) or failed to.
func (c *spawnCmd) Start() error {
	if c.Process != nil {
		return errors.New("exec: already started")
	}
	fail := func(err error) error {
		closeFiles(c.afterStart)
		c.afterStart = nil
		for _, cl := range c.afterWait {
			cl.Close()
		}
		c.afterWait = nil
		return err
	}
	if c.Err != nil {
		return fail(c.Err)
	}
	if c.ctx != nil {
		if err := c.ctx.Err(); err != nil {
			return fail(err)
		}
	}
	req := spawnReq{Op: "start", Path: c.Path, Args: c.Args, Env: c.Env, Dir: c.Dir}
	if req.Env == nil {
		req.Env = os.Environ()
		if c.Dir != "" {
			// As exec.Cmd: PWD names the directory the child starts in.
			pwd := c.Dir
			if !filepath.IsAbs(pwd) {
				wd, _ := os.Getwd()
				pwd = filepath.Join(wd, pwd)
			}
			req.Env = append(req.Env, "PWD="+pwd)
		}
	}
	if req.Dir == "" {
		// The spawner's working directory is this process's as it
		// started; the child's is this process's now.
		wd, err := os.Getwd()
		if err != nil {
			return fail(fmt.Errorf("exec: %w", err))
		}
		req.Dir = wd
	}
	if sp := c.SysProcAttr; sp != nil {
		rest := *sp
		rest.Setsid, rest.Setpgid, rest.Pdeathsig = false, false, 0
		if !reflect.DeepEqual(rest, syscall.SysProcAttr{}) {
			return fail(fmt.Errorf("spawn %s: SysProcAttr fields other than Setsid, Setpgid and Pdeathsig are not passed to the spawner: %+v", c.Path, rest))
		}
		req.Setsid, req.Setpgid, req.Pdeathsig = sp.Setsid, sp.Setpgid, sp.Pdeathsig
	}

	var files []*os.File
	add := func(f *os.File) int {
		files = append(files, f)
		return len(files) - 1
	}
	var err error
	if req.Stdin, err = c.stdin(add); err != nil {
		return fail(err)
	}
	if req.Stdout, err = c.writer(c.Stdout, add); err != nil {
		return fail(err)
	}
	if sameWriter(c.Stdout, c.Stderr) {
		req.Stderr = req.Stdout
	} else if req.Stderr, err = c.writer(c.Stderr, add); err != nil {
		return fail(err)
	}
	for _, f := range c.ExtraFiles {
		if f == nil {
			req.Extra = append(req.Extra, -1)
		} else {
			req.Extra = append(req.Extra, add(f))
		}
	}
	sp := c.via
	if sp == nil {
		sp = spawner
	}
	if sp == nil {
		return fail(errors.New("spawn: no spawner (TestMain starts it)"))
	}
	call, err := sp.start(req, files)
	// The child has its copies (or none will have them).
	closeFiles(c.afterStart)
	c.afterStart = nil
	if err != nil {
		c.copies = nil
		return fail(err) // exec's "fork/exec PATH: ...", or the spawner gone
	}
	c.call = call
	c.Process = call.proc
	c.exited = make(chan struct{})
	c.copyErr = make(chan error, len(c.copies))
	for _, fn := range c.copies {
		go func() { c.copyErr <- fn() }()
	}
	if c.ctx != nil {
		c.killedCtx = make(chan error, 1)
		go func() {
			select {
			case <-c.ctx.Done():
				c.Process.Kill()
				c.killedCtx <- c.ctx.Err()
			case <-c.exited:
				c.killedCtx <- nil
			}
		}()
	}
	return nil
}

// stdin is the index of the child's standard input: Stdin itself, or a
// pipe fed from it.
func (c *spawnCmd) stdin(add func(*os.File) int) (int, error) {
	switch r := c.Stdin.(type) {
	case nil:
		return -1, nil
	case *os.File:
		return add(r), nil
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		c.afterStart = append(c.afterStart, pr)
		c.afterWait = append(c.afterWait, &closeOnce{File: pw})
		w := c.afterWait[len(c.afterWait)-1].(*closeOnce)
		c.copies = append(c.copies, func() error {
			_, err := io.Copy(w, r)
			// As exec.Cmd: a child that does not read all of its
			// input is not an error.
			if errors.Is(err, syscall.EPIPE) {
				err = nil
			}
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			return err
		})
		return add(pr), nil
	}
}

// writer is the index of a child's output: w itself, or a pipe copied to
// it.
func (c *spawnCmd) writer(w io.Writer, add func(*os.File) int) (int, error) {
	switch f := w.(type) {
	case nil:
		return -1, nil
	case *os.File:
		return add(f), nil
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		c.afterStart = append(c.afterStart, pw)
		c.afterWait = append(c.afterWait, pr)
		c.copies = append(c.copies, func() error {
			_, err := io.Copy(w, pr)
			pr.Close()
			return err
		})
		return add(pw), nil
	}
}

// sameWriter reports whether the two are one writer (CombinedOutput's), as
// exec.Cmd does, which then gives the child one descriptor for both.
func sameWriter(a, b io.Writer) (eq bool) {
	if a == nil || b == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			eq = false // not comparable
		}
	}()
	return a == b
}

// Wait waits for the child to exit and for its output to be copied.
func (c *spawnCmd) Wait() error {
	if c.Process == nil {
		return errors.New("exec: not started")
	}
	if c.ProcessState != nil {
		return errors.New("exec: Wait was already called")
	}
	m := <-c.call.exited
	close(c.exited)
	var err error
	if m.Err != "" {
		err = errors.New(m.Err)
	} else {
		c.ProcessState = &procState{pid: c.Process.Pid, ws: syscall.WaitStatus(m.Status)}
		if !c.ProcessState.Success() {
			err = &exitError{procState: c.ProcessState}
		}
	}
	if c.killedCtx != nil {
		if kerr := <-c.killedCtx; err == nil && kerr != nil {
			err = kerr
		}
	}
	if cerr := c.awaitCopies(); err == nil {
		err = cerr
	}
	for _, cl := range c.afterWait {
		cl.Close()
	}
	c.afterWait = nil
	return err
}

// awaitCopies waits for the copies of the child's input and output, for
// WaitDelay at most when it is set (then it closes their pipes).
func (c *spawnCmd) awaitCopies() error {
	var first error
	var timeout <-chan time.Time
	if c.WaitDelay > 0 {
		t := time.NewTimer(c.WaitDelay)
		defer t.Stop()
		timeout = t.C
	}
	for range c.copies {
		select {
		case err := <-c.copyErr:
			if first == nil {
				first = err
			}
		case <-timeout:
			for _, cl := range c.afterWait {
				cl.Close()
			}
			return exec.ErrWaitDelay
		}
	}
	return first
}

// procState is a child's exit, as os.ProcessState.
type procState struct {
	pid int
	ws  syscall.WaitStatus
}

func (p *procState) Pid() int      { return p.pid }
func (p *procState) Sys() any      { return p.ws }
func (p *procState) Exited() bool  { return p.ws.Exited() }
func (p *procState) Success() bool { return p.ws.Exited() && p.ws.ExitStatus() == 0 }

// ExitCode is the exit status, or -1 for a child killed by a signal.
func (p *procState) ExitCode() int {
	if p == nil {
		return -1
	}
	return p.ws.ExitStatus()
}

// String is as os.ProcessState's: "exit status 1", "signal: killed".
func (p *procState) String() string {
	var s string
	switch ws := p.ws; {
	case ws.Exited():
		s = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s = "signal: " + ws.Signal().String()
	case ws.Stopped():
		s = "stop signal: " + ws.StopSignal().String()
	case ws.Continued():
		s = "continued"
	}
	if p.ws.CoreDump() {
		s += " (core dumped)"
	}
	return s
}

// exitError is a child's unsuccessful exit, as exec.ExitError.
type exitError struct {
	*procState
	Stderr []byte // Output's capture of standard error
}

func (e *exitError) Error() string { return e.procState.String() }

// spawner is this run's spawner (startSpawner).
var spawner *spawnClient

// spawnClient is the test process's side of the spawner.
type spawnClient struct {
	f   *os.File
	pid int

	smu   sync.Mutex // one send at a time
	mu    sync.Mutex
	next  uint64
	calls map[uint64]*spawnCall
	gone  error
}

// spawnCall is one child's messages.
type spawnCall struct {
	id      uint64
	started chan spawnMsg
	exited  chan spawnMsg
	proc    *os.Process
}

// start sends a start request with the child's descriptors and waits for
// the answer; the child is then held by a pidfd before the spawner may reap
// it.
func (c *spawnClient) start(req spawnReq, files []*os.File) (*spawnCall, error) {
	if len(files) > maxSpawnFDs {
		return nil, fmt.Errorf("%d descriptors for one child, at most %d", len(files), maxSpawnFDs)
	}
	call := &spawnCall{started: make(chan spawnMsg, 1), exited: make(chan spawnMsg, 1)}
	c.mu.Lock()
	if c.gone != nil {
		c.mu.Unlock()
		return nil, c.gone
	}
	c.next++
	call.id = c.next
	c.calls[call.id] = call
	c.mu.Unlock()
	req.ID = call.id
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := c.send(req, oob); err != nil {
		c.drop(call.id)
		return nil, err
	}
	// Open until the spawner has its copies (sendmsg made them).
	runtime.KeepAlive(files)
	m := <-call.started
	if m.Err != "" {
		c.drop(call.id)
		return nil, errors.New(m.Err)
	}
	// The child exists (alive or not yet reaped): its pidfd is its, and
	// Kill and Signal cannot reach another process that gets its pid.
	p, err := os.FindProcess(m.Pid)
	if err != nil {
		p = nil
	}
	call.proc = p
	c.send(spawnReq{Op: "ack", ID: call.id}, nil)
	return call, nil
}

func (c *spawnClient) send(req spawnReq, oob []byte) error {
	b, err := spawnEncode(req)
	if err != nil {
		return err
	}
	if len(b) > maxSpawnMsg {
		return fmt.Errorf("spawn request of %d bytes, at most %d", len(b), maxSpawnMsg)
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	for {
		err = unix.Sendmsg(int(c.f.Fd()), b, oob, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("spawner (pid %d): %w", c.pid, err)
	}
	return nil
}

func (c *spawnClient) drop(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

// read routes the spawner's answers to their calls until it is gone.
func (c *spawnClient) read() {
	buf := make([]byte, 64<<10)
	fd := int(c.f.Fd())
	for {
		n, _, flags, _, err := unix.Recvmsg(fd, buf, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && n == 0 {
			err = io.EOF
		}
		if err == nil && flags&unix.MSG_TRUNC != 0 {
			err = errors.New("answer truncated")
		}
		if err != nil {
			c.fail(fmt.Errorf("spawner (pid %d): %w", c.pid, err))
			return
		}
		var m spawnMsg
		if err := spawnDecode(buf[:n], &m); err != nil {
			c.fail(fmt.Errorf("spawner (pid %d): %w", c.pid, err))
			return
		}
		c.mu.Lock()
		call := c.calls[m.ID]
		if m.Op == "exited" {
			delete(c.calls, m.ID)
		}
		c.mu.Unlock()
		switch {
		case call == nil:
		case m.Op == "started":
			call.started <- m
		case m.Op == "exited":
			call.exited <- m
		}
	}
}

// fail ends every call: the spawner is gone.
func (c *spawnClient) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone != nil {
		return
	}
	c.gone = err
	for id, call := range c.calls {
		m := spawnMsg{ID: id, Err: err.Error()}
		select {
		case call.started <- m:
		default:
		}
		select {
		case call.exited <- m:
		default:
		}
		delete(c.calls, id)
	}
}
