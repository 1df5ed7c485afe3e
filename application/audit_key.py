"""The service's audit key: the Ed25519 key that signs the Merkle tree's checkpoints and the exports'
manifests (docs/verifying-the-log.md).

It is made once, on first use, and kept in the var directory beside the other credentials
(`application.credentials`), readable by the service's user alone:

```
var/audit-signing-key.pem   0600  the private key, PKCS #8 PEM, unencrypted
```

Its key id is the hex SHA-256 of its raw 32-byte public key. Several processes may start at once: the file
is created exclusively, and a process that loses the race reads the winner's. Rotation: move the file
aside (keep it, or at least its public key) and restart the processes that sign; the next signature makes
a new key, and the checkpoints signed before keep naming the old key id, which `GET /audit/public-key`
still lists (`read.audit_signing_keys`).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

AUDIT_KEY_FILE = "audit-signing-key.pem"
ALGORITHM = "Ed25519"


def key_id_of(public_key: bytes) -> str:
    """The key id of a raw 32-byte Ed25519 public key: its SHA-256, in hex."""
    return hashlib.sha256(public_key).hexdigest()


@dataclass(frozen=True)
class AuditKey:
    """The signing key, its raw public key and its key id."""

    private: Ed25519PrivateKey

    @property
    def public_key(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @property
    def public_key_base64(self) -> str:
        return base64.b64encode(self.public_key).decode()

    @property
    def key_id(self) -> str:
        return key_id_of(self.public_key)

    def sign(self, message: bytes) -> str:
        """The Ed25519 signature of `message`, in base64."""
        return base64.b64encode(self.private.sign(message)).decode()


def public_key_pem(public_key: bytes) -> str:
    """A raw public key as SubjectPublicKeyInfo PEM (what `openssl pkey -pubin` reads)."""
    key = Ed25519PublicKey.from_public_bytes(public_key)
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def signature_valid(public_key: bytes, signature: str, message: bytes) -> bool:
    """Whether `signature` (base64) is `public_key`'s Ed25519 signature of `message`."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(base64.b64decode(signature), message)
    except Exception:
        return False
    return True


def load_or_create_audit_key(var: Path) -> AuditKey:
    """The key kept in `var` (made private, 0700, if it is created here), made there if missing."""
    path = var / AUDIT_KEY_FILE
    if not path.exists():
        var.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        draft = var / f".{AUDIT_KEY_FILE}.{os.getpid()}.tmp"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(draft, path)  # whole, or not at all: another process's key may have won meanwhile
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} holds no Ed25519 private key")
    return AuditKey(loaded)
