"""A test PKI as PEM files: a CA, a broker certificate for 127.0.0.1 and localhost, and client certificates, each key
with its certificate chain in one file (what Kafka's ``ssl.keystore.type=PEM`` and librdkafka both read).

Keys are EC P-256 (generated in microseconds) in PKCS#8, encrypted with the store's key password."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority"]

_DAY = datetime.timedelta(days=1)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class CertificateAuthority:
    """A CA whose files live in ``directory``: ``ca_file`` (its certificate: a trust store), and stores it issues
    (:meth:`keystore`: ``<name>.pem`` holding the key and the chain)."""

    name: str
    directory: Path
    key_password: str
    _key: ec.EllipticCurvePrivateKey | None = None
    _cert: x509.Certificate | None = None

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(self.name))
            .issuer_name(_name(self.name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )  # keyCertSign, cRLSign
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file.write_bytes(_pem(self._cert))

    @property
    def ca_file(self) -> Path:
        return self.directory / f"{self.name}-ca.pem"

    def keystore(self, common_name: str, *, server: bool = False, encrypted: bool = True) -> Path:
        """``<common_name>.pem``: a new key (PKCS#8, encrypted with ``key_password`` unless not ``encrypted``) and
        its certificate signed by this CA, then the CA's. A ``server`` certificate names 127.0.0.1 and localhost."""
        assert self._key is not None and self._cert is not None
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if server:
            names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(self.key_password.encode())
            if encrypted
            else serialization.NoEncryption()
        )
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        path = self.directory / f"{common_name}.pem"
        path.write_bytes(pem + _pem(cert) + _pem(self._cert))
        return path
