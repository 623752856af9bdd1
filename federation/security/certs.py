"""Certificates for a local federation: a CA, the server's certificate and one per member cluster.

Agents prove which cluster they are with a client certificate whose common name is the cluster's
name, signed by the CA the server trusts (`--agent-ca`). Production clusters would use their own
PKI (cert-manager, Vault); this is for laptops, compose and tests (`fedctl dev certs`).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost", "127.0.0.1", "federation-server")


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, PEM-encoded."""

    cert: bytes
    key: bytes

    def write(self, directory: Path, stem: str) -> None:
        (directory / f"{stem}.crt").write_bytes(self.cert)
        key = directory / f"{stem}.key"
        key.write_bytes(self.key)
        key.chmod(0o600)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str, organization: str = "federation (local)") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(days: int = 365, common_name: str = "federation local CA") -> Pair:
    key = _key()
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def issue(ca: Pair, common_name: str, server_names: Sequence[str] = (), days: int = 365,
          organization: str = "federation (local)", since: timedelta = timedelta(minutes=5)) -> Pair:
    """A leaf certificate: a server's (with its DNS names and addresses) or a client's (an agent's; a
    Kubernetes API server takes the organization as the user's group), valid from `since` ago for `days`."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    now = datetime.now(UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (x509.CertificateBuilder().subject_name(_name(common_name, organization)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - since).not_valid_after(now + timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if server_names:
        alt: list[x509.GeneralName] = []
        for name in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem(key))


def write_all(directory: Path, clusters: Sequence[str], server_names: Sequence[str] = SERVER_NAMES,
              days: int = 365) -> list[Path]:
    """ca.crt/.key, server.crt/.key and <cluster>.crt/.key for each cluster, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(days)
    ca.write(directory, "ca")
    issue(ca, server_names[0], server_names, days).write(directory, "server")
    for cluster in clusters:
        issue(ca, cluster, days=days).write(directory, cluster)
    return sorted(directory.iterdir())


def load_pair(cert_path: Path, key_path: Path, now: datetime) -> Pair:
    """A server's certificate and key, read and checked before gRPC gets them: gRPC only fails to bind, which
    would read as "the address is in use". ValueError names the file and what is wrong with it."""
    cert_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise ValueError(f"{cert_path}: not a PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem, None)
    except (ValueError, TypeError) as err:  # TypeError: encrypted, and no password
        why = "encrypted (give an unencrypted key)" if isinstance(err, TypeError) else "not a PEM private key"
        raise ValueError(f"{key_path}: {why}") from None
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*public) != cert.public_key().public_bytes(*public):
        raise ValueError(f"{key_path} is not the private key of {cert_path}")
    if cert.not_valid_after_utc <= now:
        raise ValueError(f"{cert_path}: the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    return Pair(cert_pem, key_pem)


def load_ca(path: Path) -> bytes:
    """A CA bundle, checked to hold at least one PEM certificate."""
    pem = path.read_bytes()
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ValueError(f"{path}: not a PEM CA certificate") from None
    return pem



def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS 1.2+ server context (the dashboard's HTTPS) from files load_pair has checked."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
