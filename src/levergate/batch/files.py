"""Files on disk: uploads streamed in, results written out, never a whole file in memory.

An upload (`receive`) is `multipart/form-data` as the OpenAI SDKs send it (`purpose`, `file`).
It is parsed as the chunks arrive with python-multipart's push parser — the one Starlette and
FastAPI use, kept up by their maintainers, fuzzed, and streaming by design: a hand-written
boundary scanner is exactly the code that goes wrong on a boundary split across two chunks.
The file part goes to a temporary file in `dir/tmp` in writes of about 1 MiB (in a thread, so
a slow disk never stalls the loop), and is renamed into `dir/files/<id>` once accepted. A full
disk is `StorageFull` (507) and leaves nothing behind: no record is written for a file that
is not whole on disk. Any failure (a malformed or stalled body, a quota, a client gone)
removes the temporary file; one its writer never removed (the process was killed) is found
by `Disk.sweep`, at start and then periodically: a temporary file's writer holds a `flock` on
it from the moment it exists while it lives, so a file whose lock is free is an orphan — and
several gateway processes sharing `dir` never remove each other's uploads in flight.

Output and error files (`write_lines`) are written to a temporary file, fsynced and renamed,
so a crash mid-write leaves the old state, and finalizing simply runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from python_multipart.multipart import MultipartParser, parse_options_header

from levergate.errors import BadRequest, LevergateError, PayloadTooLarge

FLUSH_BYTES = 1 << 20
PART, NEW = ".part", ".new"  # a temporary file; one being made (not yet locked)
MAX_FIELD_BYTES = 1024  # `purpose` and any other small field
MAX_BOUNDARY_BYTES = 70  # RFC 2046; python-multipart raises (a 500) past 256
MAX_FILENAME_CHARS = 256


class StorageFull(LevergateError):
    """The disk under `batch.dir` is full: nothing was accepted, try again later."""

    status: ClassVar[int] = 507
    type: ClassVar[str] = "server_error"


def storage_error(exc: OSError) -> LevergateError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(
            "The gateway's batch storage is full; nothing was stored. Try again later.",
            code="storage_full",
        )
    return StorageFull(f"The gateway could not write the file: {exc.strerror}.", code="io_error")


@dataclass(frozen=True, slots=True)
class Temp:
    """A temporary file being written: `fd` is open on it and holds an exclusive `flock`, which
    says the file is in use for as long as this process lives (the kernel drops the lock when
    it dies, however it dies). `Disk.keep` renames it into place, `Disk.drop` removes it."""

    path: Path
    fd: int


@dataclass(frozen=True, slots=True)
class Upload:
    temp: Temp  # `Disk.keep` it or `Disk.drop` it
    filename: str
    purpose: str
    size: int
    fields: dict[str, bytes]  # every small field, as sent (`expires_after[seconds]`, ...)

    @property
    def path(self) -> Path:
        return self.temp.path


class Disk:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, file_id: str) -> Path:
        return self.root / "files" / file_id

    async def temp(self) -> Temp:
        return await asyncio.to_thread(self._temp)

    def _temp(self) -> Temp:
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        name = secrets.token_hex(12)
        # Made and locked under a name the sweep does not take for an upload, then renamed:
        # a `.part` file is locked from the moment it exists.
        born = tmp / f"{name}{NEW}"
        fd = os.open(born, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
            path = born.with_suffix(PART)
            born.replace(path)
        except BaseException:
            os.close(fd)
            born.unlink(missing_ok=True)
            raise
        return Temp(path, fd)

    async def keep(self, temp: Temp, file_id: str) -> None:
        target = self.path(file_id)
        await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(os.replace, temp.path, target)
        await asyncio.to_thread(os.close, temp.fd)

    async def drop(self, temp: Temp) -> None:
        """Remove a temporary file, even when the task is cancelled again meanwhile (a client
        gone mid-upload, a shutdown): the thread finishes the removal either way."""
        await asyncio.shield(asyncio.to_thread(_remove, temp))

    async def discard(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(path.unlink)

    async def sweep(self, *, older_than: float) -> int:
        """Remove the temporary files no live process is writing (their lock is free): what a
        killed process, or a failure this code did not see, left behind. A file caught between
        being made and being locked (a few microseconds; then killed) goes once `older_than`
        seconds old. The number removed."""
        return await asyncio.to_thread(self._sweep, older_than)

    def _sweep(self, older_than: float) -> int:
        tmp = self.root / "tmp"
        removed = 0
        with contextlib.suppress(FileNotFoundError):
            for path in tmp.glob(f"*{PART}"):
                with contextlib.suppress(OSError):
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # in use: BlockingIOError
                        path.unlink()
                        removed += 1
                    finally:
                        os.close(fd)
            cutoff = time.time() - older_than
            for path in tmp.glob(f"*{NEW}"):
                with contextlib.suppress(OSError):
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
        return removed

    async def write_lines(
        self, file_id: str, pages: Callable[[], AsyncIterator[list[bytes]]]
    ) -> int:
        """Write every page of lines to `file_id` atomically; its size in bytes."""
        temp = await self.temp()
        size = 0
        try:
            async for page in pages():
                data = b"".join(line + b"\n" for line in page)
                await asyncio.to_thread(_write_all, temp.fd, data)
                size += len(data)
            await asyncio.to_thread(os.fsync, temp.fd)
        except OSError as exc:
            await self.drop(temp)
            raise storage_error(exc) from exc
        except BaseException:
            await self.drop(temp)
            raise
        await self.keep(temp, file_id)
        return size


def _remove(temp: Temp) -> None:
    with contextlib.suppress(OSError):
        temp.path.unlink()
    with contextlib.suppress(OSError):
        os.close(temp.fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Parts:
    """The multipart parser's callbacks: which part is open, its name, its bytes."""

    def __init__(self, sink: Callable[[bytes], None], *, max_file_bytes: int) -> None:
        self.sink = sink
        self.max_file_bytes = max_file_bytes
        self.fields: dict[str, bytes] = {}
        self.filename: str | None = None
        self.file_bytes = 0
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._name: str | None = None
        self._is_file = False
        # The closing boundary (`--boundary--`) arrived: without it the body was cut short,
        # and a file cut at a line boundary would otherwise be kept, truncated, as whole.
        self.ended = False

    def callbacks(self) -> dict[str, Callable[..., None]]:
        return {
            "on_end": self._end,
            "on_part_begin": self._begin,
            "on_header_field": self._field,
            "on_header_value": self._value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_done,
            "on_part_data": self._data,
        }

    def _begin(self) -> None:
        self._disposition, self._name, self._is_file = b"", None, False

    def _end(self) -> None:
        self.ended = True

    def _field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]
        if len(self._header_name) > MAX_FIELD_BYTES:
            raise BadRequest("A multipart header is too long.", code="invalid_multipart")

    def _value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        if len(self._header_value) > 4 * MAX_FIELD_BYTES:
            raise BadRequest("A multipart header is too long.", code="invalid_multipart")

    def _header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name, self._header_value = b"", b""

    def _headers_done(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = options.get(b"name")
        self._name = name.decode("utf-8", "replace") if name is not None else None
        if self._name == "file":
            if self.filename is not None:
                raise BadRequest("Send one 'file' part.", code="invalid_multipart", param="file")
            raw = options.get(b"filename", b"upload.jsonl").decode("utf-8", "replace")
            self.filename = Path(raw.replace("\\", "/")).name[:MAX_FILENAME_CHARS] or "upload"
            self._is_file = True

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._is_file:
            self.file_bytes += end - start
            if self.file_bytes > self.max_file_bytes:
                raise PayloadTooLarge.over(self.max_file_bytes)
            self.sink(data[start:end])
        elif self._name is not None:
            value = self.fields.get(self._name, b"") + data[start:end]
            if len(value) > MAX_FIELD_BYTES or len(self.fields) > 16:
                raise BadRequest(f"The field {self._name[:64]!r} is too long.", param=self._name)
            self.fields[self._name] = value


async def receive(
    chunks: AsyncIterator[bytes],
    *,
    content_type: str,
    disk: Disk,
    max_file_bytes: int,
    meter: Callable[[int], None] | None = None,
) -> Upload:
    """Stream a multipart upload to a temporary file; BadRequest if it is not a file upload.
    `meter` sees the size of each piece of the file before it is kept, and raises to refuse
    the upload (a tenant's storage quota). On any failure the temporary file is removed."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary or len(boundary) > MAX_BOUNDARY_BYTES:
        raise BadRequest(
            "Upload the file as multipart/form-data with 'purpose' and 'file' fields (its "
            f"boundary 1 to {MAX_BOUNDARY_BYTES} characters).",
            code="invalid_content_type",
        )
    temp = await disk.temp()
    pending: list[bytes] = []
    buffered = 0

    def sink(data: bytes) -> None:
        nonlocal buffered
        if meter is not None:
            meter(len(data))
        pending.append(data)
        buffered += len(data)

    async def flush() -> None:
        nonlocal buffered
        if pending:
            data = b"".join(pending)
            pending.clear()
            buffered = 0
            await asyncio.to_thread(_write_all, temp.fd, data)

    parts = _Parts(sink, max_file_bytes=max_file_bytes)
    parser = MultipartParser(boundary, parts.callbacks())  # type: ignore[arg-type]
    try:
        await _feed(chunks, parser, parts=parts, flush=flush, buffered=lambda: buffered)
        await flush()
        await asyncio.to_thread(os.fsync, temp.fd)
        filename = _filename(parts)
    except OSError as exc:
        await disk.drop(temp)
        raise storage_error(exc) from exc
    except BaseException:
        await disk.drop(temp)
        raise
    purpose = parts.fields.get("purpose", b"").decode("utf-8", "replace").strip()
    return Upload(temp, filename, purpose, parts.file_bytes, parts.fields)


def _filename(parts: _Parts) -> str:
    if parts.filename is None:
        raise BadRequest("Missing required parameter: 'file'.", param="file")
    return parts.filename


async def _feed(
    chunks: AsyncIterator[bytes],
    parser: MultipartParser,
    *,
    parts: _Parts,
    flush: Callable[[], Awaitable[None]],
    buffered: Callable[[], int],
) -> None:
    from python_multipart.exceptions import MultipartParseError

    try:
        async for chunk in chunks:
            parser.write(chunk)
            if buffered() >= FLUSH_BYTES:
                await flush()
        parser.finalize()
    except MultipartParseError as exc:
        raise BadRequest(
            f"The multipart body is malformed: {exc}", code="invalid_multipart"
        ) from None
    if not parts.ended:
        raise BadRequest(
            "The multipart body ended before its closing boundary: the upload is incomplete.",
            code="invalid_multipart",
        )
