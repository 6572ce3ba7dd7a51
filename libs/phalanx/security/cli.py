"""`phalanx certs`: a private CA and one certificate per identity, plus Redis' password, as files.

For docker-compose (a one-shot job filling a volume), the tests, and anyone running the services by hand.
Files that exist are kept: running it again is harmless, and deleting a directory renews that identity.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from phalanx.security import certs
from phalanx.security.tls import ALL_IDENTITIES, SIMULATOR

CA_KEY_FILE = "ca.key"


def make_tree(
    out: Path, identities: list[str], dns: list[str], ips: list[str], days: float, redis_password: bool = False
) -> list[Path]:
    """out/ca.crt (+ ca.key), out/<identity>/{ca.crt,tls.crt,tls.key}, out/redis/password; returns what
    was written."""
    written: list[Path] = []
    out.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = out / certs.CA_FILE, out / CA_KEY_FILE
    if ca_cert.exists() and ca_key.exists():
        ca = certs.KeyPair(ca_cert.read_bytes(), ca_key.read_bytes())
    else:
        ca = certs.new_ca(days=max(days * 10, 3650))
        ca_key.touch(mode=0o600)
        ca_key.write_bytes(ca.key_pem)
        ca_cert.write_bytes(ca.cert_pem)
        written += [ca_cert, ca_key]
    for identity in identities:
        directory = out / identity
        if (directory / certs.CERT_FILE).exists() and (directory / certs.KEY_FILE).exists():
            continue
        short = identity.removeprefix("phalanx-")  # compose's service names: queue, scheduler, binder
        pair = certs.issue(ca, identity, [short, *dns], ips, days=days)
        written.append(certs.write(directory, ca.cert_pem, pair))
    if redis_password:
        path = out / "redis" / "password"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32) + "\n")
            written.append(path)
    return written


def default_identities(backend: str) -> list[str]:
    """Who gets a certificate by default: a key that is never issued cannot be stolen."""
    return [i for i in ALL_IDENTITIES if i != SIMULATOR or backend == "simulated"]


def add_certs_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "certs",
        help="make a CA and the services' certificates (mutual TLS) as files",
        description="Writes OUT/ca.crt and ca.key, and OUT/<identity>/{ca.crt,tls.crt,tls.key} for "
        "each identity; existing files are kept. Point each service's --tls-dir at its "
        "identity's directory.",
    )
    p.add_argument("--out", required=True, help="directory to write into")
    p.add_argument(
        "--identity",
        action="append",
        choices=ALL_IDENTITIES,
        help="an identity to make a certificate for (repeatable; default: the services' and the operator's, "
        "and the simulator's with --backend simulated)",
    )
    p.add_argument(
        "--backend",
        choices=["kubernetes", "simulated"],
        default="kubernetes",
        help="what the services run against: the simulator's identity (it feeds pods and cluster events) is "
        "issued only for simulated; against the Kubernetes API server the services refuse it anyway",
    )
    p.add_argument("--dns", action="append", default=[], help="extra DNS name in every certificate (repeatable)")
    p.add_argument("--ip", action="append", default=["127.0.0.1"], help="IP address in every certificate")
    p.add_argument("--days", type=float, default=365.0, help="validity of the service certificates")
    p.add_argument("--redis-password", action="store_true", help="also write OUT/redis/password (random)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.days <= 0:
        print(f"phalanx certs: --days {args.days:g}: must be positive", file=sys.stderr)
        return 2
    written = make_tree(
        Path(args.out),
        args.identity or default_identities(args.backend),
        args.dns,
        args.ip,
        args.days,
        args.redis_password,
    )
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{args.out}: everything already there")
    return 0
