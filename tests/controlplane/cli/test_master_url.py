import pytest

from controlplane.cli.errors import CliError
from controlplane.cli.master_url import canonicalize, resolve


@pytest.mark.parametrize("raw,expected", [
    ("localhost", "http://localhost:8080"),
    ("localhost:8080", "http://localhost:8080"),
    ("10.0.0.5:9000", "http://10.0.0.5:9000"),
    ("http://example.com", "http://example.com:80"),
    ("https://example.com", "https://example.com:443"),
    ("https://example.com:8443/", "https://example.com:8443"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
])
def test_canonicalize(raw, expected):
    assert canonicalize(raw) == expected


@pytest.mark.parametrize("raw", ["", "ftp://x", "http://:80", "host:notaport"])
def test_canonicalize_rejects(raw):
    with pytest.raises(CliError):
        canonicalize(raw)


def test_resolve_precedence():
    env = {"DET_MASTER": "a:1", "DET_MASTER_ADDR": "b:2"}
    assert resolve("c:3", env) == "http://c:3"
    assert resolve(None, env) == "http://a:1"
    assert resolve(None, {"DET_MASTER_ADDR": "b:2"}) == "http://b:2"
    assert resolve(None, {}) == "http://localhost:8080"
