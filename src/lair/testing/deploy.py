"""A deployment's parts for tests and benchmarks: ``deploy/nginx/lair-registry.conf`` made to run
under a prefix of its own (addresses, ports, paths put in; a self-signed certificate from
``openssl req -x509``), and a Redis of a test's own on a chosen address.

    conf = nginx_conf(folder, ["10.231.40.11:8780", "10.231.40.12:8780"], https_port, http_port)
    subprocess.Popen([nginx, "-p", folder, "-c", conf, "-g", "daemon off;"])
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from lair.testing.registry import free_port

__all__ = ["NGINX_CONF", "certificate", "nginx_binary", "nginx_conf", "redis_server"]

NGINX_CONF = Path(__file__).resolve().parents[3] / "deploy" / "nginx" / "lair-registry.conf"


def nginx_binary() -> str:
    for path in ("/usr/sbin/nginx", "/usr/bin/nginx"):
        if Path(path).exists():
            return path
    raise RuntimeError("nginx is not installed: run scripts/registry-setup.sh")


def certificate(where: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key for ``localhost``, valid one day."""
    crt, key = where / "registry.crt", where / "registry.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return crt, key


def nginx_conf(where: Path, upstreams: list[str], https: int, http: int) -> Path:
    """``deploy/nginx/lair-registry.conf`` with this test's addresses, ports and files, inside a
    minimal nginx.conf of its own prefix."""
    crt, key = certificate(where)
    text = NGINX_CONF.read_text()
    servers = "".join(f"    server {u} max_fails=1 fail_timeout=10s;\n" for u in upstreams)
    text = re.sub(r"(    server 10\.0\.0\.\d+:8780 [^\n]*\n)+", servers, text)
    for old, new in {
        "listen 443 ssl http2;": f"listen 127.0.0.1:{https} ssl http2;",
        "listen 80;": f"listen 127.0.0.1:{http};",
        "/etc/ssl/lair/registry.crt": str(crt),
        "/etc/ssl/lair/registry.key": str(key),
        "/var/log/nginx/lair-registry.log": str(where / "access.log"),
        "registry.example.org": "localhost",
    }.items():
        if old not in text:
            raise RuntimeError(f"{NGINX_CONF}: no {old!r} to put this deployment's value in")
        text = text.replace(old, new)
    text = "\n".join(line for line in text.splitlines() if "[::]" not in line)  # no IPv6 here
    (where / "lair-registry.conf").write_text(text)
    main = f"""
user root;
worker_processes 1;
pid {where}/nginx.pid;
error_log {where}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {where}/body; proxy_temp_path {where}/proxy;
    fastcgi_temp_path {where}/fcgi; uwsgi_temp_path {where}/uwsgi; scgi_temp_path {where}/scgi;
    include {where}/lair-registry.conf;
}}
"""
    (where / "nginx.conf").write_text(main)
    return where / "nginx.conf"


def redis_server(
    host: str, where: Path, *, password: str | None = None, tls: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """``redis-server`` on ``host`` and a free port, nothing saved to disk; (process, its URL). With
    ``password`` it requires it (``requirepass``); with ``tls`` it speaks only TLS, with the
    certificate of :func:`certificate` (for ``localhost``; the URL is ``rediss://`` and names it as
    its CA)."""
    port = free_port()
    argv = ["redis-server", "--bind", host, "--save", "", "--appendonly", "no"]
    argv += ["--protected-mode", "no", "--dir", str(where)]
    argv += ["--requirepass", password] if password else []
    if tls:
        crt, key = certificate(where)
        argv += [
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(crt),
            "--tls-key-file",
            str(key),
        ]
        argv += ["--tls-ca-cert-file", str(crt), "--tls-auth-clients", "no"]
    else:
        argv += ["--port", str(port)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    auth = f":{password}@" if password else ""
    if tls:
        url = f"rediss://{auth}localhost:{port}/0?ssl_ca_certs={where / 'registry.crt'}"
    else:
        url = f"redis://{auth}{host}:{port}/0"
    import redis

    deadline = time.monotonic() + 20
    while True:
        try:
            redis.Redis.from_url(url, socket_timeout=1).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"redis-server on {host}:{port} did not start") from None
            time.sleep(0.05)
    return proc, url
