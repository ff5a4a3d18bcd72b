// Package migrations holds the PostgreSQL schema of budgetd as numbered SQL
// files, embedded so that the binary can apply them itself (see
// internal/postgres: Migrate and Open apply them under an advisory lock).
//
// Files are named NNNN_description.sql and applied in order, each once, in its
// own transaction. A file, once released, is never edited: changes go into a
// new file. Unqualified names resolve through the connection's search_path,
// which the store sets to its schema.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
