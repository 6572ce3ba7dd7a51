"""HTTP/1.1 answers read from a buffer that fills a piece at a time (kube/pipeline.py's I/O loop reads whatever
the socket has and parses the answers found complete, never waiting inside the parser).

A body is framed by Content-Length, by chunks, or (no length, a status that has a body) by the end of the
connection. Only the first is what kube-apiserver sends for a write's answer; the others are read so an
intermediary's answer does not put the connection out of step.
"""

from __future__ import annotations

_NO_BODY = (204, 304)


class Reply:
    """An answer, shaped like the urllib3 response `KubeApi` returns (status, reason, data, headers, read,
    release_conn)."""

    __slots__ = ("status", "reason", "data", "headers")

    def __init__(self, status: int, reason: str, data: bytes, headers: dict[str, str]) -> None:
        self.status = status
        self.reason = reason
        self.data = data
        self.headers = headers

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        """Nothing to give back: the pipeline owns its connections."""


def take_reply(buf: bytearray, *, eof: bool = False) -> tuple[Reply, bool] | None:
    """The first whole answer in `buf`, removed from it, and whether the connection stays open after it; None
    while it is incomplete (`eof`: the connection has ended, so a body without a length ends here). Raises
    ValueError for bytes that are not an HTTP/1.x answer (the connection is out of step)."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = bytes(buf[:head_end]).decode("latin-1").split("\r\n")
    version, _, rest = head[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x status line: {head[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in head[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    status = int(code)
    start = head_end + 4
    keep = headers.get("connection", "").lower() != "close" and version != "HTTP/1.0"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        found = _chunked(buf, start)
        if found is None:
            return None
        body, end = found
    elif "content-length" in headers:
        end = start + int(headers["content-length"])
        if len(buf) < end:
            return None
        body = bytes(buf[start:end])
    elif status in _NO_BODY or 100 <= status < 200:
        body, end = b"", start
    elif eof:  # no length: the body ran to the end of the connection
        body, end, keep = bytes(buf[start:]), len(buf), False
    else:
        return None
    del buf[:end]
    return Reply(status, reason, body, headers), keep


def _chunked(buf: bytearray, at: int) -> tuple[bytes, int] | None:
    """A chunked body starting at `at`: its bytes and where it ends (trailers included), None if incomplete."""
    parts: list[bytes] = []
    while True:
        line_end = buf.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(buf[at:line_end]).split(b";", 1)[0].strip() or b"0", 16)
        at = line_end + 2
        if size == 0:
            while True:  # trailers, then the empty line
                line_end = buf.find(b"\r\n", at)
                if line_end < 0:
                    return None
                if line_end == at:
                    return b"".join(parts), at + 2
                at = line_end + 2
        if len(buf) < at + size + 2:
            return None
        parts.append(bytes(buf[at : at + size]))
        at += size + 2  # the chunk and its CRLF
