"""A kubernetes ApiClient from a kubeconfig file or the pod's service account, for the job controller
(services/controller), which drives the client's generated API classes. The scheduler and the binder do
not load the kubernetes client: they connect through phalanx.kube.connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phalanx.kube.connection import CONNECTION_POOL

if TYPE_CHECKING:
    import kubernetes.client


def api_client(kubeconfig: str = "") -> kubernetes.client.ApiClient:
    """A client for `kubeconfig`; an empty path means in-cluster configuration (the service account)."""
    import kubernetes.client
    import kubernetes.config

    configuration = kubernetes.client.Configuration()
    if kubeconfig:
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    # The client's default pool (5 per core) would discard the connections beyond it after each call, and
    # every new one costs a TLS handshake.
    configuration.connection_pool_maxsize = CONNECTION_POOL
    return kubernetes.client.ApiClient(configuration)
