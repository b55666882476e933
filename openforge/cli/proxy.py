"""``forge proxy serve``: run the openforge proxy as a standalone server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

group = typer.Typer(help="Run the model-API proxy that records every call token-exactly.", no_args_is_help=True)

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="proxy")


@group.command("serve")
def serve(
    backend: str = typer.Option(..., "--backend", "-b",
                                help="scripted:FILE | transformers:smollm2-135m|DIR | vllm:URL | openai:URL"),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (non-loopback needs OPENFORGE_ADMIN_TOKEN)."),
    port: int = typer.Option(8787, "--port", "-p", help="TCP port (0 = any free port)."),
    uds: Path | None = typer.Option(None, "--uds", help="Also listen on this Unix-domain socket."),
    store: Path | None = typer.Option(None, "--store", help="SQLite trajectory store (default: memory only)."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature enforced on every call."),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="Upper bound on generated tokens per call."),
    timeout: float = typer.Option(600.0, "--timeout", help="Back-end timeout per call, seconds."),
    model: str | None = typer.Option(None, "--model", help="Upstream model name (vllm:/openai:)."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Local tokenizer dir (default: SmolLM2's)."),
    header_timeout: float = typer.Option(10.0, "--header-timeout",
                                         help="Seconds a client has to send a request's line and headers (else 408)."),
    body_timeout: float = typer.Option(60.0, "--body-timeout",
                                       help="Seconds a client has to send a request's body (else 408)."),
) -> None:
    """Serve Chat Completions, Responses and Anthropic Messages under /r/{rollout_id}; create
    rollouts with POST /admin/rollouts (Authorization: Bearer $OPENFORGE_ADMIN_TOKEN)."""
    import os
    import secrets

    from ..core.errors import ConfigError
    from ..proxy.backends import SamplingParams
    from ..runner.session import ProxySettings, Session, backend_for

    token = os.environ.get("OPENFORGE_ADMIN_TOKEN")
    if host not in _LOOPBACK and not token:
        raise ConfigError(f"--host {host} is not loopback: set OPENFORGE_ADMIN_TOKEN explicitly to expose the proxy")
    printed_token = token is None
    token = token or secrets.token_urlsafe(24)
    be = backend_for(backend, tokenizer=tokenizer, model=model)
    settings = ProxySettings(host=host, port=port, uds=str(uds) if uds else None, admin_token=token,
                             sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, timeout_s=timeout),
                             header_timeout_s=header_timeout, body_timeout_s=body_timeout)

    async def main() -> None:
        stop = _stop_on_signals()
        async with Session(be, store=store, proxy=settings, close_backend=True) as session:
            proxy = session.proxy
            typer.echo(f"openforge proxy serving {be.describe()} at {proxy.url}" + (f" and unix:{uds}" if uds else ""))
            if printed_token:
                typer.echo(f"admin token (set OPENFORGE_ADMIN_TOKEN to choose one): {token}")
            typer.echo(f"create a rollout: curl -s -X POST {proxy.url}/admin/rollouts -H 'authorization: Bearer "
                       f"{'$OPENFORGE_ADMIN_TOKEN' if not printed_token else token}' -d '{{\"task_id\": \"demo\"}}'")
            await stop.wait()

    from ._ports import listen_errors

    try:
        with listen_errors(host, port, "--port"):
            try:
                import uvloop
            except ImportError:
                asyncio.run(main())
            else:
                uvloop.run(main())
    except KeyboardInterrupt:
        pass


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (installed before the proxy says where it serves, so a signal
    that comes right after still stops it cleanly: the session closes the proxy and the store)."""
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
