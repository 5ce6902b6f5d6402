"""The Kubernetes client on a test's cluster, through the kubeconfig of its environment (env["KUBECONFIG"])."""

from __future__ import annotations

from typing import Any


def api(env: dict[str, str]) -> Any:
    from kubernetes import config

    return config.new_client_from_config(env["KUBECONFIG"])


def core(env: dict[str, str]) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api(env))


def custom(env: dict[str, str]) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api(env))
