"""Checking kaas's signed run records offline (docs/signing.md).

The service signs each run record (artifact sha256, manifest, problem, device class,
verdict and checks, timings, speedups, device facts) with Ed25519 over the record's
canonical JSON. `canonical_json` here produces the same bytes as the service's Rust
code (`src/signing/canonical.rs`); a committed fixture made by the Rust code keeps the
two equal.

    import kaas_client.signing as signing
    signing.verify_pulled("k/", public_key="<base64 from /.well-known/kaas-signing-keys>")

Verifying uses the `cryptography` package where it is installed (an optional dependency)
and a pure-Python Ed25519 check (RFC 8032) otherwise; everything here needs only the
standard library.
"""

import base64
import binascii
import hashlib
import json
import math
import os
import re
from typing import Any, Iterable, Union

from .errors import IntegrityError

RECORD_FORMAT = "kaas.record.v1"
ALG = "ed25519"
RECORD_FILE = "record.json"

_I64_MIN = -(2 ** 63)
_U64_MAX = 2 ** 64 - 1


def ecmascript_number(x: float) -> str:
    """A finite float in ECMAScript's Number-to-String form (as RFC 8785 uses it)."""
    if x == 0 or not math.isfinite(x):
        return "0"
    # repr gives the shortest digits that read back as the same double, as Rust's `{:e}`.
    mantissa, _, exp = ("%r" % abs(x)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # Decimal exponent n with value = 0.d1d2... x 10^n.
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    n = len(int_part) - lead_zeros + (int(exp) if exp else 0)
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        rest = "." + digits[1:] if k > 1 else ""
        body = "%s%se%s%d" % (digits[0], rest, "-" if e < 0 else "+", abs(e))
    return ("-" if x < 0 else "") + body


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _string(s: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(0), "\\u%04x" % ord(m.group(0))), s) + '"'


def _write(v: Any, out: list) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        # The service's JSON reader holds integers beyond 64 bits as doubles.
        out.append(str(v) if _I64_MIN <= v <= _U64_MAX else ecmascript_number(float(v)))
    elif isinstance(v, float):
        out.append(ecmascript_number(v))
    elif isinstance(v, str):
        out.append(_string(v))
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(v, dict):
        out.append("{")
        # Sorted by UTF-8 bytes, as the service sorts.
        for i, key in enumerate(sorted(v, key=lambda k: k.encode("utf-8"))):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(v[key], out)
        out.append("}")
    else:
        raise TypeError("not a JSON value: %r" % (v,))


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a JSON value: the bytes a record's signature covers."""
    out: list = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _key_bytes(text: Union[str, bytes], what: str) -> bytes:
    if isinstance(text, bytes):
        if len(text) == 32:
            return text
        text = text.decode("ascii", "replace")
    t = text.strip()
    try:
        raw = bytes.fromhex(t) if len(t) == 64 and all(c in "0123456789abcdefABCDEF" for c in t) else base64.b64decode(t, validate=True)
    except (ValueError, binascii.Error):
        raise IntegrityError("%s is neither 64 hex digits nor base64 of 32 bytes" % what)
    if len(raw) != 32:
        raise IntegrityError("%s holds %d bytes; an Ed25519 key is 32" % (what, len(raw)))
    return raw


def key_id(public_key: Union[str, bytes]) -> str:
    """The first 16 hex digits of the sha256 of the 32 public key bytes."""
    return hashlib.sha256(_key_bytes(public_key, "the public key")).hexdigest()[:16]


def public_keys(doc: Union[str, bytes, dict, Iterable]) -> list:
    """Public keys from a key (base64 or hex), the /.well-known/kaas-signing-keys document
    (parsed or as text), or a list of keys."""
    if isinstance(doc, (str, bytes)):
        text = doc.decode("utf-8") if isinstance(doc, bytes) and len(doc) != 32 else doc
        if isinstance(text, str) and text.strip().startswith("{"):
            return public_keys(json.loads(text))
        return [_key_bytes(doc, "the public key")]
    if isinstance(doc, dict):
        items = doc.get("keys", [doc])
        return [_key_bytes(item["public_key"], "the public key") for item in items]
    return [k for item in doc for k in public_keys(item)]


