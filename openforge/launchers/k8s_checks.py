"""What a Kubernetes API server will refuse or rewrite, checked before anything is sent.

Owns: the name rules (DNS labels and subdomains, label keys and values, environment variable names),
the pod's mount-path rule, strict IP-address parsing for the NetworkPolicy (:func:`ip_literal`,
:func:`host_cidr`), and resource quantities (:func:`parse_quantity`, :func:`canonical_cpu`,
:func:`canonical_memory`, :func:`same_quantities`). Pure functions; each check raises
:class:`~openforge.core.errors.ConfigError` naming the setting at fault, so a manifest the server would answer
with 422 is refused here, in the caller's terms, instead of becoming a retried ``infra_error``.

The rules are those of the oldest server we test against (v1.20): newer servers accept more
environment variable names, none accepts fewer.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import socket
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlparse

from ..core.errors import ConfigError

__all__ = [
    "canonical_cpu", "canonical_memory", "check_dns_label", "check_dns_subdomain", "check_env_names",
    "check_labels", "check_launcher_options", "check_mount_paths", "host_cidr", "ip_literal", "parse_quantity", "same_quantities",
]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")  # v1.20's IsEnvVarName


def check_dns_label(value: str, what: str) -> str:
    """A namespace or other RFC 1123 label: lower-case alphanumerics and '-', at most 63."""
    if not (len(value) <= 63 and _DNS_LABEL.fullmatch(value)):
        raise ConfigError(f"{what} {value!r} is not a valid Kubernetes name: lower-case letters, digits and '-', "
                          "starting and ending with a letter or digit, at most 63 characters")
    return value


def check_dns_subdomain(value: str, what: str) -> str:
    """A resource name (ServiceAccount, Secret, Pod): RFC 1123 subdomain, at most 253."""
    if not (len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value)):
        raise ConfigError(f"{what} {value!r} is not a valid Kubernetes name: lower-case letters, digits, '-' and "
                          "'.', starting and ending with a letter or digit, at most 253 characters")
    return value


def _check_label_key(key: str, what: str) -> None:
    prefix, _, name = key.rpartition("/")
    ok = bool(len(name) <= 63 and _LABEL_NAME.fullmatch(name))
    if prefix:
        ok = ok and len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(prefix))
    if not ok:
        raise ConfigError(f"{what}: label key {key!r} is invalid: an optional DNS-subdomain prefix and '/', then at "
                          "most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")


def check_labels(labels: Mapping[str, str], what: str) -> dict[str, str]:
    """Label keys and values (also the rules of a label selector's ``matchLabels``)."""
    for key, value in labels.items():
        _check_label_key(str(key), what)
        if not isinstance(value, str) or not (len(value) <= 63 and (value == "" or _LABEL_NAME.fullmatch(value))):
            raise ConfigError(f"{what}: label {key}={value!r} has an invalid value: at most 63 letters, digits, '-', "
                              "'_' or '.', starting and ending with a letter or digit (no '/')")
    return dict(labels)


def check_env_names(names: list[str], what: str) -> None:
    bad = [n for n in names if not _ENV_NAME.fullmatch(n)]
    if bad:
        raise ConfigError(f"{what}: environment variable name(s) {', '.join(map(repr, bad))} are refused by "
                          "Kubernetes: use letters, digits, '_', '-' and '.', not starting with a digit")


def check_mount_paths(paths: Mapping[str, str]) -> None:
    """``{setting: in-pod path}``: each absolute, no ':', and no two the same (each is its own volume)."""
    seen: dict[str, str] = {}
    for what, path in paths.items():
        if not path.startswith("/") or ":" in path:
            raise ConfigError(f"{what} {path!r} must be an absolute path inside the pod, without ':'")
        norm = posixpath.normpath(path)
        if norm in seen:
            raise ConfigError(f"{what} and {seen[norm]} are both {norm!r}: the pod mounts a separate volume at each, "
                              "so they must differ")
        seen[norm] = what


def check_launcher_options(*, namespace: str, service_account: str | None, proxy_pod_labels: Any,
                           proxy_namespace: str | None, proxy_cidr: str | None, proxy_url: str | None,
                           workdir: str, home: str) -> None:
    """The Kubernetes launcher's options, checked when it is made (ConfigError naming the option)."""
    check_dns_label(namespace, "namespace")
    if service_account:
        check_dns_subdomain(service_account, "service_account")
    if isinstance(proxy_pod_labels, str):
        try:
            proxy_pod_labels = dict(kv.split("=", 1) for kv in proxy_pod_labels.split(",") if kv)
        except ValueError:
            raise ConfigError(f"proxy_pod_labels must be k=v,k=v, got {proxy_pod_labels!r}") from None
    check_labels(proxy_pod_labels or {}, "proxy_pod_labels")
    if proxy_namespace:
        check_dns_label(proxy_namespace, "proxy_namespace")
    if proxy_cidr:
        host_cidr(proxy_cidr, "proxy_cidr")
    if proxy_url:
        ip_literal(urlparse(proxy_url).hostname or "", "the host of proxy_url")
    sample = "of-sample-pod"  # workdir / home may contain {pod}
    check_mount_paths({"workdir": workdir.replace("{pod}", sample), "home": home.replace("{pod}", sample),
                       "the pod's /tmp volume": "/tmp"})


# -- addresses ------------------------------------------------------------------------------------

def ip_literal(host: str, what: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``host`` spells, strictly; ``None`` for a DNS name. A legacy IPv4 shorthand
    that ``inet_aton`` accepts but Kubernetes refuses (``127.1``, ``10.1.2``, ``0x7f.1``, leading
    zeros) is a ConfigError, not a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        socket.inet_aton(host)
    except OSError:
        if not re.fullmatch(r"[0-9.]+", host):
            return None
    raise ConfigError(f"{what} {host!r} is not an IPv4 address Kubernetes accepts (a shorthand like 127.1, or out "
                      "of range): write all four decimal parts, e.g. 127.0.0.1")


def host_cidr(value: str, what: str) -> str:
    """A NetworkPolicy ``ipBlock.cidr``: ``10.0.0.5`` → ``10.0.0.5/32``, ``fd00::5`` → ``fd00::5/128``,
    a given prefix kept (host bits cleared)."""
    if "/" in value:
        addr, _, _prefix = value.partition("/")
        ip_literal(addr, what)
        try:
            return str(ipaddress.ip_network(value, strict=False))
        except ValueError as e:
            raise ConfigError(f"{what} {value!r} is not a CIDR: {e}") from None
    ip = ip_literal(value, what)
    if ip is None:
        raise ConfigError(f"{what} {value!r} is not an IP address or CIDR")
    return f"{ip}/{ip.max_prefixlen}"


# -- resource quantities -------------------------------------------------------------------------

_SUFFIX = {"Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
           "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60, "n": Decimal("1e-9"), "u": Decimal("1e-6"),
           "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
           "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(r"([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)")


def parse_quantity(q: str | int | float) -> Decimal:
    """A Kubernetes quantity's value: ``"1000m"`` and ``"1"`` are both 1; ``"2Gi"`` is 2147483648."""
    m = _QUANTITY.fullmatch(str(q).strip())
    if m is None:
        raise ConfigError(f"{q!r} is not a Kubernetes quantity")
    number, suffix = m.groups()
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:
        raise ConfigError(f"{q!r} is not a Kubernetes quantity") from None


def same_quantities(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """The same resources with the same values, however each side spells them (the server stores
    ``1000m`` as ``1`` and ``2048Mi`` as ``2Gi``)."""
    return set(a) == set(b) and all(parse_quantity(a[k]) == parse_quantity(b[k]) for k in a)


def canonical_cpu(cpu: float) -> str:
    """CPU cores as the server stores them: whole cores bare (``1``), else millicores (``1500m``)."""
    millis = round(float(cpu) * 1000)
    if millis <= 0:
        raise ConfigError(f"cpu must be positive, got {cpu!r}")
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def canonical_memory(memory_mb: int, name: str = "memory_mb") -> str:
    """Mebibytes (of ``name``, for the error) as the server stores them: ``2048`` → ``2Gi``, ``512`` → ``512Mi``."""
    mb = int(memory_mb)
    if mb <= 0:
        raise ConfigError(f"{name} must be positive, got {memory_mb!r}")
    return f"{mb // 1024}Gi" if mb % 1024 == 0 else f"{mb}Mi"
