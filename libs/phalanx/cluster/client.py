"""Building a kubernetes ApiClient for the services, from a kubeconfig file or the pod's service account."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import kubernetes.client


def api_client(kubeconfig: str = "") -> kubernetes.client.ApiClient:
    """A client for `kubeconfig`; an empty path means in-cluster configuration (the service account)."""
    import kubernetes.client
    import kubernetes.config

    if kubeconfig:
        return kubernetes.config.new_client_from_config(config_file=kubeconfig)
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)
