"""Trusting a private CA for the catalog's `https://` servers (REST catalog, Nessie) and a Spark Connect server
over TLS: `[lakehouse] ca_bundle`.

One PEM file, three consumers that each have their own idea of trust:

- Python (httpx: the no-JVM metadata reads, the Nessie client, `wap doctor`): an `ssl.SSLContext` with the
  CAs httpx trusts by default ($SSL_CERT_FILE, else certifi's) plus the bundle's certificates.
- The JVM (Iceberg's REST client, Nessie's client inside Spark, a `wap serve` Connect server): Java's default
  trust store, replaced through `-Djavax.net.ssl.trustStore`. Java's PKCS12 only trusts entries that carry its
  own "trusted certificate" attribute, which other tools do not write, so the store is made by the JDK's own
  `keytool`: the JDK's cacerts (S3, Maven and every public endpoint stay trusted) plus each certificate of the
  bundle. It is cached by content (bundle + JDK) under the jar cache's parent, so only the first JVM builds it.
  Its password only guards the file's integrity (it holds public certificates), so it is a fixed one.
- gRPC (a Spark Connect client, `sc://...;use_ssl=true`): root certificates as PEM bytes, the same public CAs
  as httpx plus the bundle's (`trusted_pem`; wapflow.lakehouse.connect_channel).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from wapflow.errors import ConfigError, EnvironmentProblem

if TYPE_CHECKING:
    from wapflow.config import WapConfig

KEY = "[lakehouse] ca_bundle"
TRUSTSTORE_PASSWORD = "wapflow-truststore"  # public certificates only: no secret to guard
_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\s+.+?-----END CERTIFICATE-----", re.DOTALL)


def ca_bundle(cfg: WapConfig) -> Path | None:
    """The configured CA bundle (relative to wap.toml's folder), checked to hold PEM certificates."""
    raw = cfg.lakehouse.ca_bundle
    if not raw:
        return None
    path = (cfg.base_dir / Path(raw).expanduser()).resolve()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(
            f"{KEY} = {raw!r}: {path} cannot be read ({e.strerror or type(e).__name__})",
            hint="point it at the PEM file of the CA that signed the catalog server's certificate",
        ) from None
    if not _CERT.search(data):
        raise ConfigError(
            f"{KEY} = {raw!r}: {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            hint="export the CA's certificate as PEM (openssl x509 -in ca.der -inform der -out ca.pem)",
        )
    return path


def ssl_context(cfg: WapConfig) -> ssl.SSLContext | bool:
    """What httpx's `verify=` gets: the public CAs plus the bundle, or True (httpx's default) without one."""
    bundle = ca_bundle(cfg)
    if bundle is None:
        return True
    ctx = ssl.create_default_context(cafile=public_cafile())
    try:
        ctx.load_verify_locations(cafile=str(bundle))
    except ssl.SSLError as e:
        raise ConfigError(f"{KEY}: {bundle} is not a usable PEM bundle ({e.reason or e})") from None
    return ctx


def public_cafile() -> str:
    """The public CAs httpx trusts by default: $SSL_CERT_FILE when set, else certifi's (which comes with httpx)."""
    system = os.environ.get("SSL_CERT_FILE")
    if system and Path(system).is_file():
        return system
    import certifi

    return str(certifi.where())


def trusted_pem(cfg: WapConfig) -> bytes:
    """The public CAs plus the bundle's certificates, as PEM: the roots of a gRPC channel (Spark Connect), which
    takes certificates, not files. The same trust as `ssl_context` gives httpx."""
    public = Path(public_cafile()).read_bytes()
    bundle = ca_bundle(cfg)
    if bundle is None:
        return public
    return public.rstrip() + b"\n" + b"\n".join(_CERT.findall(bundle.read_bytes())) + b"\n"


def trusted_pem_file(cfg: WapConfig) -> Path:
    """`trusted_pem` as a file (for clients that take a CA file, e.g. PyIceberg's `ssl.cabundle`), kept beside
    the Java trust stores and named by its content, so concurrent commands write the same bytes once."""
    import hashlib

    pem = trusted_pem(cfg)
    path = truststore_dir() / f"trusted-{hashlib.sha256(pem).hexdigest()[:16]}.pem"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(pem)
        os.replace(tmp, path)
    return path


def java_options(cfg: WapConfig) -> list[str]:
    """-D options that make a JVM trust the bundle (and the JDK's own CAs); [] without a bundle."""
    bundle = ca_bundle(cfg)
    if bundle is None:
        return []
    store = truststore(bundle)
    return [
        f"-Djavax.net.ssl.trustStore={store}",
        f"-Djavax.net.ssl.trustStorePassword={TRUSTSTORE_PASSWORD}",
        "-Djavax.net.ssl.trustStoreType=PKCS12",
    ]


def _keytool() -> str:
    from wapflow.lakehouse.jvm import find_java

    java = find_java()
    found = Path(java).resolve().parent / "keytool" if java else None
    if found is not None and found.is_file():
        return str(found)
    on_path = shutil.which("keytool")
    if on_path:
        return on_path
    raise EnvironmentProblem(
        f"{KEY} needs the JDK's keytool to make a Java trust store, and none was found beside {java or 'java'}",
        hint="install a full JDK (keytool comes with it) or set JAVA_HOME to one",
    )


def _cacerts(keytool: str) -> Path | None:
    home = Path(keytool).resolve().parent.parent
    for cand in (home / "lib" / "security" / "cacerts", home / "jre" / "lib" / "security" / "cacerts"):
        if cand.is_file():
            return cand
    return None


def truststore_dir() -> Path:
    from wapflow.lakehouse.jvm import default_jars_dir

    return default_jars_dir().parent / "truststores"


def truststore(bundle: Path) -> Path:
    """A PKCS12 trust store (made by keytool) with the JDK's CAs and the bundle's certificates; cached by content."""
    keytool = _keytool()
    certs = _CERT.findall(bundle.read_bytes())
    cacerts = _cacerts(keytool)
    digest = hashlib.sha256(b"\n".join(certs) + str(cacerts).encode()).hexdigest()[:20]
    folder = truststore_dir()
    store = folder / f"{digest}.p12"
    if store.is_file():
        return store
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{digest}.{os.getpid()}.p12"
    tmp.unlink(missing_ok=True)
    common = ["-noprompt", "-storetype", "PKCS12", "-keystore", str(tmp), "-storepass", TRUSTSTORE_PASSWORD]
    steps: list[list[str]] = []
    if cacerts is not None:
        src_type = "JKS" if cacerts.read_bytes()[:4] == b"\xfe\xed\xfe\xed" else "PKCS12"
        source = ["-srckeystore", str(cacerts), "-srcstorepass", "changeit", "-srcstoretype", src_type]
        dest = ["-destkeystore", str(tmp), "-deststorepass", TRUSTSTORE_PASSWORD, "-deststoretype", "PKCS12"]
        steps.append([keytool, "-importkeystore", *source, *dest, "-noprompt"])
    pems = []
    for i, cert in enumerate(certs):
        pem = folder / f".{digest}.{os.getpid()}.{i}.pem"
        pem.write_bytes(cert + b"\n")
        pems.append(pem)
        steps.append([keytool, "-importcert", "-trustcacerts", "-alias", f"wapflow-ca-{i}", "-file", str(pem), *common])
    try:
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                last = (done.stderr or done.stdout).strip().splitlines()
                raise EnvironmentProblem(
                    f"keytool could not make a Java trust store from {KEY} {bundle}: {last[-1] if last else 'failed'}",
                    hint="check that the file holds the CA's certificate(s) in PEM",
                )
        tmp.replace(store)
    finally:
        tmp.unlink(missing_ok=True)
        for pem in pems:
            pem.unlink(missing_ok=True)
    return store
