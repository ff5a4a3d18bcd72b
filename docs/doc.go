// Package docs holds budgetd's OpenAPI description (OpenAPI, served by the
// server) and the tests that keep the documents in this folder true to the
// code.
package docs
