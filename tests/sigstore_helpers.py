"""Running ``harness-verify`` with the network made to fail, for the Sigstore tests.

Every Sigstore test runs the real CLI in a child process whose ``socket.socket.connect``,
``connect_ex`` and ``socket.create_connection`` raise before anything else is imported: a
verification that tried to reach Fulcio, Rekor or a TUF repository would fail loudly (the
child also records each attempt on stderr, which the tests assert is empty of them).
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.conftest import THIRD_PARTY_VECTORS

VECTORS = THIRD_PARTY_VECTORS / "sigstore-python"
STAGING = VECTORS / "trusted_root.staging.json"
PRODUCTION = VECTORS / "trusted_root.production.json"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
OAUTH_ISSUER = "https://github.com/login/oauth"

OFFLINE = """
import socket, sys

def _refuse(*args, **kwargs):
    sys.stderr.write("NETWORK ATTEMPT %r\\n" % (args[1:] or args,))
    raise OSError("network disabled in this test")

socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
{extra}
from harness.verify.cli import main
main(sys.argv[1:])
"""


def verifier_offline(
    *args: str | Path, cwd: Path | None = None, extra: str = ""
) -> subprocess.CompletedProcess[str]:
    """``harness-verify ARGS`` in a child process with no network (and ``extra`` code run
    first, e.g. to hide the sigstore package)."""
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE.format(extra=extra), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert "NETWORK ATTEMPT" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done


# ---- a throw-away Sigstore instance: CA, CT log, transparency log, all made in the test ------
#
# What sigstore-python checks, and so what this builds (sigstore/verify/verifier.py, 4.5): a
# Fulcio-style leaf certificate (code-signing EKU, digitalSignature, the identity as SAN, the
# OIDC issuer in extension 1.3.6.1.4.1.57264.1.1) chained to a CA of the trusted root, valid at
# the log's integration time; one embedded precertificate SCT (RFC 6962 §3.2) signed by a CT
# log key of the trusted root over the TBS without the SCT extension; a hashedrekord 0.0.1
# entry for the signature, in a Merkle tree of our own with its RFC 6962 inclusion proof, a
# checkpoint signed as a C2SP note by the log key, and the inclusion promise (SET) over the
# RFC 8785 JSON of body, integrated time, log id and index.

SCT_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
ISSUER_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
ISSUER_V2_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
EPOCH = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def tree_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 MTH over leaf hashes (written here independently of verify/merkle.py)."""
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return _node(tree_root(leaves[:k]), tree_root(leaves[k:]))


