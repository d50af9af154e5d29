//go:build tools

// Package tools names the commands this module builds, so `go mod tidy` keeps their
// dependencies: etcd (its main is ours, in cmd/etcd) and the three control-plane commands of
// k8s.io/kubernetes, built with `go build k8s.io/kubernetes/cmd/...` from this module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
