// Package docs runs the shell examples of README.md and docs/*.md against a
// served stack, in the order each page gives them, and checks the status of
// every answer. The convention a page follows is in docs/operations.md
// (Examples that run); the test is in docs_test.go.
package docs
