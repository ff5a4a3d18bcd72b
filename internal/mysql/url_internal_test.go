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
