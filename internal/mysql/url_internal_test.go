package mysql

import (
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	cfg, err := ParseURL("mysql://app:s%40cret@db.example:3307/budget?tls=skip-verify&timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "s@cret" || cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "budget" ||
		cfg.TLSConfig != "skip-verify" || cfg.Timeout != 3*time.Second || !cfg.MultiStatements || !cfg.InterpolateParams {
		t.Errorf("parsed %+v", cfg)
	}
	if !strings.Contains(cfg.Params["sql_mode"], "STRICT_ALL_TABLES") || cfg.Params["time_zone"] != "'+00:00'" {
		t.Errorf("session settings %v: want strict mode and UTC", cfg.Params)
	}
	cfg, err = ParseURL("mysql://app@localhost/budget")
	if err != nil || cfg.Addr != "localhost:3306" {
		t.Errorf("default port: %+v, %v", cfg, err)
	}
	cfg, err = ParseURL("mysql://app:pw@localhost/budget?socket=/run/mysqld/mysqld.sock")
	if err != nil || cfg.Net != "unix" || cfg.Addr != "/run/mysqld/mysqld.sock" {
		t.Errorf("socket: %+v, %v", cfg, err)
	}
	for raw, want := range map[string]string{
		"postgres://u:p@h/db":                  "scheme",
		"mysql://h:3306/db":                    "missing user",
		"mysql://u:p@h:3306/":                  "database name",
		"mysql://u:p@h:3306/a/b":               "database name",
		"mysql://u:p@h/db?tls=maybe":           "tls=",
		"mysql://u:p@h/db?timeout=-1s":         "timeout=",
		"mysql://u:p@h/db?sslmode=disable":     "unknown parameter \"sslmode\"",
		"mysql://u:p@h/db?tls-ca=/nonexistent": "tls-ca",
		"mysql://u:p@/db":                      "missing host",
	} {
		if _, err := ParseURL(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q): %v, want an error saying %q", raw, err, want)
		}
	}
}

func TestSupported(t *testing.T) {
	for v, ok := range map[string]bool{
		"10.11.6-MariaDB-0+deb12u1": true,
		"10.6.0-MariaDB":            true,
		"11.8.2-MariaDB-1":          true,
		"10.5.23-MariaDB":           false,
		"8.0.36":                    true,
		"8.4.0-commercial":          true,
		"5.7.44-log":                false,
		"garbage":                   false,
	} {
		if err := supported(v); (err == nil) != ok {
			t.Errorf("supported(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

// TestServerCheck: settings that would change answers, a read-only server,
// missing privileges and a binary log that would stop the migration half-way
// are refused, each with what to fix.
func TestServerCheck(t *testing.T) {
	all := []string{"GRANT ALL PRIVILEGES ON *.* TO `budgetd`@`%`"}
	ok := server{sqlMode: "STRICT_ALL_TABLES,NO_ZERO_DATE", timeZone: "+00:00", autocommit: true, grants: all}
	if err := ok.check("db"); err != nil {
		t.Fatalf("a good server: %v", err)
	}
	for name, c := range map[string]struct {
		change func(s *server)
		want   string
	}{
		"not strict":     {func(s *server) { s.sqlMode = "NO_ENGINE_SUBSTITUTION" }, "clipped"},
		"ansi quotes":    {func(s *server) { s.sqlMode = "STRICT_ALL_TABLES,ANSI_QUOTES" }, "sql_mode"},
		"time zone":      {func(s *server) { s.timeZone = "SYSTEM" }, "time_zone"},
		"autocommit off": {func(s *server) { s.autocommit = false }, "autocommit"},
		"read-only":      {func(s *server) { s.readOnly = true }, "primary"},
		"no privileges":  {func(s *server) { s.grants = []string{"GRANT USAGE ON *.* TO `u`@`%`"} }, "lacks SELECT, INSERT"},
		"other database": {func(s *server) { s.grants = []string{"GRANT ALL PRIVILEGES ON `other`.* TO `u`@`%`"} }, "GRANT SELECT"},
		"rows only": {func(s *server) {
			s.grants = []string{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT SELECT, INSERT, UPDATE, DELETE ON `db`.* TO `u`@`%`"}
		}, "lacks CREATE, INDEX, ALTER, CREATE ROUTINE"},
		"binary log": {func(s *server) {
			s.logBin = true
			s.grants = []string{"GRANT ALL PRIVILEGES ON `db`.* TO `u`@`%`"}
		}, "log_bin_trust_function_creators"},
	} {
		s := ok
		c.change(&s)
		if err := s.check("db"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, c.want)
		}
	}
	for name, s := range map[string]server{
		"database grant": {grants: []string{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX, ALTER, CREATE ROUTINE, ALTER ROUTINE, EXECUTE ON `db`.* TO `u`@`%`"}},
		"pattern grant":  {grants: []string{"GRANT ALL ON `d\\_%`.* TO `u`@`%`"}},
		"role":           {grants: []string{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT `budgetd_role` TO `u`@`%`"}},
		"migrated":       {logBin: true, migrated: true, grants: []string{"GRANT ALL PRIVILEGES ON `db`.* TO `u`@`%`"}},
		"trusted":        {logBin: true, trustFns: true, grants: []string{"GRANT ALL PRIVILEGES ON `db`.* TO `u`@`%`"}},
	} {
		s.sqlMode, s.timeZone, s.autocommit = "STRICT_TRANS_TABLES", "+00:00", true
		db := "db"
		if name == "pattern grant" {
			db = "d_test"
		}
		if err := s.check(db); err != nil {
			t.Errorf("%s: %v, want it accepted", name, err)
		}
	}
	if likeMatch(`d\_%`, "dxtest") {
		t.Error(`d\_% matched dxtest: an escaped _ is a literal`)
	}
}
