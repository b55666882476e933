"""An adversarial agent: run inside a sandbox, it tries every escape the sandbox must stop and
prints one JSON line saying what each attempt got. Stdlib only (it is copied into the sandbox).

Usage: ``python agent.py CONFIG.json`` where the config names the targets (see ``_scenario.py``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request


def http(method: str, url: str, key: str | None, body: dict | None = None) -> int | str:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    if key:
        req.add_header("authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:  # unreachable
        return f"unreachable: {type(e).__name__}"


def try_read(path: str) -> str:
    try:
        if os.path.isdir(path):
            return f"listed {sorted(os.listdir(path))[:5]}"
        with open(path, "rb") as f:
            return f"read {f.read(64)!r}"
    except OSError as e:
        return f"denied: {e.strerror}"


def try_write(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("pwned by the agent")
        return "written"
    except OSError as e:
        return f"denied: {e.strerror}"


def try_connect(addr: object, family: int) -> str:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        return "connected"
    except OSError as e:
        return f"refused: {e.strerror or e}"
    finally:
        s.close()


def find_secrets(secrets: list[str]) -> list[str]:
    """Every place the driver's secrets show up: our own env, any visible process's env/cmdline."""
    found = [f"own env {k}" for k, v in os.environ.items() for s in secrets if s in v]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for what in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    blob = f.read()
            except OSError:
                continue
            found += [f"/proc/{pid}/{what}" for s in secrets if s.encode() in blob]
    return found


def identity() -> dict[str, object]:
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    out: dict[str, object] = {k: status[k].strip() for k in ("Uid", "Gid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}
    try:
        os.setuid(0)
        out["setuid0"] = "became root"
    except OSError as e:
        out["setuid0"] = f"denied: {e.strerror}"
    out["visible_pids"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    return out


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    proxy, rid, key, admin = cfg["proxy_url"], cfg["rollout_id"], cfg["api_key"], cfg["admin_token"]
    forged = {"reward": 1.0, "status": "success"}
    report: dict[str, object] = {
        "model_call": http("POST", f"{proxy}/r/{rid}/v1/chat/completions", key,
                           {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        "other_rollout_model_call": http("POST", f"{proxy}/r/{cfg['other_rollout_id']}/v1/chat/completions", key,
                                         {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        "admin": {base: {"finish": http("POST", f"{base}/admin/rollouts/{rid}/finish", admin, forged),
                         "get": http("GET", f"{base}/admin/rollouts/{rid}", admin),
                         "create": http("POST", f"{base}/admin/rollouts", admin, {"task_id": "forged"})}
                  for base in [proxy, *(f"http://127.0.0.1:{p}" for p in cfg["host_ports"])]},
        "secrets_found": find_secrets(cfg["secrets"]),
        "reads": {name: try_read(p) for name, p in cfg["read_paths"].items()},
        "writes": {name: try_write(p) for name, p in cfg["write_paths"].items()},
        "tcp": {str(p): try_connect(("127.0.0.1", p), socket.AF_INET) for p in cfg["host_ports"]},
        "unix": {p: try_connect(p, socket.AF_UNIX) for p in cfg["unix_sockets"]},
        "identity": identity(),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
