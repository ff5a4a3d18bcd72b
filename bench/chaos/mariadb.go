package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// mariadbServer is a private mariadbd in the run's directory, as
// scripts/test starts one: installed with mariadb-install-db, reached over
// loopback TCP by a user with a password that root (over the socket)
// creates. It runs with innodb_flush_log_at_trx_commit=1 (the server's
// default): a kill -9 must lose nothing that was committed.
type mariadbServer struct {
	bin, dir, sock, pass string
	port                 int
	asRoot               []string
	cmd                  *exec.Cmd
	exited               chan struct{}
	userMade             bool
}

func newMariaDB(tmp string) (*mariadbServer, error) {
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
		if _, err := os.Stat(bin); err != nil {
			return nil, errors.New("mariadbd not found: run scripts/install-deps")
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s := &mariadbServer{bin: bin, dir: filepath.Join(tmp, "mysql"), sock: filepath.Join(tmp, "mysql.sock"), port: port, pass: hex.EncodeToString(b[:])}
	if os.Geteuid() == 0 {
		s.asRoot = []string{"--user=root"}
	}
	install := exec.Command("mariadb-install-db", append([]string{"--no-defaults", "--datadir=" + s.dir,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, s.asRoot...)...)
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %v: %s", err, tail(string(out), 2000))
	}
	return s, nil
}

func (s *mariadbServer) URL() string {
	return fmt.Sprintf("mysql://budgetd:%s@127.0.0.1:%d/budgetd", s.pass, s.port)
}

// Start runs the server, waits until it answers, and the first time makes
// budgetd's user and database.
func (s *mariadbServer) Start(ctx context.Context) error {
	lf, err := os.OpenFile(s.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	s.cmd = exec.Command(s.bin, append([]string{"--no-defaults", "--datadir=" + s.dir, "--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(s.port), "--socket=" + s.sock, "--pid-file=" + s.dir + ".pid", "--skip-name-resolve",
		"--innodb-buffer-pool-size=128M", "--max-connections=500"}, s.asRoot...)...)
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(s.cmd, s.exited)
	err = waitUntil(ctx, 2*time.Minute, "mariadb to accept connections", func() bool {
		select {
		case <-s.exited:
			return false
		default:
		}
		return exec.Command("mariadb-admin", "--no-defaults", "--socket="+s.sock, "-uroot", "ping").Run() == nil
	})
	if err != nil || s.userMade {
		return err
	}
	sql := fmt.Sprintf("CREATE USER 'budgetd'@'127.0.0.1' IDENTIFIED BY '%s'; GRANT ALL PRIVILEGES ON budgetd.* TO 'budgetd'@'127.0.0.1'; CREATE DATABASE budgetd;", s.pass)
	if out, err := exec.Command("mariadb", "--no-defaults", "--socket="+s.sock, "-uroot", "-e", sql).CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb: create budgetd's user: %v: %s", err, out)
	}
	s.userMade = true
	return nil
}

func (s *mariadbServer) Kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("mariadb: not started")
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	return nil
}

func (s *mariadbServer) Pause(on bool) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("mariadb: not started")
	}
	if on {
		return s.cmd.Process.Signal(syscall.SIGSTOP)
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

func (s *mariadbServer) Stop() {
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
