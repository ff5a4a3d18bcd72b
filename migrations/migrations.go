// Package migrations holds the PostgreSQL schema of budgetd, embedded so that
// the binary can apply it itself (see internal/postgres: Migrate and Open
// apply it under an advisory lock).
//
// Tables are data: they change through numbered files NNNN_description.sql
// in this directory, applied in order, each once, in its own transaction. A
// file, once released, is never edited (the runner records its checksum and
// refuses to start when an applied file changed): changes go into a new
// file.
//
// Functions are code: each server-side function lives in one file
// functions/NAME.sql (CREATE OR REPLACE), the only place its text is. The
// runner applies the whole set again whenever any of it changed, after the
// numbered files and under the same lock, and drops the budgetd_ functions
// the set no longer has. Unqualified names resolve through the connection's
// search_path, which the store sets to its schema.
package migrations

import "embed"

// FS holds the numbered migration files.
//
//go:embed *.sql
var FS embed.FS

// Functions holds the function files, functions/NAME.sql.
//
//go:embed functions/*.sql
var Functions embed.FS

// MySQL holds the MySQL/MariaDB schema, mysql/NNNN_description.sql, applied
// in order by internal/mysql under GET_LOCK with the same checksum rule as
// the numbered files above (docs/mysql.md).
//
//go:embed mysql/*.sql
var MySQL embed.FS
