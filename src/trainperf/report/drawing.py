"""Many figures drawn at once: those drawn before taken from a cache, the others drawn in
parallel processes, all handed back in order.

**Cache by content.** A figure's SVG is a function of its key (the prefix of its ids), its
drawing (``figure_kit.Drawing``: function, data, size) and the code and Matplotlib settings
that draw it. Its cache name is the SHA-256 of all of these: ``Drawing.content`` (the
``repr`` of plain data, exact for floats) and ``code_version()`` (the bytes of every
source file of this trainperf, Python's and Matplotlib's versions, Matplotlib's
settings). Changed data, code or settings give another name, so a stale figure is never
served; a cached file that is not a whole SVG is drawn again.

The cache lives in the report's own output folder, ``OUT/.figure-cache/<sha256>.svg``: a
report drawn again into the same folder (the usual case: a store that grew, the same
command run again) draws only the figures whose data changed; the folder goes with the
report and holds only the figures of the last report written there (``prune``), so it
never grows; and nothing is written outside the folder the user named.

**Processes.** Matplotlib is not thread-safe, so the figures not in the cache are drawn by
worker processes (``ProcessPoolExecutor``), as many as the CPUs this process may run on,
when there are at least ``MIN_PARALLEL``; fewer are drawn here. On Linux the workers are
forked when this process runs one thread and has not loaded JAX (Matplotlib already
imported: no start-up), and spawned otherwise. At most ``AHEAD`` figures per worker are
drawn ahead of the one handed back, so memory stays bounded however many figures a
report has.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import platform
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from trainperf.core.fileio import write_atomic
from trainperf.report.figure_kit import Drawing, Figure

CACHE_DIR = ".figure-cache"
MIN_PARALLEL = 4  # fewer figures to draw than this: a worker's start costs more than it saves
AHEAD = 16  # figures drawn ahead per worker: the SVGs of a page or two


@cache
def code_version() -> str:
    """SHA-256 of what draws a figure besides its data: every source file of this
    trainperf, Python's and Matplotlib's versions and Matplotlib's settings."""
    import matplotlib

    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    digest.update(f"{platform.python_version()} {matplotlib.__version__}".encode())
    digest.update(repr(sorted(matplotlib.rcParams.items())).encode())
    return digest.hexdigest()


class FigureCache:
    """SVGs named by the SHA-256 of their content, in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.used: set[str] = set()
        self.hits = 0

    def name(self, figure: Figure) -> str:
        text = code_version() + "\0" + figure.drawing.content(figure.key)
        return hashlib.sha256(text.encode()).hexdigest()

    def has(self, name: str) -> bool:
        return (self.folder / f"{name}.svg").is_file()

    def get(self, name: str) -> str | None:
        """The SVG stored under ``name``, or None (absent, or not a whole SVG)."""
        self.used.add(name)
        path = self.folder / f"{name}.svg"
        try:
            svg = path.read_text(encoding="utf-8") if path.is_file() else ""
        except (OSError, UnicodeDecodeError):
            return None
        if svg.startswith("<svg") and svg.rstrip().endswith("</svg>"):
            self.hits += 1
            return svg
        return None

    def put(self, name: str, svg: str) -> None:
        self.used.add(name)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.folder / f"{name}.svg", svg)

    def prune(self) -> None:
        """Remove the SVGs that no figure of this report used."""
        if not self.folder.is_dir():
            return
        for path in self.folder.glob("*.svg"):
            if path.stem not in self.used and path.is_file():
                path.unlink(missing_ok=True)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _render(key: str, drawing: Drawing) -> str:
    return drawing.render(key)


def _pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    # JAX's runtime threads are not Python threads (active_count does not see them), and a
    # fork of a process that holds them can deadlock (JAX warns so): spawn then.
    single = threading.active_count() == 1 and "jax" not in sys.modules
    method = "fork" if sys.platform == "linux" and single else "spawn"
    return concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context(method)
    )


@contextmanager
def drawn(
    figures: Iterable[Figure], cache: FigureCache | None = None, workers: int | None = None
) -> Iterator[Iterator[Figure]]:
    """The figures with their SVGs, in the order given, as an iterator valid in this
    context: from ``cache`` where it holds them, the others drawn in ``workers`` processes
    (default: the usable CPUs), which start drawing on entry, ahead of the figures taken,
    and stop on exit; each new SVG is stored in ``cache``."""
    jobs = [(f, cache.name(f) if cache else "") for f in figures]
    missing = [i for i, (_, name) in enumerate(jobs) if not (cache and cache.has(name))]
    workers = min(usable_cpus() if workers is None else workers, len(missing))
    if workers < 2 or len(missing) < MIN_PARALLEL:
        yield (figure.drawn(_svg(figure, name, cache, None)) for figure, name in jobs)
        return
    pool = _pool(workers)
    ahead: dict[int, concurrent.futures.Future[str]] = {}
    to_draw = iter(missing)

    def top_up() -> None:
        while len(ahead) < AHEAD * workers and (j := next(to_draw, None)) is not None:
            ahead[j] = pool.submit(_render, jobs[j][0].key, jobs[j][0].drawing)

    def in_order() -> Iterator[Figure]:
        for i, (figure, name) in enumerate(jobs):
            top_up()
            yield figure.drawn(_svg(figure, name, cache, ahead.pop(i, None)))

    try:
        top_up()
        yield in_order()
    finally:
        pool.shutdown(cancel_futures=True)


def _svg(
    figure: Figure,
    name: str,
    cache: FigureCache | None,
    drawing: concurrent.futures.Future[str] | None,
) -> str:
    """The SVG a worker drew, else the cache's, else one drawn here; a new one is cached."""
    if drawing is None and cache and (svg := cache.get(name)) is not None:
        return svg
    svg = drawing.result() if drawing else figure.svg
    if cache:
        cache.put(name, svg)
    return svg
