"""X.509 certificates for the test bed's own services: a CA made for one state directory, and
server and client certificates it signs (PEM files). Needs `cryptography` (the project's venv has
it through openstacksdk).

Every certificate carries the extensions a strict verifier wants (Python 3.13's default and Go's
crypto/x509 alike): key usage, subject and authority key identifiers, and for a leaf its extended
key usage; a server certificate names its hosts in subjectAltName.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 30


@dataclass(frozen=True)
class Issued:
    """Where a certificate and its private key were written."""
    cert: Path
    key: Path


class CertificateAuthority:
    """A CA whose certificate is `cert` and key `key` (made by `create`, loaded by `load`)."""

    def __init__(self, cert: Path, key: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        self.cert, self.key = cert, key
        self._certificate = x509.load_pem_x509_certificate(cert.read_bytes())
        self._private_key = serialization.load_pem_private_key(key.read_bytes(), password=None)

    @classmethod
    def create(cls, directory: Path, common_name: str, stem: str = "ca") -> CertificateAuthority:
        """A new CA in `directory` (STEM.pem and STEM.key)."""
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        certificate = _build(name, key.public_key(), name, key, ca=True, builder_extra=lambda b: b)
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
        _write(cert_path, key_path, certificate, key)
        return cls(cert_path, key_path)

    def issue(self, directory: Path, stem: str, common_name: str, *, organizations: tuple[str, ...] = (),
              hosts: tuple[str, ...] = (), server: bool = False, client: bool = False) -> Issued:
        """A leaf certificate signed by this CA, written to STEM.pem and STEM.key in `directory`:
        for TLS servers (`server`, valid for `hosts`: DNS names or IP addresses) and/or clients
        (`client`; Kubernetes reads the user from the CN and the groups from `organizations`)."""
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID

        key = ec.generate_private_key(ec.SECP256R1())
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])

        def leaf(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            if hosts:
                builder = builder.add_extension(x509.SubjectAlternativeName([_host(h) for h in hosts]),
                                                critical=False)
            return builder

        certificate = _build(_name(common_name, organizations), key.public_key(), self._certificate.subject,
                             self._private_key, ca=False, builder_extra=leaf)
        issued = Issued(directory / f"{stem}.pem", directory / f"{stem}.key")
        _write(issued.cert, issued.key, certificate, key)
        return issued


def rsa_key_pair(directory: Path, stem: str) -> Issued:
    """An RSA key pair (STEM.key, and the public key as STEM.pub in `cert`'s place): what
    Kubernetes signs and checks ServiceAccount tokens with."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public, private = directory / f"{stem}.pub", directory / f"{stem}.key"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    return Issued(public, private)


def _name(common_name: str, organizations: tuple[str, ...] = ()):  # -> x509.Name
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _host(host: str):  # -> x509.GeneralName
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _build(subject, public_key, issuer, signer, *, ca: bool, builder_extra):  # -> x509.Certificate
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(public_key).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                              critical=False)
               .add_extension(x509.KeyUsage(
                   digital_signature=True, content_commitment=False, key_encipherment=False,
                   data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                   encipher_only=False, decipher_only=False), critical=True))
    return builder_extra(builder).sign(signer, hashes.SHA256())


def _write(cert_path: Path, key_path: Path, certificate, key) -> None:
    from cryptography.hazmat.primitives import serialization

    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