def verify_record(signed: dict, public_key, signature: dict = None) -> dict:
    """Checks a signed record: `signed` is `{"record": …, "signature": …}` (record.json,
    or a kernel answer), or the record itself with `signature` given. `public_key` is what
    `public_keys` takes. Returns the record; raises IntegrityError naming what is wrong."""
    if signature is None:
        record, signature = signed.get("record"), signed.get("signature")
    else:
        record = signed
    if not isinstance(record, dict):
        raise IntegrityError("no `record` object to verify")
    if not isinstance(signature, dict):
        raise IntegrityError("the record carries no signature")
    if record.get("format") != RECORD_FORMAT:
        raise IntegrityError("the record's format is %r, not %s" % (record.get("format"), RECORD_FORMAT))
    if signature.get("alg") != ALG:
        raise IntegrityError("the signature's algorithm is %r; kaas signs with ed25519" % (signature.get("alg"),))
    keys = {key_id(k): k for k in public_keys(public_key)}
    signer = signature.get("key_id")
    if signer not in keys:
        raise IntegrityError("the record was signed by key %s, but the public key(s) given are %s" % (signer, ", ".join(sorted(keys))))
    try:
        sig = base64.b64decode(signature.get("signature", ""), validate=True)
    except (ValueError, binascii.Error):
        raise IntegrityError("the signature is not base64")
    if not ed25519_verify(keys[signer], canonical_json(record), sig):
        raise IntegrityError("the signature does not match the record: the record (or the signature) was changed after signing")
    return record


def ed25519_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether `signature` is `public_key`'s Ed25519 signature of `message`: with the
    `cryptography` package where it is installed, else in pure Python (RFC 8032), so that
    a client without it still checks every signature it is given."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        return _ed25519_verify_pure(public_key, message, signature)
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
        return True
    except (InvalidSignature, ValueError):
        return False


# RFC 8032 section 6's verification, in extended homogeneous coordinates. Verification
# handles no secret, so plain big-integer arithmetic (not constant-time) is fine here; a
# few milliseconds a signature.
_P = 2 ** 255 - 19
_Q = 2 ** 252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _recover_x(y: int, sign: int):
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P)
    if x2 % _P == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if (x & 1) != sign:
        x = _P - x
    return x


def _point_add(a: tuple, b: tuple) -> tuple:
    pa = (a[1] - a[0]) * (b[1] - b[0]) % _P
    pb = (a[1] + a[0]) * (b[1] + b[0]) % _P
    pc = 2 * a[3] * b[3] * _D % _P
    pd = 2 * a[2] * b[2] % _P
    e, f, g, h = pb - pa, pd - pc, pd + pc, pb + pa
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _point_mul(s: int, pt: tuple) -> tuple:
    acc = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            acc = _point_add(acc, pt)
        pt = _point_add(pt, pt)
        s >>= 1
    return acc


def _decompress(b: bytes):
    y = int.from_bytes(b, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % _P)


_GY = 4 * pow(5, _P - 2, _P) % _P
_G = (_recover_x(_GY, 0), _GY, 1, _recover_x(_GY, 0) * _GY % _P)


def _ed25519_verify_pure(public_key: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decompress(public_key)
    r = _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _Q:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % _Q
    lhs, rhs = _point_mul(s, _G), _point_add(r, _point_mul(h, a))
    # Equal as projective points: x1·z2 = x2·z1 and y1·z2 = y2·z1.
    return (lhs[0] * rhs[2] - rhs[0] * lhs[2]) % _P == 0 and (lhs[1] * rhs[2] - rhs[1] * lhs[2]) % _P == 0


def verify_pulled(directory: str, public_key) -> dict:
    """Checks a directory written by `kaas pull` as `kaas verify` does: the signed record
    (record.json) verifies, kernel.ptx has the signed sha256, manifest.json is the signed
    manifest. Returns the record; raises IntegrityError naming every fault."""
    path = os.path.join(directory, RECORD_FILE)
    if not os.path.exists(path):
        path = os.path.join(directory, "kernel.json")
    try:
        with open(path, "rb") as f:
            signed = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        raise IntegrityError("cannot read the signed record in %s: %s" % (directory, e))
    record = verify_record(signed, public_key)
    faults = []
    try:
        with open(os.path.join(directory, "kernel.ptx"), "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        if sha != record.get("artifact_sha256"):
            faults.append("kernel.ptx has sha256 %s, but the signed record names %s" % (sha, record.get("artifact_sha256")))
    except OSError as e:
        faults.append("cannot read kernel.ptx: %s" % e)
    try:
        with open(os.path.join(directory, "manifest.json"), "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
        if canonical_json(manifest) != canonical_json(record.get("manifest")):
            faults.append("manifest.json differs from the signed record's manifest")
    except (OSError, ValueError) as e:
        faults.append("cannot read manifest.json: %s" % e)
    if faults:
        raise IntegrityError("; ".join(faults))
    return record
