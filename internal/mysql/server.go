package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Errors of a refused login.
const (
	erAccessDeniedDB = 1044 // no privilege on the database
	erAccessDenied   = 1045 // wrong user or password
)

// requiredPrivileges are what the store needs on its database: the rows
// (SELECT, INSERT, UPDATE, DELETE), the migrations (CREATE, INDEX, ALTER,
// and for budgetd_assert CREATE ROUTINE, ALTER ROUTINE, EXECUTE).
var requiredPrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "INDEX", "ALTER", "CREATE ROUTINE", "ALTER ROUTINE", "EXECUTE"}

// server is what checkServer reads from the server, in one statement.
type server struct {
	version    string
	sqlMode    string // the session's, after the store's settings
	timeZone   string // the session's
	autocommit bool
	readOnly   bool     // read_only or innodb_read_only: a replica
	logBin     bool     // binary logging on
	trustFns   bool     // log_bin_trust_function_creators
	grants     []string // SHOW GRANTS
	migrated   bool     // every migration of this binary is applied
}

// checkServer reads the server's version and settings and the user's
// grants, and refuses (with what to fix) a server the store would give
// other answers on, or could only half-migrate: it runs before any
// migration, so a refusal changes nothing.
func (s *Store) checkServer(ctx context.Context, dbName string) error {
	var sv server
	var grants *sql.Rows
	err := s.db.QueryRowContext(ctx, `SELECT VERSION(), @@SESSION.sql_mode, @@SESSION.time_zone, @@SESSION.autocommit,
		@@GLOBAL.read_only OR @@GLOBAL.innodb_read_only, @@GLOBAL.log_bin, @@GLOBAL.log_bin_trust_function_creators`).
		Scan(&sv.version, &sv.sqlMode, &sv.timeZone, &sv.autocommit, &sv.readOnly, &sv.logBin, &sv.trustFns)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == erAccessDeniedDB:
		return fmt.Errorf("mysql: connect: %w; run as an administrator: GRANT %s ON `%s`.* TO <user>@<host> (docs/mysql.md, Privileges)", err, strings.Join(requiredPrivileges, ", "), dbName)
	case errors.As(err, &me) && me.Number == erAccessDenied:
		return fmt.Errorf("mysql: connect: %w; check the user and password in the URL", err)
	case err != nil:
		return fmt.Errorf("mysql: connect: %w", classify(err))
	}
	if err := supported(sv.version); err != nil {
		return err
	}
	grants, err = s.db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return fmt.Errorf("mysql: read the user's grants (SHOW GRANTS): %w", classify(err))
	}
	for grants.Next() {
		var g string
		if err := grants.Scan(&g); err != nil {
			grants.Close()
			return fmt.Errorf("mysql: SHOW GRANTS: %w", err)
		}
		sv.grants = append(sv.grants, g)
	}
	if err := grants.Close(); err != nil {
		return fmt.Errorf("mysql: SHOW GRANTS: %w", classify(err))
	}
	if sv.migrated, err = upToDate(ctx, s.db); err != nil {
		return err
	}
	return sv.check(dbName)
}

