"""Go-style durations ("30s", "1m30s", "500ms"), as Kubernetes and Volcano manifests write them."""

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError when it is not a duration."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def seconds_or_none(text: str | None) -> float | None:
    """A duration annotation in seconds; None when absent or not a duration (one accepted before it was
    checked at submission must not stop a scheduling cycle)."""
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """Seconds as `parse_duration` reads them, in whole hours, minutes and seconds where they are whole
    (86400 -> "24h", 90 -> "1m30s")."""
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9 or whole <= 0:
        return f"{seconds:g}s"
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (s, "s")) if n) or "0s"
