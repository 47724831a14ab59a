package tests

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The spawner: every program the tests run is started by another process,
// not by this one (spawn_test.go's spawnCmd is the tests' exec.Cmd).
//
// Why: a child forked by this process holds a copy of every descriptor of
// this process until its execve, files that tests have open on the
// in-process FUSE mounts among them. Its execve closes them (close-on-exec),
// and each close is a FUSE FLUSH; one served slowly (a mount whose server is
// stopped, partitioned or slow: an nfs-mode FLUSH waits for its COMMIT)
// keeps the child in its execve for as long, and meanwhile its copies of
// the other tests' files keep their mounts busy: unmounts fail, silly-renamed
// files stay behind, launchers answer nothing, /proc reads of the child
// block (CI's TestMountUnlinkOpen, TestMountCloseToOpen, ...; see
// busy_stuck_test.go). The spawner is a re-exec of the test binary started
// by TestMain before any mount, server or file exists; it runs no test and
// holds no FUSE descriptor, only those of the children it is starting, sent
// to it with each request.
//
// Wire: one SOCK_SEQPACKET socket pair, a gob-encoded message per packet
// (gob: arguments and environment are bytes, not always UTF-8). The test
// process sends "start" (the child's descriptors as SCM_RIGHTS) and, once it
// holds the child by a pidfd (os.FindProcess), "ack"; the spawner answers
// "started" (the pid or the error) and, when the child has exited and been
// reaped, "exited" (the wait status). Requests are served concurrently, each
// by a goroutine of its own, so a child slow to start or long running holds
// up no other.

// spawnerEnv, set in the environment of the test binary re-exec'd, makes it
// the spawner (fd 3 its socket).
const spawnerEnv = "SNFS_TEST_SPAWNER"

// maxSpawnMsg bounds a message (environment and arguments included);
// maxSpawnFDs bounds the descriptors sent with one request.
const (
	maxSpawnMsg = 1 << 20
	maxSpawnFDs = 64
)

// spawnReq is a message from the test process.
type spawnReq struct {
	Op   string // "start" or "ack"
	ID   uint64
	Path string
	Args []string
	Env  []string
	Dir  string
	// The SysProcAttr fields the tests use; others are refused by Start.
	Setsid    bool
	Setpgid   bool
	Pdeathsig syscall.Signal
	// Stdin, Stdout, Stderr and Extra index the descriptors sent with
	// the request; -1 is none (/dev/null for the first three, closed for
	// an extra file).
	Stdin, Stdout, Stderr int
	Extra                 []int
}

// spawnMsg is a message from the spawner.
type spawnMsg struct {
	Op     string // "started" or "exited"
	ID     uint64
	Pid    int
	Status uint32 // a syscall.WaitStatus
	Err    string
}

// spawnerChild runs the spawner when this process was started as one; it
// never returns then.
func spawnerChild() bool {
	if os.Getenv(spawnerEnv) == "" {
		return false
	}
	// Its socket is its own: the children do not get it.
	syscall.CloseOnExec(3)
	s := &spawnServer{fd: 3, acks: map[uint64]chan struct{}{}}
	os.Exit(s.serve())
	return true
}

// startSpawner starts this run's spawner. TestMain calls it before anything
// is open.
//
// The spawner dies with this process (Pdeathsig), and the children it
// started with Pdeathsig die with it, as they did when this process started
// them. Pdeathsig is sent when the thread that forked exits, not the
// process: the calling goroutine is locked to its thread for good (TestMain's,
// which lives as long as the process).
func startSpawner() error {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spawner: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "spawner"), os.NewFile(uintptr(pair[1]), "spawner-child")
	defer theirs.Close()
	runtime.LockOSThread()
	cmd := exec.Command(os.Args[0]) //snfs:fork-in-process the spawner itself, before anything is open
	cmd.Env = append(os.Environ(), spawnerEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return fmt.Errorf("spawner: %w", err)
	}
	c := newSpawnClient(mine, cmd.Process.Pid)
	// Reaped when it ends (it does not before this process does unless
	// it fails: then every call reports the spawner gone).
	go func() {
		err := cmd.Wait()
		c.fail(fmt.Errorf("spawner (pid %d) ended: %v", c.pid, err))
	}()
	spawner = c
	return nil
}

// newSpawnClient is the client of the spawner pid on socket f.
func newSpawnClient(f *os.File, pid int) *spawnClient {
	c := &spawnClient{f: f, pid: pid, calls: map[uint64]*spawnCall{}}
	go c.read()
	return c
}

