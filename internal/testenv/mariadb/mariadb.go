// Package mariadb runs a private mariadbd in a folder of its own, as
// scripts/test starts one: installed with mariadb-install-db, reached over
// loopback TCP by a user with a password that root (over the socket)
// creates. bench/chaos crashes, hangs and restarts it; internal/mysql's
// hung-server test stops it with SIGSTOP. Neither may touch the shared test
// server, so each starts its own.
//
// It does not import testing, so a program (bench/chaos) can use it too.
package mariadb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Server is one private mariadbd. It runs with the server's default
// innodb_flush_log_at_trx_commit=1: a kill -9 loses nothing committed.
type Server struct {
	bin, dir, sock, pass string
	port                 int
	args, asRoot         []string
	cmd                  *exec.Cmd
	exited               chan struct{}
	userMade             bool
}

// New installs a data directory in tmp/mysql (the socket, pid file and log
// beside it) on a free loopback port. args are added to mariadbd's command
// line at each Start (sizes: --innodb-buffer-pool-size=…).
func New(tmp string, args ...string) (*Server, error) {
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
		if _, err := os.Stat(bin); err != nil {
			return nil, errors.New("mariadbd not found: run scripts/install-deps")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: filepath.Join(tmp, "mysql"), sock: filepath.Join(tmp, "mysql.sock"), port: port,
		pass: hex.EncodeToString(b[:]), args: args}
	if os.Geteuid() == 0 {
		s.asRoot = []string{"--user=root"}
	}
	install := exec.Command("mariadb-install-db", append([]string{"--no-defaults", "--datadir=" + s.dir,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, s.asRoot...)...)
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %v: %s", err, tail(out))
	}
	return s, nil
}

// URL is the mysql:// URL of budgetd's user and database.
func (s *Server) URL() string {
	return fmt.Sprintf("mysql://budgetd:%s@127.0.0.1:%d/budgetd", s.pass, s.port)
}

// Process is the running server's process (nil before Start).
func (s *Server) Process() *os.Process {
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process
}

// Start runs the server, waits (up to 2 minutes, or until ctx ends) until
// it answers, and the first time makes budgetd's user and database.
func (s *Server) Start(ctx context.Context) error {
	lf, err := os.OpenFile(s.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	s.cmd = exec.Command(s.bin, append(append([]string{"--no-defaults", "--datadir=" + s.dir, "--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(s.port), "--socket=" + s.sock, "--pid-file=" + s.dir + ".pid", "--skip-name-resolve"},
		s.args...), s.asRoot...)...)
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(s.cmd, s.exited)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for exec.Command("mariadb-admin", "--no-defaults", "--socket="+s.sock, "-uroot", "ping").Run() != nil {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(s.dir + ".log")
			return fmt.Errorf("mariadbd exited: %s", tail(log))
		case <-ctx.Done():
			return errors.New("timed out after 2m0s waiting for mariadb to accept connections")
		case <-tick.C:
		}
	}
	if s.userMade {
		return nil
	}
	sql := fmt.Sprintf("CREATE USER 'budgetd'@'127.0.0.1' IDENTIFIED BY '%s'; GRANT ALL PRIVILEGES ON budgetd.* TO 'budgetd'@'127.0.0.1'; CREATE DATABASE budgetd;", s.pass)
	if out, err := exec.Command("mariadb", "--no-defaults", "--socket="+s.sock, "-uroot", "-e", sql).CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb: create budgetd's user: %v: %s", err, out)
	}
	s.userMade = true
	return nil
}

// Kill kills the server with SIGKILL and waits until it has exited.
func (s *Server) Kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("mariadb: not started")
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	return nil
}

// Pause stops the server with SIGSTOP (on) or resumes it with SIGCONT.
func (s *Server) Pause(on bool) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("mariadb: not started")
	}
	if on {
		return s.cmd.Process.Signal(syscall.SIGSTOP)
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

// Stop resumes the server if it was paused, asks it to shut down, and kills
// it if it has not exited within 30 seconds.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.Kill()
		}
	}
}

// tail is the last 2000 bytes of out, where the cause of a failure is.
func tail(out []byte) []byte {
	if len(out) > 2000 {
		return out[len(out)-2000:]
	}
	return out
}
