package main

import "github.com/budgetd/budgetd/internal/testenv/mariadb"

// newMariaDB installs a private mariadbd in the run's directory (see
// package mariadb: as scripts/test starts one, with the server's default
// innodb_flush_log_at_trx_commit=1, so a kill -9 must lose nothing that was
// committed), sized for the run's load.
func newMariaDB(tmp string) (*mariadb.Server, error) {
	return mariadb.New(tmp, "--innodb-buffer-pool-size=128M", "--max-connections=500")
}
