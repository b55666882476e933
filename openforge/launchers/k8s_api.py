"""What the Kubernetes launcher makes of the API server's answers: refusals, read-backs, clean-up.

Owns: :func:`refusal` (an ``ApiException`` → its code and the server's own message),
:func:`create_refused` (what a refused create means for the rollout: 422 / 400 / RBAC 403 are
configuration errors, never retried; a 403 for a missing ServiceAccount says so; an exceeded quota
is retried), :func:`wait_service_account`, :func:`apply_network_policy` (create or replace, read
back; spelled port by port when the server dropped ``endPort``; refused when even that is not
what the server stored), :func:`check_resources` (the created pod's requests and limits compared by
value), :func:`delete_labelled` (pods, Secrets and NetworkPolicies of a run, by label).

Every function takes the client's API objects through the small Protocols below and runs in a
worker thread (the client is synchronous).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..core.errors import SandboxError
from ..core.types import RolloutStatus
from .base import SandboxFailure
from .k8s_checks import same_quantities
from .k8s_manifests import egress_ports

__all__ = ["CoreApi", "NetworkingApi", "apply_network_policy", "check_resources", "create_refused",
           "delete_labelled", "refusal", "wait_service_account"]
log = logging.getLogger(__name__)


class CoreApi(Protocol):
    """The part of ``kubernetes.client.CoreV1Api`` used here."""

    def read_namespaced_service_account(self, name: str, namespace: str) -> Any: ...
    def list_namespaced_pod(self, namespace: str, **kw: Any) -> Any: ...
    def delete_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any: ...
    def list_namespaced_secret(self, namespace: str, **kw: Any) -> Any: ...
    def delete_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> Any: ...


class NetworkingApi(Protocol):
    """The part of ``kubernetes.client.NetworkingV1Api`` used here."""

    def create_namespaced_network_policy(self, namespace: str, body: Any) -> Any: ...
    def list_namespaced_network_policy(self, namespace: str, **kw: Any) -> Any: ...
    def delete_namespaced_network_policy(self, name: str, namespace: str, **kw: Any) -> Any: ...


Serialize = Callable[[Any], Any]  # ApiClient.sanitize_for_serialization: a client model → plain dicts


def refusal(e: BaseException) -> tuple[int, str] | None:
    """``(HTTP status, the server's message)`` of a client ``ApiException``; None for anything else."""
    status = getattr(e, "status", None)
    if not isinstance(status, int) or status == 0:
        return None
    body = getattr(e, "body", None)
    try:
        message = str(json.loads(body).get("message") or "")
    except (TypeError, ValueError, AttributeError):
        message = str(body or "")
    return status, (message or str(getattr(e, "reason", "") or "")).strip()


def create_refused(e: BaseException, what: str, namespace: str, service_account: str | None) -> SandboxFailure:
    """The rollout failure a refused create of ``what`` means (see the module docstring)."""
    r = refusal(e)
    if r is None:
        return SandboxFailure(f"cannot create {what}: {e}", RolloutStatus.INFRA_ERROR)
    code, msg = r
    if code == 403 and "service account" in msg.lower():
        return SandboxFailure(_no_service_account(namespace, service_account or "default", msg), RolloutStatus.ENV_ERROR)
    if code == 403 and "exceeded quota" in msg.lower():  # frees up as other pods end: worth a retry
        return SandboxFailure(f"cannot create {what}: the namespace's ResourceQuota is used up (403): {msg}",
                              RolloutStatus.INFRA_ERROR)
    if code in (400, 422):
        return SandboxFailure(f"the Kubernetes API server refused {what} as invalid ({code}; a configuration error, "
                              f"not retried): {msg}", RolloutStatus.ENV_ERROR)
    if code in (401, 403):  # RBAC, a LimitRange's maximum, a policy webhook: retrying cannot help
        return SandboxFailure(f"the Kubernetes API server refused {what} in namespace {namespace} ({code}; not "
                              f"retried): {msg}", RolloutStatus.ENV_ERROR)
    return SandboxFailure(f"cannot create {what} ({code}): {msg}", RolloutStatus.INFRA_ERROR)


def _no_service_account(namespace: str, name: str, said: str = "") -> str:
    return (f"namespace {namespace!r} has no ServiceAccount {name!r}, and the API server refuses pods until it exists "
            f"(403). A cluster's controller manager creates 'default' in every namespace within a second; without one, "
            f"create it: kubectl -n {namespace} create serviceaccount {name}"
            + (" (or pass service_account=)" if name == "default" else "") + (f". The server said: {said}" if said else ""))


def wait_service_account(core: CoreApi, namespace: str, name: str, wait_s: float) -> None:
    """Wait up to ``wait_s`` for the pods' ServiceAccount to exist (a new namespace gets 'default'
    from the controller manager shortly after it is created); a clear, non-retried failure after
    that. Credentials that may not read ServiceAccounts skip the check (pod creation still maps the
    server's 403 to the same message)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            core.read_namespaced_service_account(name, namespace)
            return
        except Exception as e:
            r = refusal(e)
            if r is None or r[0] != 404:
                log.debug("kubernetes launcher: cannot check ServiceAccount %s/%s: %s", namespace, name, e)
                return
        if time.monotonic() >= deadline:
            raise SandboxFailure(_no_service_account(namespace, name), RolloutStatus.ENV_ERROR)
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _create_or_replace(net: NetworkingApi, namespace: str, body: dict[str, Any], ser: Serialize) -> dict[str, Any]:
    """Create, or delete and create again (the launcher applies its policy before its first pod, so
    no pod of the run is without it in between)."""
    name = body["metadata"]["name"]
    try:
        return ser(net.create_namespaced_network_policy(namespace, body))
    except Exception as e:
        r = refusal(e)
        if r is None or r[0] != 409:
            raise
    try:
        net.delete_namespaced_network_policy(name, namespace)
    except Exception as e:
        r = refusal(e)
        if r is None or r[0] != 404:
            raise
    return ser(net.create_namespaced_network_policy(namespace, body))


def apply_network_policy(net: NetworkingApi, namespace: str, body: dict[str, Any], port_by_port: Callable[[], dict[str, Any]],
                         ser: Serialize) -> dict[str, Any]:
    """Create (or replace) the run's NetworkPolicy and read back what the server stored. A server
    that dropped ``endPort`` (v1.20, or the feature off) opens the first port of the service range
    only; then the policy is replaced by ``port_by_port()``, and if the stored policy still lacks a
    port the launcher refuses, rather than run rollouts that cannot reach their services."""
    name, want = body["metadata"]["name"], egress_ports(body)
    try:
        stored = _create_or_replace(net, namespace, body, ser)
        if want <= egress_ports(stored):
            return stored
        log.warning("kubernetes launcher: the API server dropped the NetworkPolicy's endPort (a server before "
                    "v1.21, or the feature is off); listing the %d service ports one by one", len(want) - 1)
        net.delete_namespaced_network_policy(name, namespace)
        stored = _create_or_replace(net, namespace, port_by_port(), ser)
    except Exception as e:
        r = refusal(e)
        if r is not None and r[0] in (400, 403, 422):
            raise create_refused(e, f"NetworkPolicy {name}", namespace, None) from e
        raise SandboxError(f"cannot create the NetworkPolicy {name}: {e}") from e
    missing = sorted(want - egress_ports(stored))
    if missing:
        raise SandboxFailure(f"the API server stored NetworkPolicy {name} without egress port(s) {missing[:5]}"
                             f"{'...' if len(missing) > 5 else ''}: rollouts could not reach the proxy or their "
                             "services; not starting pods", RolloutStatus.ENV_ERROR)
    return stored


def check_resources(pod: str, sent: dict[str, Any], stored: dict[str, Any]) -> None:
    """The created pod's requests and limits are the ones asked for, compared by value (the server
    stores ``1000m`` as ``1``); a LimitRange or webhook that changed them is a clear failure."""
    for want, got in zip(sent["spec"]["containers"], (stored.get("spec") or {}).get("containers") or [], strict=False):
        for kind in ("requests", "limits"):
            a, b = (want.get("resources") or {}).get(kind) or {}, (got.get("resources") or {}).get(kind) or {}
            if not same_quantities(a, b):
                raise SandboxFailure(f"the cluster changed the {kind} of pod {pod} from {a} to {b} (a LimitRange or "
                                     "admission webhook): the task's resources would not hold; not retried",
                                     RolloutStatus.ENV_ERROR)


def delete_labelled(core: CoreApi, net: NetworkingApi | None, namespace: str, selector: str,
                    mine: Callable[[dict[str, Any]], bool], ser: Serialize) -> list[str]:
    """Delete the pods, Secrets and NetworkPolicies that match ``selector`` (re-checked with ``mine``)."""
    kinds: list[tuple[Callable[..., Any], Callable[..., Any]]] = [
        (core.list_namespaced_pod, core.delete_namespaced_pod),
        (core.list_namespaced_secret, core.delete_namespaced_secret)]
    if net is not None:
        kinds.append((net.list_namespaced_network_policy, net.delete_namespaced_network_policy))
    removed: list[str] = []
    for lister, deleter in kinds:
        try:
            items = ser(lister(namespace, label_selector=selector).items)
        except Exception as e:
            log.warning("kubernetes launcher: cannot list orphans: %s", e)
            continue
        for obj in items:
            if mine(obj):
                name = obj["metadata"]["name"]
                try:
                    deleter(name, namespace, grace_period_seconds=0)
                    removed.append(name)
                except Exception as e:
                    r = refusal(e)
                    if r is None or r[0] != 404:
                        log.warning("kubernetes launcher: cannot delete %s: %s", name, e)
    return removed
