package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/budgetd/budgetd/migrations"
	"github.com/jackc/pgx/v5"
)

// migration is one numbered file of package migrations (tables), or one
// function file (code).
type migration struct {
	version int
	name    string
	sql     string
	sum     string // sha256 of sql, hex
}

func checksum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// releasedFile is a numbered file as budgetd released it before the runner
// recorded checksums. Every released text of 0001 holds the tables of
// today's 0001_init.sql plus functions; 0002 to 0005 held functions only.
// Functions now live in migrations/functions, re-applied at start-up, so a
// database that applied any of these texts has the tables the current files
// describe, and the runner accepts these checksums for these versions.
type releasedFile struct {
	name string
	// sums of every released text, the last one first: it is what the runner
	// records for a database that applied the file without a checksum.
	sums []string
}

var released = map[int]releasedFile{
	1: {"0001_init.sql", []string{
		"7bac4e485636066d0270e5ae52b6f6c9893c37d23ef66421991af4d67c745ded",
		"5ae594623d8051b0ea178f506518bf3386c51f7acb3686c844f31a6176e4cfbe",
		"bfc22f5f76c434e3072c15482c12e1831cfb41e7f11ca59ea0d8125babb53da8",
		"84da71fb70fa84af639c996079b1a7f2d7efd382f8eaf09019c954f1406222d1",
	}},
	2: {"0002_fillup_one.sql", []string{"88247384aa17369d4c37196d1e48e542f76df031561884e1bc0b19f3d57c0644"}},
	3: {"0003_fillup_seq.sql", []string{"c3767ecc37ea7e00a1fa5a6f93aecd17217609dc8011d97a16afc6d182dfc50c"}},
	4: {"0004_fillup_batch.sql", []string{
		"647bcaf477895d27182dbe4bc4b2e673ed2556eaa65dd1e4ab5bd317bd6e5a22",
		"80fcf3f06d57c8926692bd81eddb2f04998a4bc59e37b9e41f1576023fc94687",
		"f7654257cff526723521ed9244197c344a73a966da7ea71132f3694462c2d963",
		"33f0d5a99f2e5f0dec0b0add6abcba46199be7f6049a2b143fc8daffe393264f",
	}},
	5: {"0005_put_limit_and_drain.sql", []string{"b60fb505a4aaf51759057852180bf07186576cf678b9f8b46ed70e42d5c48381"}},
}

// loadMigrations reads the embedded files NNNN_name.sql in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	seen := map[int]string{}
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", n)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d", other, n, v)
		}
		seen[v] = n
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: n, sql: string(b), sum: checksum(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// loadFunctions reads the function files, in name order, and adds the
// generated one that holds the policy constants and error codes (policy.go).
func loadFunctions() ([]migration, error) {
	names, err := fs.Glob(migrations.Functions, "functions/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		b, err := fs.ReadFile(migrations.Functions, n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{name: path.Base(n), sql: string(b), sum: checksum(string(b))})
	}
	gen := policySQL()
	out = append(out, migration{name: policyFile, sql: gen, sum: checksum(gen)})
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// appliedRow is a row of budgetd_migrations.
type appliedRow struct {
	Version  int32   `db:"version"`
	Name     string  `db:"name"`
	Checksum *string `db:"checksum"`
}

// functionRow is a row of budgetd_functions.
type functionRow struct {
	Name     string `db:"name"`
	Checksum string `db:"checksum"`
}

// migrate brings conn's schema up to date. It holds a session-level
// advisory lock for the schema the whole time, so several budgetd instances
// starting together apply each file exactly once: the others wait, then find
// nothing to do. It checks that every numbered file the database applied is
// unchanged, applies the missing ones (each in its own transaction together
// with the row that records it and its checksum), then re-applies the
// function files if any of them changed since they were last applied.
func migrate(ctx context.Context, conn *pgx.Conn, schema string) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	fns, err := loadFunctions()
	if err != nil {
		return err
	}
	// No statement timeout for migrations; ctx bounds the wait for the lock.
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('budgetd.migrate'), hashtext($1))", schema); err != nil {
		return err
	}
	defer func() {
		// The lock also ends with the session, which the caller closes.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext('budgetd.migrate'), hashtext($1))", schema)
	}()
	if schema != "" {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS budgetd_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now());
	ALTER TABLE budgetd_migrations ADD COLUMN IF NOT EXISTS checksum text;
	CREATE TABLE IF NOT EXISTS budgetd_functions (
		name       text PRIMARY KEY,
		checksum   text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT version, name, checksum FROM budgetd_migrations ORDER BY version")
	if err != nil {
		return err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowToStructByName[appliedRow])
	if err != nil {
		return err
	}
	done := map[int]bool{}
	for _, a := range applied {
		if err := checkApplied(ctx, conn, a, ms); err != nil {
			return err
		}
		done[int(a.Version)] = true
	}
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO budgetd_migrations (version, name, checksum) VALUES ($1, $2, $3)", m.version, m.name, m.sum)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return applyFunctions(ctx, conn, fns)
}

