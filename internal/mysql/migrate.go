package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/migrations"
)

// migration is one numbered file of migrations/mysql.
type migration struct {
	version int
	name    string
	sql     string
	sum     string // sha256 of sql, hex
}

// loadMigrations reads the embedded files mysql/NNNN_name.sql in version
// order.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "mysql/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	seen := map[int]string{}
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("mysql migration %q: name must be NNNN_description.sql", base)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("mysql migrations %q and %q share version %d", other, base, v)
		}
		seen[v] = base
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(b)
		out = append(out, migration{version: v, name: base, sql: string(b), sum: hex.EncodeToString(h[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// lockWait bounds how long a start waits for another instance's migration.
const lockWait = 60 * time.Second

// schema returns the migrations Open applies: every embedded file. The
// upgrade test replaces it to build a database at an older version.
var schema = func() ([]migration, error) { return loadMigrations(migrations.MySQL) }

// migrate brings the database's schema up to date (Migrate).
func migrate(ctx context.Context, db *sql.DB, dbName string) error {
	ms, err := schema()
	if err != nil {
		return err
	}
	return migrateWith(ctx, db, dbName, ms)
}

// migrateWith applies ms. It holds the named lock budgetd.migrate.DATABASE
// (GET_LOCK) on one connection the whole time, so that instances starting
// together apply each file once: the others wait, then find nothing to do.
// It refuses a database whose applied files differ from ms (a changed
// checksum, or a version this binary does not know: a newer budgetd
// migrated it), then applies the missing files in order, recording each
// with its checksum after its last statement.
func migrateWith(ctx context.Context, db *sql.DB, dbName string, ms []migration) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", classify(err))
	}
	defer conn.Close()
	lock := "budgetd.migrate." + dbName
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lock, int(lockWait/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("mysql: migrate: lock: %w", classify(err))
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("mysql: migrate: another budgetd held the migration lock %q for %s; is a migration stuck?", lock, lockWait)
	}
	defer func() {
		// The lock also ends with the session.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", lock)
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS budgetd_mysql_migrations (
		version    INT NOT NULL PRIMARY KEY,
		name       VARCHAR(200) NOT NULL,
		checksum   CHAR(64) CHARACTER SET ascii NOT NULL,
		applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`); err != nil {
		return fmt.Errorf("mysql: migrate: %w (does the user have CREATE privileges on the database?)", classify(err))
	}
	rows, err := conn.QueryContext(ctx, "SELECT version, name, checksum FROM budgetd_mysql_migrations ORDER BY version")
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", classify(err))
	}
	byVersion := map[int]migration{}
	for _, m := range ms {
		byVersion[m.version] = m
	}
	done := map[int]bool{}
	for rows.Next() {
		var v int
		var name, sum string
		if err := rows.Scan(&v, &name, &sum); err != nil {
			rows.Close()
			return err
		}
		m, ok := byVersion[v]
		switch {
		case !ok:
			rows.Close()
			return fmt.Errorf("mysql: migrate: the database has schema version %d (%s), which this budgetd does not know: run the budgetd that migrated it, or a newer one", v, name)
		case m.sum != sum:
			rows.Close()
			return fmt.Errorf("mysql: migrate: %s was applied with checksum %s but this budgetd's file has %s: a released migration must never change", name, sum, m.sum)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	rows.Close()
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("mysql: migration %s: %w (the file is idempotent: fix the cause and start again)", m.name, classify(err))
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO budgetd_mysql_migrations (version, name, checksum) VALUES (?, ?, ?)", m.version, m.name, m.sum); err != nil {
			return fmt.Errorf("mysql: migration %s: %w", m.name, classify(err))
		}
	}
	return nil
}
