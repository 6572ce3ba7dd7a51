"""Certificates for the services' mutual TLS: a private CA and one certificate per service identity.

The identity of a caller is the common name of its certificate (`phalanx-scheduler`, ...); the DNS names
and IP addresses in the certificate are what a client checks the server's name against. The chart makes
these with Helm's own functions or cert-manager; `phalanx certs` makes the same files for docker-compose,
the tests and anyone running the services by hand.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from phalanx.security.tls import CA_FILE, CERT_FILE, KEY_FILE  # noqa: F401 (the layout, defined with its reader)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return key


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # fast to make and to handshake with; what cert-manager offers


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _validity(days: float) -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.timezone.utc)
    return now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)  # 5 minutes of clock skew


def new_ca(name: str = "phalanx-ca", days: float = 3650) -> KeyPair:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def issue(
    ca: KeyPair,
    identity: str,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
    days: float = 365,
) -> KeyPair:
    """A certificate for `identity` (its common name), good as a server (for `dns_names` and `ips`) and as
    a client, signed by `ca`."""
    key = _key()
    start, end = _validity(days)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys([identity, *dns_names])]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
        .issuer_name(ca.certificate().subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca.private_key(), hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def write(directory: Path, ca_cert_pem: bytes, pair: KeyPair) -> Path:
    """Writes ca.crt, tls.crt and tls.key (readable by the owner only) into `directory`, each file replaced
    whole (a reader never sees half a key)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (
        (CA_FILE, ca_cert_pem, 0o644),
        (CERT_FILE, pair.cert_pem, 0o644),
        (KEY_FILE, pair.key_pem, 0o600),
    ):
        tmp = directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    return directory
