package docs

import _ "embed"

// OpenAPI is budgetd's API description, docs/openapi.json: the one copy in
// the repository, which the server serves at GET /openapi.json and the
// tests of package api check against the wire types both ways.
//
//go:embed openapi.json
var OpenAPI []byte
