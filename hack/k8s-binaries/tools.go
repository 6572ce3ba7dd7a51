//go:build tools

// Package tools records the main packages built by ../build-k8s-binaries.sh so that
// `go mod tidy` keeps everything they need in go.mod/go.sum. It is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
