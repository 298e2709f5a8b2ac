"""A run's status in one line, for every view (the CLI's live lines and the app's status bar)."""

from __future__ import annotations


def status_line(snap, final: dict | None) -> str:
    st = (final or {}).get("status") or snap.status
    if st == "oom":
        kind = (final or {}).get("oom_kind") or (snap.error or {}).get("oom_kind") or "unknown"
        msg = (final or {}).get("error") or (snap.error or {}).get("message") or ""
        return f"OUT OF MEMORY ({kind}): {msg}"
    if st in ("failed", "cancelled"):
        return f"{st.upper()}: {(final or {}).get('error') or (snap.error or {}).get('message') or ''}"
    if snap.stalled and st == "running":
        return "RUNNING, STALLED: no training step for longer than the stall timeout"
    return st.upper()


__all__ = ["status_line"]
