"""The server calls no other host, at start or while it runs (an offline classroom has none to call).

Streamlit looks up the machine's addresses for two things: the URLs it prints at start, and the
origins it allows for a cross-origin websocket. The internal one "connects" a UDP socket to 8.8.8.8
and the external one asks checkip.amazonaws.com over HTTP ("Did not auto detect external IP" when
offline). `.streamlit/config.toml` names `browser.serverAddress`, so nothing is looked up for the
printed URLs; `seal` makes both look-ups answer "unknown" for the rest of the process, so a page of
another origin opening a websocket cannot make the server call out either (it is refused as any
unknown origin is). Usage statistics are off in the same file (`browser.gatherUsageStats`).
`tests/test_offline.py` records the server's connection attempts and allows only loopback.
"""

from __future__ import annotations


def _unknown() -> None:
    return None


def seal() -> None:
    """From now on this process's Streamlit asks no other host for its own address."""
    from streamlit import net_util

    net_util.get_external_ip = _unknown
    net_util.get_internal_ip = _unknown