// upToDate says whether every migration of this binary is recorded (so no
// routine has to be created).
func upToDate(ctx context.Context, db *sql.DB) (bool, error) {
	ms, err := schema()
	if err != nil {
		return false, err
	}
	var n int
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'budgetd_mysql_migrations'").Scan(&n)
	if err != nil || n == 0 {
		return false, classify(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM budgetd_mysql_migrations").Scan(&n); err != nil {
		return false, fmt.Errorf("mysql: read budgetd_mysql_migrations: %w", classify(err))
	}
	return n >= len(ms), nil
}

// check says what is wrong with sv for database dbName, and what to do.
func (sv server) check(dbName string) error {
	modes := map[string]bool{}
	for _, m := range strings.Split(sv.sqlMode, ",") {
		modes[strings.TrimSpace(m)] = true
	}
	switch {
	case !modes["STRICT_ALL_TABLES"] && !modes["STRICT_TRANS_TABLES"]:
		return fmt.Errorf("mysql: the session's sql_mode is %q after budgetd set a strict one: something (a proxy, init_connect) overrides it, and without strict mode an out-of-range amount would be clipped rather than refused; let budgetd's SET sql_mode through", sv.sqlMode)
	case modes["PAD_CHAR_TO_FULL_LENGTH"] || modes["ANSI_QUOTES"] || modes["ORACLE"] || modes["NO_BACKSLASH_ESCAPES"]:
		return fmt.Errorf("mysql: the session's sql_mode %q changes how budgetd's statements read: something (a proxy, init_connect) overrides budgetd's SET sql_mode; let it through", sv.sqlMode)
	case sv.timeZone != "+00:00":
		return fmt.Errorf("mysql: the session's time_zone is %q after budgetd set '+00:00': something (a proxy, init_connect) overrides it; let budgetd's SET time_zone through", sv.timeZone)
	case !sv.autocommit:
		return fmt.Errorf("mysql: the session has autocommit off (init_connect or a proxy): a read would keep its snapshot open and later reads would answer from the past; turn autocommit on for budgetd's user")
	case sv.readOnly:
		return fmt.Errorf("mysql: the server is read-only (read_only or innodb_read_only; a replica?): point --store at the primary")
	}
	var missing []string
	have, unknown := privileges(sv.grants, dbName)
	for _, p := range requiredPrivileges {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 && !unknown {
		return fmt.Errorf("mysql: the user lacks %s on database %s; run as an administrator: GRANT %s ON `%s`.* TO <user>@<host> (docs/mysql.md, Privileges)",
			strings.Join(missing, ", "), dbName, strings.Join(requiredPrivileges, ", "), dbName)
	}
	if sv.logBin && !sv.trustFns && !sv.migrated && !have["SUPER"] && !unknown {
		return fmt.Errorf("mysql: the server has binary logging on, so creating budgetd's stored function needs SUPER or log_bin_trust_function_creators=1; set it (SET GLOBAL log_bin_trust_function_creators = 1) or run `budgetd migrate` once as a user with SUPER")
	}
	return nil
}

// privileges reads SHOW GRANTS lines into the privileges they give on
// database db (those on *.* included). unknown is true when a line grants
// a role, whose privileges SHOW GRANTS does not list: then nothing is
// known missing.
func privileges(grants []string, db string) (have map[string]bool, unknown bool) {
	have = map[string]bool{}
	for _, g := range grants {
		rest, ok := strings.CutPrefix(g, "GRANT ")
		if !ok {
			continue
		}
		privs, target, ok := strings.Cut(rest, " ON ")
		if !ok {
			unknown = true // GRANT role TO user
			continue
		}
		target, _, _ = strings.Cut(target, " TO ")
		if strings.HasPrefix(target, "FUNCTION ") || strings.HasPrefix(target, "PROCEDURE ") || strings.HasPrefix(target, "PACKAGE ") {
			continue
		}
		dbPart, table, ok := splitTarget(target)
		if !ok || table != "*" || !(dbPart == "*" || likeMatch(dbPart, db)) {
			continue
		}
		for _, p := range splitPrivileges(privs) {
			if p == "ALL" || p == "ALL PRIVILEGES" {
				for _, r := range requiredPrivileges {
					have[r] = true
				}
				if dbPart == "*" {
					have["SUPER"] = true
				}
				continue
			}
			have[p] = true
		}
	}
	return have, unknown
}

// splitTarget splits `db`.`table`, `db`.* or *.* into its unquoted parts.
func splitTarget(t string) (db, table string, ok bool) {
	part := func(s string) (string, string, bool) {
		if strings.HasPrefix(s, "*") {
			return "*", s[1:], true
		}
		q := s[:1]
		if q != "`" && q != "'" && q != `"` {
			name, rest, _ := strings.Cut(s, ".")
			if rest != "" || strings.Contains(s, ".") {
				rest = "." + rest
			}
			return name, rest, true
		}
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i:i+1] == q {
				if i+1 < len(s) && s[i+1:i+2] == q {
					b.WriteString(q)
					i++
					continue
				}
				return b.String(), s[i+1:], true
			}
			b.WriteByte(s[i])
		}
		return "", "", false
	}
	t = strings.TrimSpace(t)
	if t == "" {
		return "", "", false
	}
	db, rest, ok := part(t)
	if !ok || !strings.HasPrefix(rest, ".") || len(rest) < 2 {
		return "", "", false
	}
	table, rest, ok = part(rest[1:])
	return db, table, ok && strings.TrimSpace(rest) == ""
}

// splitPrivileges splits "SELECT, INSERT (a, b), CREATE ROUTINE" at its
// top-level commas; a privilege on columns only is left out.
func splitPrivileges(s string) []string {
	var out []string
	depth, start := 0, 0
	add := func(p string) {
		p = strings.ToUpper(strings.TrimSpace(p))
		if p != "" && !strings.Contains(p, "(") {
			out = append(out, p)
		}
	}
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				add(s[start:i])
				start = i + 1
			}
		}
	}
	add(s[start:])
	return out
}

// likeMatch matches name against a grant's database pattern: % any run, _
// any one character, \ escapes the next one.
func likeMatch(pattern, name string) bool {
	if pattern == "" {
		return name == ""
	}
	switch c := pattern[0]; c {
	case '%':
		for i := 0; i <= len(name); i++ {
			if likeMatch(pattern[1:], name[i:]) {
				return true
			}
		}
		return false
	case '_':
		return name != "" && likeMatch(pattern[1:], name[1:])
	case '\\':
		if len(pattern) > 1 {
			return name != "" && name[0] == pattern[1] && likeMatch(pattern[2:], name[1:])
		}
	}
	return name != "" && name[0] == pattern[0] && likeMatch(pattern[1:], name[1:])
}
