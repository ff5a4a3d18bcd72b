package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// freePort returns a loopback TCP port that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitUntil polls ok until it is true or the deadline passes.
func waitUntil(ctx context.Context, d time.Duration, what string, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !ok() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		case <-t.C:
		}
	}
	return nil
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// store is a database server that the run owns and may crash, hang and
// restart. memory has none.
type store interface {
	URL() string
	Start(ctx context.Context) error
	Kill() error         // kill -9 every process of the server
	Pause(on bool) error // SIGSTOP / SIGCONT
	Stop()
}

// --- PostgreSQL ---------------------------------------------------------

// pgServer runs the postmaster as this process's own child (as the
// postgres user when this runs as root), so that a kill -9 leaves no
// orphan whose PID would keep the data directory locked.
type pgServer struct {
	bin, dir string
	port     int
	cred     *syscall.Credential
	cmd      *exec.Cmd
	exited   chan struct{}
}

func newPG(tmp string) (*pgServer, error) {
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(m) == 0 {
			return nil, errors.New("PostgreSQL server binaries not found: run scripts/install-deps")
		}
		sort.Strings(m)
		initdb = m[len(m)-1]
	}
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		initdb = real
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: filepath.Dir(initdb), dir: filepath.Join(tmp, "pg"), port: port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(tmp, uid, gid); err != nil {
			return nil, err
		}
	}
	out, err := s.command("initdb", "-D", s.dir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	return s, nil
}

func (s *pgServer) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(s.bin, name), args...)
	c.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	if s.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return c
}

func (s *pgServer) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start runs the server with fsync on (a kill -9 must lose nothing that
// was committed) and waits until it accepts connections.
func (s *pgServer) Start(ctx context.Context) error {
	logPath := s.dir + ".log"
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	st, _ := lf.Stat()
	from := st.Size()
	s.cmd = s.command("postgres", "-D", s.dir, "-p", strconv.Itoa(s.port), "-k", filepath.Dir(s.dir),
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300")
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(s.cmd, s.exited)
	return waitUntil(ctx, 120*time.Second, "postgres to accept connections", func() bool {
		b, _ := os.ReadFile(logPath)
		if int64(len(b)) < from {
			return false
		}
		select {
		case <-s.exited:
			return false
		default:
		}
		// A standby is "ready to accept read-only connections".
		return readyRE.Match(b[from:])
	})
}

// pids is the postmaster and its children.
func (s *pgServer) pids() []int {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	pm := s.cmd.Process.Pid
	return append([]int{pm}, children(pm)...)
}

// Kill kills the postmaster and every backend with SIGKILL. The postmaster
// is stopped first, so that it forks no backend between the listing of its
// children and the kill: one forked then would outlive it holding the
// shared memory, and the next start would refuse ("pre-existing shared
// memory block is still in use").
func (s *pgServer) Kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("postgres: not started")
	}
	select {
	case <-s.exited:
		return errors.New("postgres: not running")
	default:
	}
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP)
	ps := s.pids()
	for _, p := range ps {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-s.exited
	// The next start refuses while a killed backend still holds shared memory.
	return waitUntil(context.Background(), 30*time.Second, "postgres processes to exit", func() bool {
		for _, p := range ps[1:] {
			if syscall.Kill(p, 0) == nil && !zombie(p) {
				return false
			}
		}
		return true
	})
}

func (s *pgServer) Pause(on bool) error {
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	ps := s.pids()
	if len(ps) == 0 {
		return errors.New("postgres: not started")
	}
	for _, p := range ps {
		_ = syscall.Kill(p, sig)
	}
	return nil
}

func (s *pgServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.Pause(false)
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.Kill()
		}
	}
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil {
			// pid (comm) state ppid …; comm may hold spaces, so cut at the last ')'.
			s := string(b)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			if len(f) > 1 && f[1] == strconv.Itoa(pid) {
				out = append(out, p)
			}
		}
	}
	return out
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// --- Redis ---------------------------------------------------------------

type redisServer struct {
	dir  string
	port int
	args []string // more arguments (--replicaof …)
	cmd  *exec.Cmd
}

func newRedis(tmp string) (*redisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not found: run scripts/install-deps")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, "redis")
	return &redisServer{dir: dir, port: port}, os.MkdirAll(dir, 0o755)
}

func (s *redisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// start launches redis-server without waiting for it; the channel closes
// when the process exits. Its log goes to redis.log in its directory.
func (s *redisServer) start() chan struct{} {
	exited := make(chan struct{})
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--aof-load-truncated", "no",
		"--maxmemory-policy", "noeviction", "--logfile", s.logPath()}
	s.cmd = exec.Command("redis-server", append(args, s.args...)...)
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, io.Discard
	if err := s.cmd.Start(); err != nil {
		close(exited)
		return exited
	}
	go func(c *exec.Cmd) { _ = c.Wait(); close(exited) }(s.cmd)
	return exited
}

