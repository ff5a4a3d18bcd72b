// Package deploy holds what ships budgetd: the systemd unit
// (budgetd.service), the image's /etc/passwd and /etc/group, and the tests
// that build the image from ../Containerfile (scripts/image) and check the
// unit with systemd-analyze. It has no code of its own.
package deploy
