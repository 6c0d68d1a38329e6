"""Parsing tenant SSH public keys (OpenSSH `authorized_keys` format) with `cryptography`.

A key is accepted only when the library loads it and it is one of the kinds a modern sshd
accepts by default and NIST SP 800-57 Part 1 Rev. 5 (table 2) rates at 128-bit security or
more: Ed25519, ECDSA on P-256/P-384/P-521, or RSA of at least 3,072 bits. DSA and shorter RSA
keys are refused with the reason. What is stored and delivered to nodes is the canonical
`<type> <base64>` the library writes back, never the text the client sent: no options
(`command="…"`), no comment, no second line can reach a node's `authorized_keys`.
"""

import base64
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

MAX_KEY_CHARS = 16_384  # an RSA-16384 key is ~2,800 characters; anything far longer is not a key
MIN_RSA_BITS = 3072
MAX_RSA_BITS = 16_384
EC_CURVES = {"secp256r1": 256, "secp384r1": 384, "secp521r1": 521}


class InvalidSshKey(ValueError):
    """The text is not an acceptable SSH public key; the message says why."""


@dataclass(frozen=True)
class ParsedKey:
    key_type: str  # ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, …
    bits: int
    public_key: str  # canonical "<type> <base64>"
    fingerprint: str  # "SHA256:<base64, unpadded>" as ssh-keygen -l prints it
    comment: str


def fingerprint_of(public_key: str) -> str:
    """OpenSSH's SHA256 fingerprint of a canonical "<type> <base64>" line."""
    blob = base64.b64decode(public_key.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse_public_key(text: str) -> ParsedKey:
    if not isinstance(text, str):
        raise InvalidSshKey("a public key is one line of text, e.g. the content of ~/.ssh/id_ed25519.pub")
    if len(text) > MAX_KEY_CHARS:
        raise InvalidSshKey(f"at most {MAX_KEY_CHARS} characters; a public key is far shorter")
    line = text.strip()
    if not line or "\n" in line or "\r" in line or "\x00" in line:
        raise InvalidSshKey("send exactly one public key line (the .pub file), not a private key or several keys")
    if "PRIVATE KEY" in line:
        raise InvalidSshKey("this is a private key; send the public one (the .pub file) and keep this one secret")
    parts = line.split(None, 2)
    comment = parts[2] if len(parts) == 3 else ""
    try:
        key = serialization.load_ssh_public_key(" ".join(parts[:2]).encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
        raise InvalidSshKey(
            "not an OpenSSH public key this service accepts: expected `ssh-ed25519 AAAA…`, "
            "`ecdsa-sha2-nistp256 AAAA…` or `ssh-rsa AAAA…` (options before the key are not accepted)"
        ) from None
    if isinstance(key, ed25519.Ed25519PublicKey):
        bits = 256
    elif isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in EC_CURVES:
            raise InvalidSshKey(f"ECDSA on {key.curve.name} is not accepted; use P-256, P-384 or P-521, or Ed25519")
        bits = EC_CURVES[key.curve.name]
    elif isinstance(key, rsa.RSAPublicKey):
        bits = key.key_size
        if bits < MIN_RSA_BITS:
            raise InvalidSshKey(
                f"an RSA key of {bits} bits is too short; at least {MIN_RSA_BITS} bits "
                "(NIST SP 800-57: 128-bit security), or use Ed25519: ssh-keygen -t ed25519"
            )
        if bits > MAX_RSA_BITS:
            raise InvalidSshKey(f"an RSA key of {bits} bits is longer than the {MAX_RSA_BITS} bits accepted")
    else:
        raise InvalidSshKey("only Ed25519, ECDSA and RSA (>= 3072 bits) keys are accepted; DSA is not")
    canonical = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode("ascii")
    return ParsedKey(
        key_type=canonical.split()[0],
        bits=bits,
        public_key=canonical,
        fingerprint=fingerprint_of(canonical),
        comment=comment[:200],
    )
