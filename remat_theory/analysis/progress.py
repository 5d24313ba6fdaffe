"""A small progress bar on stderr, with no dependency.

Long sweeps (``remat verify``, ``remat hard``, ``remat bench``) show how far they are and
how long is left: on a terminal a bar redrawn in place (at most ten times a second, so that
a sweep of many tiny tasks does not spend its time printing); elsewhere (a log, a pipe, a
CI job) one plain line every :attr:`Progress.line_interval` seconds, written by a
background thread so that a line comes even while one long step runs, and nothing at all
for a run shorter than that.  ``enabled=False`` prints nothing.  Progress goes to stderr
only: a command's stdout (``--json``) stays clean.

Usage::

    with Progress(total=len(items), desc="verify") as bar:
        for item in items:
            work(item)
            bar.update()
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress"]


def _fmt_seconds(s: float) -> str:
    if s < 60:
        return f"{s:4.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class Progress:
    """A one-line progress bar: ``desc [#####.....] done/total pct elapsed eta``.

    Parameters
    ----------
    total : number of steps (>= 0).
    desc : a short label printed before the bar.
    enabled : ``None`` (default): a bar when ``stream`` is a terminal, else a line every
        :attr:`line_interval` seconds; ``True``: the bar; ``False``: nothing.
    stream : where to draw (default ``sys.stderr``).
    width : width of the bar itself, in characters.
    """

    min_interval = 0.1  # seconds between two redraws
    line_interval = 5.0  # seconds between two lines when the stream is not a terminal

    def __init__(self, total: int, desc: str = "", *, enabled: bool | None = None,
                 stream: TextIO | None = None, width: int = 30) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"total = {total!r} must be an integer >= 0")
        self.total = total
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.lines = False  # plain lines from a background thread instead of the bar
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            try:
                enabled = bool(isatty and isatty())
            except (ValueError, OSError):  # closed stream
                enabled = False
            self.lines = not enabled
        self.enabled = enabled
        self.width = width
        self.done = 0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False
        self._closed = False
        self._stop = threading.Event()
        self._thread = None
        if self.lines:
            self._thread = threading.Thread(target=self._line_loop, daemon=True)
            self._thread.start()

    def _line_loop(self) -> None:
        while not self._stop.wait(self.line_interval):
            try:
                self.stream.write(self.line() + "\n")
                self.stream.flush()
            except (ValueError, OSError):  # stream closed under us
                return

    def line(self) -> str:
        """The text of the bar as it would be drawn now (without the carriage return)."""
        elapsed = time.monotonic() - self.start
        frac = self.done / self.total if self.total else 1.0
        frac = min(1.0, frac)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        text = f"{self.desc} [{bar}] {self.done}/{self.total} {frac * 100:3.0f}% {_fmt_seconds(elapsed)}"
        if 0 < self.done < self.total:
            eta = elapsed / self.done * (self.total - self.done)
            text += f" eta {_fmt_seconds(eta)}"
        return text.lstrip()

    def update(self, n: int = 1) -> None:
        """Record ``n`` more finished steps and redraw if enough time has passed."""
        self.done += n
        if not self.enabled or self._closed:
            return
        now = time.monotonic()
        if now - self._last_draw >= self.min_interval or self.done >= self.total:
            self._draw()
            self._last_draw = now

    def _draw(self) -> None:
        try:
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()
            self._drawn = True
        except (ValueError, OSError):  # stream closed under us: stop drawing
            self.enabled = False

    def close(self) -> None:
        """Draw the final state and end the line (only if anything was drawn)."""
        if self._closed:
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self.enabled:
            self._draw()
            if self._drawn:
                try:
                    self.stream.write("\n")
                    self.stream.flush()
                except (ValueError, OSError):
                    pass
        self._closed = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