func (s *redisServer) logPath() string { return filepath.Join(s.dir, "redis.log") }

// Start runs Redis as docs/redis.md ("Durability") asks of a money cap: AOF
// with appendfsync always, so that a kill -9 loses nothing acknowledged, and
// aof-load-truncated no, with redis-check-aof --fix run when Redis refuses an
// AOF whose tail a crash tore (repairAOF).
func (s *redisServer) Start(ctx context.Context) error {
	exited := s.start()
	addr := fmt.Sprintf("127.0.0.1:%d", s.port)
	var repairErr error
	err := waitUntil(ctx, 5*time.Minute, "redis to accept connections and load its AOF", func() bool {
		select {
		case <-exited:
			// It could not start: its AOF ends torn (repair it), or, say,
			// the port was not free yet. Again.
			if repairErr = s.repairAOF(); repairErr != nil {
				return true
			}
			exited = s.start()
			return false
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprint(c, "PING\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.HasPrefix(line, "+PONG")
	})
	return errors.Join(repairErr, err)
}

// aofTorn is what Redis logs when it refuses an AOF that ends in the middle
// of a command (aof-load-truncated no).
const aofTorn = "Unexpected end of file reading the append only file"

// repairAOF runs redis-check-aof --fix when the last start refused a torn
// AOF, as an operator's start script does (docs/redis.md, "Durability"). It
// cuts the tail back to the last whole command and, when the tear is inside
// a MULTI/EXEC block (a script's writes), to before that MULTI: Redis
// 7.0's own aof-load-truncated yes cuts inside the block and leaves its
// MULTI open, so that the next load applies the commands after it: a part
// of one script's writes.
func (s *redisServer) repairAOF() error {
	log, err := os.ReadFile(s.logPath())
	if err != nil || !strings.Contains(string(log), aofTorn) {
		return nil // not a torn AOF
	}
	manifest := filepath.Join(s.dir, "appendonlydir", "appendonly.aof.manifest")
	fix := exec.Command("redis-check-aof", "--fix", manifest)
	fix.Stdin = strings.NewReader("y\n")
	out, err := fix.CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-check-aof --fix: %v: %s", err, out)
	}
	// The next start's log begins afresh: an old refusal is not read again.
	return os.Rename(s.logPath(), s.logPath()+"."+strconv.FormatInt(time.Now().UnixNano(), 10))
}

func (s *redisServer) Kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redis: not started")
	}
	// A background AOF rewrite runs in a forked child that holds the
	// listening socket: it dies with the server, as in a crash of the host.
	pids := append([]int{s.cmd.Process.Pid}, children(s.cmd.Process.Pid)...)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return waitUntil(context.Background(), 10*time.Second, "redis to exit", func() bool {
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil && !zombie(p) {
				return false
			}
		}
		return true
	})
}

func (s *redisServer) Pause(on bool) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redis: not started")
	}
	if on {
		return s.cmd.Process.Signal(syscall.SIGSTOP)
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

func (s *redisServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.Kill()
	}
}

// --- budgetd -------------------------------------------------------------

// budgetd is the service under test, run as its own process on a fixed
// port so that a restart after kill -9 serves the same address.
type budgetd struct {
	bin, storeURL string
	port          int
	cmd           *exec.Cmd
	exited        chan struct{}
	extraArgs     []string
}

var readyRE = regexp.MustCompile(`ready to accept (read-only )?connections`)

var servingRE = regexp.MustCompile(`serving on (http://\S+)`)

func (b *budgetd) base() string { return fmt.Sprintf("http://127.0.0.1:%d", b.port) }

func (b *budgetd) Start(ctx context.Context) error {
	args := append([]string{"--addr", fmt.Sprintf("127.0.0.1:%d", b.port), "--store", b.storeURL}, b.extraArgs...)
	b.cmd = exec.Command(b.bin, args...)
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	b.cmd.Stderr = io.Discard
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.exited = make(chan struct{})
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			if !once && servingRE.MatchString(sc.Text()) {
				once = true
				close(serving)
			}
		}
	}()
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(b.cmd, b.exited)
	select {
	case <-serving:
		return nil
	case <-b.exited:
		return errors.New("budgetd exited before serving")
	case <-time.After(60 * time.Second):
		b.Kill()
		return errors.New("budgetd did not serve within 60s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *budgetd) Kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

// rss is budgetd's resident set in bytes.
func (b *budgetd) rss() int64 {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