// spawnServer is the spawner's side.
type spawnServer struct {
	fd   int
	smu  sync.Mutex // one send at a time
	mu   sync.Mutex
	acks map[uint64]chan struct{}
}

// serve reads requests until the test process is gone, and returns the
// exit code.
func (s *spawnServer) serve() int {
	buf := make([]byte, maxSpawnMsg)
	oob := make([]byte, unix.CmsgSpace(maxSpawnFDs*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the test process is gone (or closed its end)
		}
		files := receivedFiles(oob[:oobn])
		var req spawnReq
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = fmt.Errorf("request truncated (flags %#x)", flags)
		} else {
			err = spawnDecode(buf[:n], &req)
		}
		if err != nil {
			closeFiles(files)
			fmt.Fprintf(os.Stderr, "snfs/tests spawner: %v\n", err)
			return 2
		}
		switch req.Op {
		case "ack":
			s.mu.Lock()
			if ch := s.acks[req.ID]; ch != nil {
				close(ch)
				delete(s.acks, req.ID)
			}
			s.mu.Unlock()
		case "start":
			ack := make(chan struct{})
			s.mu.Lock()
			s.acks[req.ID] = ack
			s.mu.Unlock()
			go s.start(req, files, ack)
		default:
			closeFiles(files)
		}
	}
}

// receivedFiles are the descriptors of a message's SCM_RIGHTS (received
// close-on-exec: no other child started meanwhile keeps them).
func receivedFiles(oob []byte) []*os.File {
	var files []*os.File
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range cmsgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("fd%d", fd)))
		}
	}
	return files
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// start starts one child, answers with its pid, waits for the test process
// to hold it by a pidfd (only then may its pid be freed) and answers with
// its wait status once it has exited.
//
// The goroutine is locked to its thread and ends without unlocking it, so
// that the thread, the child's parent for Pdeathsig, lives exactly until the
// child is reaped (the thread then exits with the goroutine).
func (s *spawnServer) start(req spawnReq, files []*os.File, ack chan struct{}) {
	runtime.LockOSThread()
	file := func(i int) *os.File {
		if i < 0 || i >= len(files) {
			return nil
		}
		return files[i]
	}
	cmd := &exec.Cmd{Path: req.Path, Args: req.Args, Env: req.Env, Dir: req.Dir}
	if cmd.Env == nil {
		// Empty as sent (gob sends no empty list): not the spawner's.
		cmd.Env = []string{}
	}
	// A nil *os.File in an io.Reader or io.Writer is not a nil interface.
	if f := file(req.Stdin); f != nil {
		cmd.Stdin = f
	}
	if f := file(req.Stdout); f != nil {
		cmd.Stdout = f
	}
	if f := file(req.Stderr); f != nil {
		cmd.Stderr = f
	}
	for _, i := range req.Extra {
		cmd.ExtraFiles = append(cmd.ExtraFiles, file(i))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: req.Setsid, Setpgid: req.Setpgid, Pdeathsig: req.Pdeathsig}
	err := cmd.Start()
	// The child has its own copies: pipes see their end when it ends.
	closeFiles(files)
	if err != nil {
		s.mu.Lock()
		delete(s.acks, req.ID)
		s.mu.Unlock()
		s.send(spawnMsg{Op: "started", ID: req.ID, Err: err.Error()})
		return
	}
	s.send(spawnMsg{Op: "started", ID: req.ID, Pid: cmd.Process.Pid})
	<-ack
	m := spawnMsg{Op: "exited", ID: req.ID}
	err = cmd.Wait()
	if ws, ok := childWaitStatus(cmd.ProcessState); ok {
		m.Status = uint32(ws)
	} else if err != nil {
		m.Err = err.Error()
	}
	s.send(m)
}

func (s *spawnServer) send(m spawnMsg) {
	b, _ := spawnEncode(m)
	s.smu.Lock()
	defer s.smu.Unlock()
	for {
		err := unix.Sendmsg(s.fd, b, nil, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return // an error: the test process is gone, and serve returns
		}
	}
}

func childWaitStatus(ps *os.ProcessState) (syscall.WaitStatus, bool) {
	if ps == nil {
		return 0, false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ws, ok
}

// spawnEncode is a message's packet: a gob stream of its own (the type
// first), as each packet is decoded alone.
func spawnEncode(v any) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

func spawnDecode(b []byte, v any) error {
	return gob.NewDecoder(bytes.NewReader(b)).Decode(v)
}
