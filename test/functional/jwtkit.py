"""Keys and tokens for the --auth jwt tests: RSA 2048 and EC P-256 key pairs,
their JWKS and PEM forms, and signed JWTs (RS256, ES256, HS256, and the bad
kinds). With the `cryptography` module when it is installed, else the
`openssl` command line."""
import base64
import hashlib
import hmac
import json
import os
import subprocess
import tempfile
import time

try:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    HAVE_CRYPTOGRAPHY = True
except ImportError:                      # pragma: no cover - the openssl CLI path
    HAVE_CRYPTOGRAPHY = False


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _int_bytes(n, size=None):
    size = size or (n.bit_length() + 7) // 8
    return n.to_bytes(size, "big")


def _der_rs(der):
    """r, s of a DER ECDSA-Sig-Value."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 3
    out = []
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        out.append(int.from_bytes(der[i + 2:i + 2 + n], "big"))
        i += 2 + n
    return out


class Key:
    """kind: "RSA" or "EC"; kid names it in the JWKS."""

    def __init__(self, kind, kid):
        self.kind, self.kid = kind, kid
        self.dir = tempfile.mkdtemp(prefix="coraine-jwt-")
        if HAVE_CRYPTOGRAPHY:
            self.priv = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "RSA"
                         else ec.generate_private_key(ec.SECP256R1()))
            pub = self.priv.public_key()
            self.pem = pub.public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
            nums = pub.public_numbers()
            if kind == "RSA":
                self.jwk = {"kty": "RSA", "n": b64u(_int_bytes(nums.n)), "e": b64u(_int_bytes(nums.e))}
            else:
                self.jwk = {"kty": "EC", "crv": "P-256", "x": b64u(_int_bytes(nums.x, 32)),
                            "y": b64u(_int_bytes(nums.y, 32))}
        else:
            self.keyfile = os.path.join(self.dir, "key.pem")
            opts = (["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"] if kind == "RSA"
                    else ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
            subprocess.run(["openssl", "genpkey"] + opts + ["-out", self.keyfile], check=True, capture_output=True)
            self.pem = subprocess.run(["openssl", "pkey", "-in", self.keyfile, "-pubout"], check=True,
                                      capture_output=True).stdout
            der = subprocess.run(["openssl", "pkey", "-in", self.keyfile, "-pubout", "-outform", "DER"], check=True,
                                 capture_output=True).stdout
            if kind == "RSA":
                mod = subprocess.run(["openssl", "rsa", "-in", self.keyfile, "-modulus", "-noout"], check=True,
                                     capture_output=True, text=True).stdout.strip().split("=", 1)[1]
                self.jwk = {"kty": "RSA", "n": b64u(bytes.fromhex(mod)), "e": b64u(_int_bytes(65537))}
            else:
                pt = der[-65:]           # SubjectPublicKeyInfo ends with the uncompressed point
                assert pt[0] == 4
                self.jwk = {"kty": "EC", "crv": "P-256", "x": b64u(pt[1:33]), "y": b64u(pt[33:])}
        self.jwk.update({"kid": kid, "use": "sig", "alg": "RS256" if kind == "RSA" else "ES256"})

    @property
    def alg(self):
        return "RS256" if self.kind == "RSA" else "ES256"

    def sign(self, data):
        if HAVE_CRYPTOGRAPHY:
            if self.kind == "RSA":
                return self.priv.sign(data, padding.PKCS1v15(), hashes.SHA256())
            r, s = decode_dss_signature(self.priv.sign(data, ec.ECDSA(hashes.SHA256())))
            return _int_bytes(r, 32) + _int_bytes(s, 32)
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", self.keyfile], input=data, check=True,
                             capture_output=True).stdout
        if self.kind == "RSA":
            return sig
        r, s = _der_rs(sig)
        return _int_bytes(r, 32) + _int_bytes(s, 32)


def jwks(*keys):
    return json.dumps({"keys": [k.jwk for k in keys]})


def token(claims, key=None, secret=None, alg=None, kid=Ellipsis, header=None, sign=True):
    """A compact JWS of claims: signed with key (RS256/ES256) or secret (HS256)."""
    h = {"typ": "JWT", "alg": alg or (key.alg if key else "HS256")}
    if key is not None and kid is Ellipsis:
        h["kid"] = key.kid
    elif kid not in (Ellipsis, None):
        h["kid"] = kid
    if header:
        h.update(header)
    si = (b64u(json.dumps(h).encode()) + "." + b64u(json.dumps(claims).encode())).encode()
    if not sign:
        return si.decode() + "."
    if key is not None:
        sig = key.sign(si)
    else:
        sig = hmac.new(secret.encode(), si, hashlib.sha256).digest()
    return si.decode() + "." + b64u(sig)


def claims(tenants=None, lifetime=300, **extra):
    now = int(time.time())
    c = {"sub": "alice", "iat": now, "exp": now + lifetime}
    if tenants is not None:
        c["ngsildTenants"] = tenants
    c.update(extra)
    return c