// checkApplied checks one applied numbered file against the files of this
// binary. A row without a checksum (recorded before the runner kept them) of
// a released file gets the checksum of that file's last released text.
func checkApplied(ctx context.Context, conn *pgx.Conn, a appliedRow, ms []migration) error {
	rel, isReleased := released[int(a.Version)]
	if a.Checksum == nil {
		if !isReleased {
			return fmt.Errorf("migration %s (version %d) is recorded without a checksum and is not a released file: the database was not migrated by budgetd", a.Name, a.Version)
		}
		sum := rel.sums[0]
		if _, err := conn.Exec(ctx, "UPDATE budgetd_migrations SET checksum = $2 WHERE version = $1", a.Version, sum); err != nil {
			return err
		}
		a.Checksum = &sum
	}
	i := slices.IndexFunc(ms, func(m migration) bool { return m.version == int(a.Version) })
	if i >= 0 && ms[i].sum == *a.Checksum {
		return nil
	}
	if isReleased && slices.Contains(rel.sums, *a.Checksum) {
		// A released text whose tables are the current files' (see released).
		return nil
	}
	if i < 0 {
		return fmt.Errorf("migration %s (version %d) was applied to this database but this budgetd does not have it: the database was migrated by a newer budgetd", a.Name, a.Version)
	}
	return fmt.Errorf("migration %s was applied with checksum %s but the file now has %s: an applied migration must not be edited (restore migrations/%s and put the change in a new file)",
		ms[i].name, *a.Checksum, ms[i].sum, ms[i].name)
}

// applyFunctions re-creates every function when any function file differs
// from what budgetd_functions says was applied: in one transaction, it
// drops the schema's budgetd_ functions (so that none the files no longer
// define is left, and a changed signature is no conflict), runs every file
// and records their checksums. Other sessions see the old set or the new one.
func applyFunctions(ctx context.Context, conn *pgx.Conn, fns []migration) error {
	rows, err := conn.Query(ctx, "SELECT name, checksum FROM budgetd_functions ORDER BY name COLLATE \"C\"")
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, pgx.RowToStructByName[functionRow])
	if err != nil {
		return err
	}
	same := len(have) == len(fns)
	for i := 0; same && i < len(fns); i++ {
		same = have[i].Name == fns[i].name && have[i].Checksum == fns[i].sum
	}
	if same {
		return nil
	}
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		// The files may call one another in any order.
		if _, err := tx.Exec(ctx, "SET LOCAL check_function_bodies = off"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DO $$
		DECLARE
			f regprocedure;
		BEGIN
			FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
			          WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'budgetd\_%' LOOP
				EXECUTE 'DROP FUNCTION ' || f::text;
			END LOOP;
		END $$`); err != nil {
			return fmt.Errorf("dropping the old functions: %w", err)
		}
		for _, f := range fns {
			if _, err := tx.Exec(ctx, f.sql); err != nil {
				return fmt.Errorf("function file %s: %w", f.name, err)
			}
		}
		if _, err := tx.Exec(ctx, "DELETE FROM budgetd_functions"); err != nil {
			return err
		}
		for _, f := range fns {
			if _, err := tx.Exec(ctx, "INSERT INTO budgetd_functions (name, checksum) VALUES ($1, $2)", f.name, f.sum); err != nil {
				return err
			}
		}
		return nil
	})
}
