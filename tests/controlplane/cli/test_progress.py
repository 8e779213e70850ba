import io

from controlplane.cli.progress import CHUNK, ProgressBody, bar_line


def test_bar_line_format():
    mib = 1024 * 1024
    assert bar_line("uploading context", int(12.3 * mib), 40 * mib, width=10) == \
        "uploading context  [###       ] 12.3/40.0 MiB"
    assert bar_line("x", 0, 0, width=4) == "x  [####] 0.0/0.0 MiB"


def test_body_chunks_and_bar_only_when_asked():
    data = bytes(range(256)) * (CHUNK // 256 * 3 + 10)
    quiet = io.StringIO()
    body = ProgressBody(data, stream=quiet)
    assert not body.show  # StringIO is not a tty
    chunks = list(body)
    assert len(body) == len(data) and b"".join(chunks) == data
    assert max(len(c) for c in chunks) == CHUNK and len(chunks) == 4
    assert quiet.getvalue() == ""
    assert b"".join(body) == data  # re-iterable (a retried request re-sends it)

    loud = io.StringIO()
    list(ProgressBody(data, stream=loud, show=True))
    out = loud.getvalue()
    assert out.count("\r") == 4 and out.endswith("\n") and "[" + "#" * 30 + "]" in out
