"""TLS for the SSL and SASL_SSL listeners: a server context from the PEM certificate
the user gives (Kafka's ``ssl.keystore.*`` names), or from a local CA and certificate
generated on request (``exactly.ssl.generate`` / ``exactly serve --generate-certificate``)
with ``cryptography``, for 127.0.0.1 and localhost, kept under ``<data-dir>/tls`` and
reused on restart, so clients set ``ssl.ca.location`` to the CA once."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from exactly.storage.errors import InvalidConfigError

if TYPE_CHECKING:
    from exactly.app.config import BrokerConfig

#: the generated files, under the data directory
TLS_DIR = "tls"
CA_FILE, SERVER_FILE = "ca.pem", "server.pem"
#: how long the generated certificates are valid
VALIDITY = datetime.timedelta(days=825)


@dataclass(frozen=True)
class GeneratedCertificate:
    """The local CA's certificate (what clients trust) and the server's chain + key."""

    ca: Path
    server: Path


def server_context(config: "BrokerConfig", data_dir: Path) -> ssl.SSLContext:
    """The TLS context of this broker's SSL listeners.
    :raise InvalidConfigError: no certificate configured, or one that does not load."""
    password = config.ssl_key_password or None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        if config.ssl_keystore_location:
            context.load_cert_chain(config.ssl_keystore_location, password=password)
        elif config.ssl_keystore_certificate_chain or config.ssl_keystore_key:
            _load_inline(context, config.ssl_keystore_certificate_chain, config.ssl_keystore_key, password)
        elif config.exactly_ssl_generate:
            context.load_cert_chain(generate_certificate(data_dir).server)
        else:
            raise InvalidConfigError("an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM with the "
                                     "certificate chain and the key), ssl.keystore.certificate.chain and "
                                     "ssl.keystore.key, or exactly.ssl.generate=true")
    except (OSError, ssl.SSLError) as e:
        raise InvalidConfigError(f"cannot load the TLS certificate: {e}") from None
    return context


def _load_inline(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """``ssl`` loads certificates from files only: the PEM text goes through a private
    temporary file, removed at once."""
    if not chain or not key:
        raise InvalidConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
    fd, path = tempfile.mkstemp(suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"{chain.strip()}\n{key.strip()}\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def generate_certificate(data_dir: Path) -> GeneratedCertificate:
    """A local CA and a server certificate it signed (SAN 127.0.0.1, ::1, localhost)
    under ``<data_dir>/tls``; the ones already there when both exist."""
    directory = Path(data_dir) / TLS_DIR
    generated = GeneratedCertificate(directory / CA_FILE, directory / SERVER_FILE)
    if generated.ca.exists() and generated.server.exists():
        return generated
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Exactly local CA")])
    ca_cert = (_builder(ca_name, ca_name, ca_key.public_key(), now)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]
    cert = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]), ca_name, key.public_key(), now)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _write_private(generated.server, cert.public_bytes(pem) + ca_cert.public_bytes(pem) + key_pem)
    _write_private(generated.ca, ca_cert.public_bytes(pem))
    return generated


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             now: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY))


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` readable by its owner only, atomically (a crash leaves no half file)."""
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
