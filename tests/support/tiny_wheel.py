"""A pure-Python wheel written in memory, for tests that ``pip install`` without a network or a
build backend: a package ``NAME`` whose ``VERSION`` is its version and a console script
``NAME-cli`` that prints it."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile


def wheel(name: str, version: str) -> tuple[str, bytes]:
    """(file name, bytes) of the wheel."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n\n\ndef main():\n    print(VERSION)\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{name}-cli = {name}:main\n",
    }
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()
