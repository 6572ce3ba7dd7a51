"""Test support: real servers on loopback ports for tests and simulations.

`phalanx.testing.redis_server.RedisServer` starts a redis-server; `phalanx.testing.apiserver.LocalApiServer`
starts etcd + kube-apiserver (built by hack/build-k8s-binaries.sh).
"""
