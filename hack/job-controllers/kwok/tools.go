//go:build tools

// Package tools records the main package built by ../../build-job-controllers.sh so that
// `go mod tidy` keeps everything it needs in go.mod/go.sum. It is never compiled.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
