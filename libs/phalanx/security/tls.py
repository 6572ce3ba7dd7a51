"""Mutual TLS for the services' gRPC ports, with certificates re-read when their files change.

A service's directory holds ca.crt, tls.crt and tls.key (the layout of a kubernetes.io/tls Secret that
cert-manager writes). Kubernetes swaps a mounted Secret's files in place when the Secret changes, so a
renewed certificate is picked up without a restart: the server asks for its certificates at every new
handshake (gRPC's dynamic server credentials), and clients build a new channel when the files changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

# The files of one identity, named as in a Secret of type kubernetes.io/tls that cert-manager writes.
CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"

log = logging.getLogger(__name__)

# Identities: the common name of each party's certificate.
QUEUE = "phalanx-queue"
SCHEDULER = "phalanx-scheduler"
BINDER = "phalanx-binder"
OPERATOR = "phalanx-operator"  # a person or a tool: the CLI's read-only calls
SIMULATOR = "phalanx-simulator"  # the embedded simulator's driver, feeding cluster events in simulated mode
SERVICE_IDENTITIES = {"queue": QUEUE, "scheduler": SCHEDULER, "binder": BINDER}
ALL_IDENTITIES = (QUEUE, SCHEDULER, BINDER, OPERATOR, SIMULATOR)

RECHECK_SECONDS = 5.0  # how often the files' metadata is looked at, at most


class TlsError(RuntimeError):
    """The certificate files are missing or unreadable; the message names the file and the flag."""


@dataclass(frozen=True)
class Material:
    ca: bytes
    cert: bytes
    key: bytes


class TlsFiles:
    """The three files of one identity; `current()` is their content, re-read when they changed."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.paths = (self.directory / CA_FILE, self.directory / CERT_FILE, self.directory / KEY_FILE)
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self._checked = 0.0
        self._material: Material | None = None
        self.generation = 0  # grows by one at every change seen
        self.current()  # fail at start-up, naming the file, rather than at the first call

    def _stamps(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self.paths:
            try:
                st = path.stat()  # follows the ..data symlink Kubernetes swaps on a Secret update
            except OSError as exc:
                raise TlsError(
                    f"TLS file {path}: {exc.strerror or exc} (set --tls-dir or PHALANX_TLS_DIR to a "
                    f"directory holding {CA_FILE}, {CERT_FILE} and {KEY_FILE}; `phalanx certs` makes them)"
                ) from None
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def current(self) -> Material:
        with self._lock:
            now = time.monotonic()
            if self._material is not None and now - self._checked < RECHECK_SECONDS:
                return self._material
            self._checked = now
            try:
                stamp = self._stamps()
            except TlsError:
                if self._material is None:
                    raise
                log.warning("TLS files in %s unreadable; keeping the certificates loaded before", self.directory)
                return self._material
            if stamp != self._stamp or self._material is None:
                material = Material(*(p.read_bytes() for p in self.paths))
                if not all(material.__dict__.values()):
                    if self._material is None:
                        raise TlsError(
                            f"TLS files in {self.directory}: one of {CA_FILE}, {CERT_FILE}, {KEY_FILE} is empty"
                        )
                    return self._material  # caught mid-write: the next check reads the whole files
                if self._material is not None:
                    log.info("TLS certificates in %s changed; new connections use them", self.directory)
                self._material, self._stamp = material, stamp
                self.generation += 1
            return self._material


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Requires and verifies a client certificate signed by the CA; the files are looked at again on every
    new connection, so a renewed certificate (or CA) needs no restart."""

    def config(m: Material) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(m.key, m.cert)], root_certificates=m.ca)

    seen = [files.generation]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        try:
            material = files.current()
        except Exception as exc:  # never fail a handshake over a bad re-read: keep the last good ones
            log.warning("re-reading TLS files failed: %s", exc)
            return None
        if files.generation == seen[0]:
            return None  # unchanged
        seen[0] = files.generation
        return config(material)

    return grpc.dynamic_ssl_server_credentials(config(files.current()), fetch, require_client_authentication=True)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    m = files.current()
    return grpc.ssl_channel_credentials(root_certificates=m.ca, private_key=m.key, certificate_chain=m.cert)


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


@dataclass(frozen=True)
class Security:
    """How one process talks gRPC: mutual TLS with its identity's files, or plaintext on loopback only."""

    files: TlsFiles | None  # None: plaintext

    @property
    def plaintext(self) -> bool:
        return self.files is None

    @classmethod
    def tls(cls, directory: str | Path) -> Security:
        return cls(TlsFiles(directory))

    @classmethod
    def insecure(cls) -> Security:
        return cls(None)


PLAINTEXT = Security.insecure()


def security_from_env(default_dir: str = "") -> Security:
    """For tools (the CLI, the bench): PHALANX_TLS_DIR names an identity's files; unset, plaintext."""
    directory = os.environ.get("PHALANX_TLS_DIR", default_dir)
    return Security.tls(directory) if directory else PLAINTEXT
