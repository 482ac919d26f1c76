"""What a system is called where a person reads it: its hostname, and when two systems share
a hostname (a machine reinstalled, a driver changed) the hostname with the shortest prefix
of the fingerprint, at least 8 characters, that tells those fingerprints apart:
``node7 (3f9a0c21)``. ``compare`` labels its columns with it, ``results`` its system column.
"""

from __future__ import annotations

from collections.abc import Mapping


def short_ids(fingerprints: list[str], length: int = 8) -> dict[str, str]:
    """The shortest common prefix length (from ``length``) that keeps ``fingerprints`` apart."""
    while len({f[:length] for f in fingerprints}) < len(fingerprints):
        length += 1
    return {f: f[:length] for f in fingerprints}


def system_labels(hostnames: Mapping[str, str | None]) -> dict[str, str]:
    """fingerprint -> label, for the systems ``hostnames`` maps (fingerprint -> hostname)."""
    short = short_ids(list(hostnames))
    counts: dict[str | None, int] = {}
    for hostname in hostnames.values():
        counts[hostname] = counts.get(hostname, 0) + 1
    return {
        fingerprint: f"{hostname} ({short[fingerprint]})" if counts[hostname] > 1 else str(hostname)
        for fingerprint, hostname in hostnames.items()
    }
