// Package docs holds tests that keep budgetd's documents in this folder true to the code.
package docs
