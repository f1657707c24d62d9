"""Is there a model/dataset hub? One quick answer instead of the hub libraries' retries.

Without a hub, huggingface_hub retries each request five times with backoff (about 24 s for a
dataset, ~50 s for a model, not configurable). One HEAD request to the endpoint (HF_ENDPOINT,
through the usual proxy variables) comes first: no HTTP answer within PROBE_TIMEOUT seconds is
a one-line error. With HF_HUB_OFFLINE=1 there is no probe: the libraries read their cache.
"""

from __future__ import annotations

import http.client
import os
import ssl
import urllib.error
import urllib.request

PROBE_TIMEOUT = 5.0
DEFAULT_ENDPOINT = "https://huggingface.co"
TRUE_VALUES = ("1", "ON", "YES", "TRUE")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT


def hub_offline(datasets: bool = False) -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE; HF_DATASETS_OFFLINE for datasets) as the hub
    libraries read it."""
    names = ("HF_DATASETS_OFFLINE",) if datasets and "HF_DATASETS_OFFLINE" in os.environ else (
        "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(n, "").upper() in TRUE_VALUES for n in names)


def hub_unreachable(url: str | None = None, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why `url` (default: the endpoint) gives no HTTP answer (None when it answers, with any
    status), in one try."""
    request = urllib.request.Request((url or endpoint()).rstrip("/") + "/", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # an answer, even 4xx/5xx: the hub is there; the library takes it from here
    except http.client.RemoteDisconnected as exc:  # closed without a word: no answer
        return str(exc) or type(exc).__name__
    except (http.client.HTTPException, ssl.SSLError):
        return None  # something answered (a malformed reply, a certificate urllib rejects):
        # not "no hub"; the library has its own HTTP stack and says what is wrong
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):
            return None
        return str(getattr(reason, "strerror", None) or reason)
    except (OSError, ValueError) as exc:  # timeouts, resets, a malformed HF_ENDPOINT
        return str(exc) or type(exc).__name__
