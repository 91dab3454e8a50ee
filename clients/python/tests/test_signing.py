"""Signed run records: the canonical form matches the service's byte for byte (on a
fixture the Rust code made), and signatures verify; tampering fails -- with the optional
`cryptography` package and with the pure-Python check used without it (the comparison of
the two on fresh keys skips, saying so, without `cryptography`)."""

import copy
import hashlib
import json
import os
import tempfile
import unittest

from kaas_client import signing
from kaas_client.errors import IntegrityError

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "signed_record.json")

try:
    import cryptography  # noqa: F401

    HAVE_CRYPTOGRAPHY = True
except ImportError:
    HAVE_CRYPTOGRAPHY = False

needs_cryptography = unittest.skipUnless(HAVE_CRYPTOGRAPHY, "SKIP: the `cryptography` package is not installed (pip install cryptography)")


def load_fixture():
    with open(FIXTURE, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


class CanonicalForm(unittest.TestCase):
    def test_numbers_follow_ecmascript_as_the_service_does(self):
        # The same cases as src/signing/canonical.rs.
        cases = [
            (900.0, "900"), (0.5, "0.5"), (-2.25, "-2.25"), (0.1, "0.1"), (1.5e-5, "0.000015"),
            (1e-6, "0.000001"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (1e16, "10000000000000000"),
            (1e21, "1e+21"), (1.2345e22, "1.2345e+22"), (123456789012345680000.0, "123456789012345680000"),
            (-0.0, "0"), (1.7976931348623157e308, "1.7976931348623157e+308"), (5e-324, "5e-324"),
            (1234.5678, "1234.5678"),
        ]
        for x, want in cases:
            self.assertEqual(signing.ecmascript_number(x), want, repr(x))

    def test_key_order_and_whitespace_do_not_matter(self):
        a = json.loads('{"b": 1, "a": {"y": [1, 2.0, "x"], "x": null}, "c": true}')
        b = json.loads('{"c":true,"a":{"x":null,"y":[1,2.0,"x"]},"b":1}')
        self.assertEqual(signing.canonical_json(a), signing.canonical_json(b))
        self.assertEqual(signing.canonical_json(a), b'{"a":{"x":null,"y":[1,2,"x"]},"b":1,"c":true}')

    def test_strings_escape_only_quotes_backslashes_and_controls(self):
        got = signing.canonical_json({"s": 'a"b\\c\n\t\x01\x7fé→😀/'})
        self.assertEqual(got, '{"s":"a\\"b\\\\c\\n\\t\\u0001\x7fé→😀/"}'.encode("utf-8"))

    def test_the_rust_fixture_encodes_to_the_same_bytes(self):
        fx = load_fixture()
        self.assertEqual(signing.canonical_json(fx["record"]), fx["canonical"].encode("utf-8"))
        self.assertEqual(signing.key_id(fx["public_key"]), fx["key_id"])
        self.assertEqual(fx["signature"]["key_id"], fx["key_id"])

    def test_keys_are_read_from_the_well_known_document(self):
        fx = load_fixture()
        doc = json.dumps({"keys": [{"key_id": fx["key_id"], "alg": "ed25519", "public_key": fx["public_key"], "current": True}]})
        self.assertEqual([signing.key_id(k) for k in signing.public_keys(doc)], [fx["key_id"]])
        with self.assertRaises(IntegrityError):
            signing.public_keys("not a key")


class Verification(unittest.TestCase):
    """With `cryptography` where it is installed, else the pure-Python check."""

    def setUp(self):
        self.fx = load_fixture()
        self.signed = {"record": self.fx["record"], "signature": self.fx["signature"]}

    def test_the_rust_signature_verifies(self):
        record = signing.verify_record(self.signed, self.fx["public_key"])
        self.assertEqual(record["verdict"], "pass")
        signing.verify_record(self.fx["record"], self.fx["public_key"], signature=self.fx["signature"])

    def test_a_changed_record_or_signature_fails(self):
        tampered = copy.deepcopy(self.signed)
        tampered["record"]["timings"]["graph"]["median_us"] = 800.0
        with self.assertRaisesRegex(IntegrityError, "does not match"):
            signing.verify_record(tampered, self.fx["public_key"])
        bad = copy.deepcopy(self.signed)
        sig = bytearray(signing.base64.b64decode(bad["signature"]["signature"]))
        sig[5] ^= 1
        bad["signature"]["signature"] = signing.base64.b64encode(bytes(sig)).decode()
        with self.assertRaisesRegex(IntegrityError, "does not match"):
            signing.verify_record(bad, self.fx["public_key"])

    def test_another_key_is_named(self):
        other = signing.base64.b64encode(bytes(range(32))).decode()
        with self.assertRaisesRegex(IntegrityError, "signed by key " + self.fx["key_id"]):
            signing.verify_record(self.signed, other)

    def write_pulled(self, d):
        with open(os.path.join(d, "kernel.ptx"), "w") as f:
            f.write(self.fx["ptx"])
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(self.fx["record"]["manifest"], f, indent=2)
        with open(os.path.join(d, "record.json"), "w") as f:
            json.dump(self.signed, f, indent=2)

    def test_a_pulled_directory_verifies_until_its_ptx_or_manifest_changes(self):
        self.assertEqual(hashlib.sha256(self.fx["ptx"].encode()).hexdigest(), self.fx["record"]["artifact_sha256"])
        with tempfile.TemporaryDirectory() as d:
            self.write_pulled(d)
            self.assertEqual(signing.verify_pulled(d, self.fx["public_key"])["run_id"], 42)
            with open(os.path.join(d, "kernel.ptx"), "a") as f:
                f.write("// one more line\n")
            with self.assertRaisesRegex(IntegrityError, "kernel.ptx has sha256"):
                signing.verify_pulled(d, self.fx["public_key"])
        with tempfile.TemporaryDirectory() as d:
            self.write_pulled(d)
            manifest = copy.deepcopy(self.fx["record"]["manifest"])
            manifest["launches"][0]["grid"][0] += 1
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump(manifest, f)
            with self.assertRaisesRegex(IntegrityError, "manifest.json differs"):
                signing.verify_pulled(d, self.fx["public_key"])


class VerificationInPurePython(Verification):
    """The same tests through the RFC 8032 check a client without `cryptography` uses."""

    def setUp(self):
        super().setUp()
        self.saved = signing.ed25519_verify
        signing.ed25519_verify = signing._ed25519_verify_pure

    def tearDown(self):
        signing.ed25519_verify = self.saved


@needs_cryptography
class PureAgainstCryptography(unittest.TestCase):
    def test_the_pure_check_agrees_with_cryptography_on_fresh_keys_and_tampering(self):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
        for i in range(4):
            key = Ed25519PrivateKey.generate()
            public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            message = os.urandom(i * 37)
            sig = key.sign(message)
            self.assertTrue(signing._ed25519_verify_pure(public, message, sig))
            bad = bytearray(sig)
            bad[i * 13 % 64] ^= 1 << i
            self.assertFalse(signing._ed25519_verify_pure(public, message, bytes(bad)))
            self.assertFalse(signing._ed25519_verify_pure(public, message + b"x", sig))
            self.assertFalse(signing._ed25519_verify_pure(public, message, sig[:63]))


if __name__ == "__main__":
    unittest.main()