def tree_path(index: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]), leaf to root."""
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*tree_path(index, leaves[:k]), tree_root(leaves[k:])]
    return [*tree_path(index - k, leaves[k:]), tree_root(leaves[:k])]


def _ext_utf8(value: str) -> bytes:
    raw = value.encode()
    assert len(raw) < 128
    return b"\x0c" + bytes([len(raw)]) + raw


@dataclass
class FakeSigstore:
    """One Sigstore instance of our own (names are fixed so that runs are comparable)."""

    name: str = "test"
    ca_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    log_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    ct_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    entries: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"{self.name}.example"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"{self.name}-root"),
            ]
        )
        public = self.ca_key.public_key()
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(public)
            .serial_number(1)
            .not_valid_before(EPOCH - _dt.timedelta(days=1))
            .not_valid_after(EPOCH + _dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.ca_key, hashes.SHA384())
        )
        self.log_id = hashlib.sha256(_spki(self.log_key.public_key())).digest()
        self.ct_id = hashlib.sha256(_spki(self.ct_key.public_key())).digest()
        # other people's entries before ours, so the proof has a path to check
        self.entries = [f"entry {n} of someone else".encode() for n in range(5)]

    # -- the trusted root ---------------------------------------------------------------------
    def trusted_root(self) -> dict[str, object]:
        start = {"start": (EPOCH - _dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}

        def log(key: ec.EllipticCurvePrivateKey, ident: bytes, url: str) -> dict[str, object]:
            return {
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(_spki(key.public_key())),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": start,
                },
                "logId": {"keyId": _b64(ident)},
            }

        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(self.log_key, self.log_id, f"https://rekor.{self.name}.invalid")],
            "certificateAuthorities": [
                {
                    "subject": {"organization": f"{self.name}.example", "commonName": "root"},
                    "uri": f"https://fulcio.{self.name}.invalid",
                    "certChain": {
                        "certificates": [
                            {"rawBytes": _b64(self.ca.public_bytes(serialization.Encoding.DER))}
                        ]
                    },
                    "validFor": start,
                }
            ],
            "ctlogs": [log(self.ct_key, self.ct_id, f"https://ctfe.{self.name}.invalid")],
            "timestampAuthorities": [],
        }

    def write_trusted_root(self, path: Path) -> Path:
        path.write_text(json.dumps(self.trusted_root(), indent=2), encoding="utf-8")
        return path

    # -- Fulcio: a short-lived certificate for an identity, with its SCT ----------------------
    def certificate(
        self, key: ec.EllipticCurvePrivateKey, identity: str, issuer: str, at: _dt.datetime
    ) -> x509.Certificate:
        public = key.public_key()
        san: x509.GeneralName = (
            x509.RFC822Name(identity)
            if "@" in identity and "://" not in identity
            else x509.UniformResourceIdentifier(identity)
        )

        def builder() -> x509.CertificateBuilder:
            return (
                x509.CertificateBuilder()
                .subject_name(x509.Name([]))
                .issuer_name(self.ca.subject)
                .public_key(public)
                .serial_number(0x5157)
                .not_valid_before(at - _dt.timedelta(minutes=1))
                .not_valid_after(at + _dt.timedelta(minutes=10))
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=False,
                        crl_sign=False,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(
                    x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
                )
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                    critical=False,
                )
                .add_extension(x509.SubjectAlternativeName([san]), critical=True)
                .add_extension(
                    x509.UnrecognizedExtension(ISSUER_OID, issuer.encode()), critical=False
                )
                .add_extension(
                    x509.UnrecognizedExtension(ISSUER_V2_OID, _ext_utf8(issuer)), critical=False
                )
            )

        # the precertificate's TBS is the certificate's without the SCT list (appended last)
        pre = builder().sign(self.ca_key, hashes.SHA384())
        millis = int(at.timestamp()) * 1000
        issuer_key_hash = hashlib.sha256(_spki(self.ca_key.public_key())).digest()
        tbs = pre.tbs_certificate_bytes
        signed = (
            struct.pack("!BBQH", 0, 0, millis, 1)
            + issuer_key_hash
            + len(tbs).to_bytes(3, "big")
            + tbs
            + struct.pack("!H", 0)
        )
        signature = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = (
            b"\x00"
            + self.ct_id
            + struct.pack("!QH", millis, 0)
            + b"\x04\x03"
            + struct.pack("!H", len(signature))
            + signature
        )
        sct_list = struct.pack("!H", len(sct) + 2) + struct.pack("!H", len(sct)) + sct
        octet = b"\x04" + _der_length(len(sct_list)) + sct_list
        return (
            builder()
            .add_extension(x509.UnrecognizedExtension(SCT_OID, octet), critical=False)
            .sign(self.ca_key, hashes.SHA384())
        )

    # -- Rekor: an entry of our own log, with its proof, checkpoint and promise ---------------
    def sign(
        self,
        artifact: bytes,
        identity: str,
        issuer: str,
        *,
        at: _dt.datetime = EPOCH + _dt.timedelta(days=30),
    ) -> dict[str, object]:
        """A Sigstore bundle (v0.3, hashedrekord 0.0.1) over ``artifact`` for ``identity``."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.certificate(key, identity, issuer, at)
        pem = cert.public_bytes(serialization.Encoding.PEM)
        material = {
            "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))}
        }
        return self._logged(artifact, key, pem, material, at)

    def sign_with_key(
        self, artifact: bytes, key: ec.EllipticCurvePrivateKey, *, at: _dt.datetime = EPOCH
    ) -> dict[str, object]:
        """A key-signed bundle (``cosign sign-blob --key`` shape): no certificate, the public
        key in the log entry, ``verificationMaterial.publicKey`` a hint."""
        pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return self._logged(artifact, key, pem, {"publicKey": {"hint": "test-key"}}, at)

    def _logged(
        self,
        artifact: bytes,
        key: ec.EllipticCurvePrivateKey,
        pem: bytes,
        material: dict[str, object],
        at: _dt.datetime,
    ) -> dict[str, object]:
        digest = hashlib.sha256(artifact).digest()
        signature = key.sign(artifact, ec.ECDSA(hashes.SHA256()))
        body = json.dumps(
            {
                "apiVersion": "0.0.1",
                "kind": "hashedrekord",
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                    "signature": {"content": _b64(signature), "publicKey": {"content": _b64(pem)}},
                },
            },
            separators=(",", ":"),
        ).encode()
        content = {
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": _b64(digest)},
                "signature": _b64(signature),
            }
        }
        return self._entry(body, "hashedrekord", material, content, at)

    def sign_dsse(
        self,
        artifact: bytes,
        identity: str,
        issuer: str,
        *,
        at: _dt.datetime = EPOCH + _dt.timedelta(days=30),
    ) -> dict[str, object]:
        """A DSSE attestation (``actions/attest`` shape: an in-toto statement whose subject is
        ``artifact``), logged as a dsse 0.0.1 entry."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.certificate(key, identity, issuer, at)
        statement = json.dumps(
            {
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [
                    {
                        "name": "bundle.tar",
                        "digest": {"sha256": hashlib.sha256(artifact).hexdigest()},
                    }
                ],
                "predicateType": "https://slsa.dev/provenance/v1",
                "predicate": {"buildDefinition": {"buildType": "https://example.com/harness"}},
            }
        ).encode()
        kind = "application/vnd.in-toto+json"
        pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind.encode(), len(statement), statement)
        signature = key.sign(pae, ec.ECDSA(hashes.SHA256()))
        envelope = {
            "payload": _b64(statement),
            "payloadType": kind,
            "signatures": [{"sig": _b64(signature)}],
        }
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body = json.dumps(
            {
                "apiVersion": "0.0.1",
                "kind": "dsse",
                "spec": {
                    "envelopeHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(json.dumps(envelope).encode()).hexdigest(),
                    },
                    "payloadHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(statement).hexdigest(),
                    },
                    "signatures": [{"signature": _b64(signature), "verifier": _b64(pem)}],
                },
            },
            separators=(",", ":"),
        ).encode()
        material = {
            "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))}
        }
        return self._entry(body, "dsse", material, {"dsseEnvelope": envelope}, at)

    def _entry(
        self,
        body: bytes,
        kind: str,
        material: dict[str, object],
        content: dict[str, object],
        at: _dt.datetime,
    ) -> dict[str, object]:
        """Append ``body`` to our log; the bundle with its proof, checkpoint and promise."""
        self.entries.append(body)
        index = len(self.entries) - 1
        leaves = [_leaf(entry) for entry in self.entries]
        root = tree_root(leaves)
        size = len(leaves)
        integrated = int(at.timestamp())
        origin = f"rekor.{self.name}.invalid - 1234"
        note = f"{origin}\n{size}\n{_b64(root)}\nTimestamp: {integrated}000000000\n"
        note_sig = self.log_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = (
            f"{note}\n\u2014 rekor.{self.name}.invalid {_b64(self.log_id[:4] + note_sig)}\n"
        )
        promise = rfc8785.dumps(
            {
                "body": _b64(body),
                "integratedTime": integrated,
                "logID": self.log_id.hex(),
                "logIndex": index,
            }
        )
        set_sig = self.log_key.sign(promise, ec.ECDSA(hashes.SHA256()))
        return {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                **material,
                "tlogEntries": [
                    {
                        "logIndex": str(index),
                        "logId": {"keyId": _b64(self.log_id)},
                        "kindVersion": {"kind": kind, "version": "0.0.1"},
                        "integratedTime": str(integrated),
                        "inclusionPromise": {"signedEntryTimestamp": _b64(set_sig)},
                        "inclusionProof": {
                            "logIndex": str(index),
                            "rootHash": _b64(root),
                            "treeSize": str(size),
                            "hashes": [_b64(h) for h in tree_path(index, leaves)],
                            "checkpoint": {"envelope": checkpoint},
                        },
                        "canonicalizedBody": _b64(body),
                    }
                ],
            },
            **content,
        }


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw
