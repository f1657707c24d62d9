"""One web episode's browser: a fresh context of a `WebBrowser`, its tabs, the sites it may
reach, and the action space (actions.py) performed on it. It is the episode's `ToolBackend`.

Every request a page makes (WebSockets too) is routed: one to an allowed origin goes on, any
other is aborted and recorded in `blocked` (the family keeps them in the evidence). `goto` and
`new_tab` refuse such a URL themselves, and any document URL that is not a site's (`data:`,
`javascript:`): the agent browses the task's sites, it does not write pages.
An action that fails on the page (no such element, a timeout) is the agent's error: a 400 reply
naming it, the page unchanged. A browser that died is the service gone: ConnectionError, which
the tool surface turns into an infra_error of the episode, never a failed task.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

from orchard_cli.tools.spec import ToolReply
from orchard_cli.tasks.kit.browser_actions import FINAL
from orchard_cli.tasks.kit.browser import WebBrowser

TREE_LIMIT = 24000
"""An accessibility tree longer than this is cut (the observation says so)."""
MAX_SHOTS = 60
"""Screenshots kept per episode (the start page and the last 59 actions that succeeded)."""
SITE_URL = re.compile(r"^([a-z][a-z0-9-]*):(/.*)$")


def public_host(host: str | None) -> bool:
    """Whether a live-web page may reach `host` as the URL names it: a name, or an IP address
    outside the host's own networks (loopback, private, link-local, the cloud metadata address).
    Where a name resolves is checked apart, before each request (`_resolves_public`)."""
    import ipaddress

    if not host:
        return False
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return False
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return True
    return address.is_global


def _header_dict(headers: list[dict[str, str]]) -> dict[str, str]:
    """Response headers for route.fulfill: repeated ones (Set-Cookie) joined by newlines, as
    Playwright's own headers do."""
    merged: dict[str, str] = {}
    for header in headers:
        name = header["name"]
        merged[name] = merged[name] + "\n" + header["value"] if name in merged else header["value"]
    return merged


def global_address(address: str) -> bool:
    """A resolved address (not a name) on the public internet."""
    import ipaddress

    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_global
    except ValueError:
        return False


class ActionError(Exception):
    """The agent's action cannot be done on this page (a 400 reply)."""


class BrowserSession:
    """Thread-safe through the browser's loop (one action at a time)."""

    def __init__(self, browser: WebBrowser, sites: dict[str, str], allowed: list[str] | None = None,
                 viewport: tuple[int, int] = (1280, 720), action_timeout: float = 5.0,
                 call_timeout: float = 60.0, record_shots: bool = False, open_web: bool = False) -> None:
        self.browser = browser
        self.sites = dict(sites)
        """Site name -> origin ('shop' -> 'http://127.0.0.1:41234'): `goto("shop:/cart")` works."""
        self.allowed = [a.rstrip("/") for a in (allowed if allowed is not None else list(sites.values()))]
        self.open_web = open_web
        """The live web (`--network full`): any public http(s) origin too, besides `allowed`."""
        self._resolved: dict[str, bool] = {}
        self.viewport = viewport
        self.action_timeout_ms = action_timeout * 1000
        self.call_timeout = call_timeout
        self.context: Any = None
        self.pages: list[Any] = []
        self.page: Any = None
        self.blocked: list[dict[str, Any]] = []
        self.answer: str | None = None
        self.last_error: str | None = None
        self.steps = 0
        self.record_shots = record_shots
        self.shots: list[tuple[int, bytes]] = []
        """(step, PNG) after the start page (0) and after each action that succeeded: what a vision
        judge reads (`orchard judge`); the first and the last `MAX_SHOTS - 1` are kept."""
        self._lock: asyncio.Lock | None = None
        self.crashed: str | None = None
        self.last_tree = ""
        """The accessibility tree of the last observation (its `[ref=...]` ids are the agent's)."""

    # ---- life ----------------------------------------------------------------------------------
    def open(self, start_url: str) -> str:
        """The context, its first tab at `start_url`; the first observation."""
        return self.browser.call(self._open(self.resolve(start_url)), timeout=self.call_timeout)

    async def _open(self, url: str) -> str:
        self._lock = asyncio.Lock()
        self.context = await self.browser.browser.new_context(
            viewport={"width": self.viewport[0], "height": self.viewport[1]}, service_workers="block",
            accept_downloads=False)
        self.context.set_default_timeout(self.action_timeout_ms)
        await self.context.route("**/*", self._route)
        await self.context.route_web_socket(lambda _: True, self._route_socket)
        self.context.on("page", self._on_page)
        page = await self.context.new_page()
        self._focus(page)
        await self._goto(url)
        await self._shoot()
        return await self._observe()

    def close(self) -> None:
        if self.context is None:
            return
        context, self.context = self.context, None
        try:
            self.browser.call(context.close(), timeout=30)
        except Exception:  # noqa: BLE001 - a dead browser has closed it already
            pass

    # ---- the sites -----------------------------------------------------------------------------
    def resolve(self, url: str) -> str:
        """`site:/path` -> that site's URL; a relative URL against the current page."""
        match = SITE_URL.match(url.strip())
        if match and match.group(1) in self.sites:
            return self.sites[match.group(1)].rstrip("/") + match.group(2)
        if self.page is not None and not urlsplit(url).scheme:
            return urljoin(self.page.url, url)
        return url.strip()

    def is_allowed(self, url: str) -> bool:
        if url.startswith(("about:blank", "data:", "blob:")):
            return True
        parts = urlsplit(url)
        if parts.scheme == "file":
            return any(url.startswith(a + "/") or url == a for a in self.allowed if a.startswith("file:"))
        origin = f"{parts.scheme}://{parts.netloc}"
        if any(origin == a or url.startswith(a + "/") for a in self.allowed):
            return True
        return self.open_web and parts.scheme in ("http", "https", "ws", "wss") and public_host(parts.hostname)

    async def _route(self, route: Any) -> None:
        request = route.request
        if not self.is_allowed(request.url):
            self._block(request.url, request.method, request.resource_type)
            await route.abort("blockedbyclient")
            return
        if not self.open_web:
            await route.continue_()
            return
        await self._fetch_hop(route)

    def _own_site(self, url: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        return any(origin == a for a in self.allowed)

    async def _fetch_hop(self, route: Any) -> None:
        """The live web, one hop at a time: the browser would follow a redirect without asking the
        route again, so orchard fetches each request itself without following redirects, checks
        where the name resolves (a public name for a private address is blocked) and where a
        redirect points, and hands the browser the response; the browser's request for the next
        hop comes through here again."""
        request = route.request
        if not (self._own_site(request.url) or await self._resolves_public(request.url)):
            self._block(request.url, request.method, request.resource_type)
            await route.abort("blockedbyclient")
            return
        # A request context of its own, without a cookie jar of its own: the request carries the
        # headers Chromium made for it (its Cookie header, by the browser's own rules), nothing more.
        fetcher = await self.browser.playwright.request.new_context()
        try:
            try:
                response = await fetcher.fetch(request.url, method=request.method, headers=await request.all_headers(),
                                               data=request.post_data_buffer, max_redirects=0,
                                               timeout=self.call_timeout * 1000)
                status, headers, body = response.status, response.headers_array, await response.body()
            except Exception:  # noqa: BLE001 - the site failed: the page sees a failed request
                await route.abort("failed")
                return
        finally:
            await fetcher.dispose()
        location = next((h["value"] for h in headers if h["name"].lower() == "location"), None)
        if 300 <= status < 400 and location:
            target = urljoin(request.url, location)
            if not self.is_allowed(target) or not (self._own_site(target) or await self._resolves_public(target)):
                self._block(target, request.method, request.resource_type)
                await route.abort("blockedbyclient")
                return
        await route.fulfill(status=status, headers=_header_dict(headers), body=body)

    async def _resolves_public(self, url: str) -> bool:
        """Every address the URL's host name resolves to is a public one (cached per episode)."""
        import socket

        host = urlsplit(url).hostname or ""
        if host not in self._resolved:
            try:
                found = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
            except OSError:
                return True  # no such name now: the fetch fails on its own (not cached: asked again)
            self._resolved[host] = bool(found) and all(global_address(info[4][0]) for info in found)
        return self._resolved[host]

    async def _route_socket(self, socket: Any) -> None:
        url = socket.url.replace("ws", "http", 1)
        if self.is_allowed(url) and (not self.open_web or self._own_site(url) or await self._resolves_public(url)):
            socket.connect_to_server()
            return
        self._block(socket.url, "GET", "websocket")
        await socket.close(code=1008, reason="blocked: outside this task's sites")

    def _block(self, url: str, method: str, resource: str) -> None:
        """Record a blocked request (once per URL and method; repeats are counted)."""
        url = url[:500]
        for seen in self.blocked:
            if seen["url"] == url and seen["method"] == method:
                seen["count"] += 1
                return
        self.blocked.append({"url": url, "method": method, "resource": resource, "count": 1, "at": time.time()})

    def _on_page(self, page: Any) -> None:
        if page not in self.pages:
            self.pages.append(page)
        page.on("crash", lambda _: setattr(self, "crashed", "the page crashed"))
        page.on("close", self._on_close)
        self.page = page  # a popup takes the focus, as in a person's browser

    def _on_close(self, page: Any) -> None:
        """A tab closed (by the page itself, or by tab_close): gone from the list; the focus
        moves to the last tab left."""
        if page in self.pages:
            self.pages.remove(page)
        if self.page is page and self.pages:
            self.page = self.pages[-1]

    def _focus(self, page: Any) -> None:
        self._on_page(page)

    # ---- the ToolBackend ---------------------------------------------------------------------
    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        failed = self.browser.failed()
        if failed or self.context is None:
            raise ConnectionError(failed or "the episode's browser is closed")
        try:
            text = self.browser.call(self._act(action, arguments), timeout=self.call_timeout)
        except ActionError as exc:
            return ToolReply(ok=False, status=400, error=str(exc))
        except ConnectionError:
            raise
        except Exception as exc:  # noqa: BLE001 - Playwright's own errors: the browser or the page died
            failed = self.browser.failed() or self.crashed
            if failed:
                raise ConnectionError(failed) from exc
            return ToolReply(ok=False, status=500, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        return ToolReply(result=text)

    def act(self, action: str, arguments: dict[str, Any] | None = None) -> ToolReply:
        """One action by name, as a tool call would do it (tests and the gold solver)."""
        return self.call("browser", action, arguments or {})

    async def _act(self, action: str, arguments: dict[str, Any]) -> str:
        assert self._lock is not None
        async with self._lock:
            self.steps += 1
            self.last_error = None
            try:
                await self._perform(action, arguments)
            except ActionError as exc:
                self.last_error = str(exc)
                raise
            except Exception as exc:  # noqa: BLE001 - Playwright: timeout, detached element, ...
                if self.browser.failed() or self.crashed or not await self._responsive():
                    raise ConnectionError(self.browser.failed() or self.crashed
                                          or "the page stopped responding") from exc
                self.last_error = _short(exc)
                raise ActionError(self.last_error) from exc
            await self._settle()
            await self._shoot()
            return await self._observe()

    async def _perform(self, action: str, a: dict[str, Any]) -> None:
        page = self.page
        if action in FINAL:
            self.answer = str(a.get("text", ""))
        elif action == "observe":
            return
        elif action == "click":
            await (await self._element(a)).click(button=a.get("button", "left"), click_count=2 if a.get("double") else 1)
        elif action == "fill":
            await (await self._element(a)).fill(str(a["value"]))
        elif action == "select_option":
            options = [str(o) for o in (a["options"] if isinstance(a["options"], list) else [a["options"]])]
            element = await self._element(a)
            labels = await element.evaluate("s => Array.from(s.options || [], o => o.label)")
            by_label = all(o in labels for o in options)
            await element.select_option(**({"label": options} if by_label else {"value": options}))
        elif action == "check":
            await (await self._element(a)).set_checked(bool(a.get("checked", True)))
        elif action == "hover":
            await (await self._element(a)).hover()
        elif action == "press":
            if a.get("bid") or a.get("selector"):
                await (await self._element(a)).press(a["key"])
            else:
                await page.keyboard.press(a["key"])
        elif action == "scroll":
            await page.mouse.wheel(float(a.get("dx", 0)), float(a.get("dy", 0)))
        elif action == "goto":
            await self._goto(self.resolve(str(a["url"])), agent=True)
        elif action == "go_back":
            await page.go_back()
        elif action == "go_forward":
            await page.go_forward()
        elif action == "new_tab":
            page = await self.context.new_page()
            self._focus(page)
            if a.get("url"):
                await self._goto(self.resolve(str(a["url"])), agent=True)
        elif action == "tab_focus":
            index = int(a["index"])
            if not 0 <= index < len(self.pages):
                raise ActionError(f"no tab {index} (there are {len(self.pages)})")
            self.page = self.pages[index]
            await self.page.bring_to_front()
        elif action == "tab_close":
            await page.close()  # _on_close drops it and moves the focus
            if not self.pages:
                self._focus(await self.context.new_page())
        elif action == "mouse_click":
            await page.mouse.click(float(a["x"]), float(a["y"]), button=a.get("button", "left"))
        else:
            raise ActionError(f"no action named {action!r}")

    async def _responsive(self) -> bool:
        """The page still runs script (a timed-out action on a hung renderer is not the agent's).
        Only a probe that times out says no: one that fails otherwise (the page navigated, or
        closed itself) is a page that answers."""
        if self.page.is_closed():
            if not self.pages:
                self._focus(await self.context.new_page())
            self.page = self.pages[-1]
            return True
        try:
            await asyncio.wait_for(self.page.evaluate("1"), 2)
        except asyncio.TimeoutError:
            return False
        except Exception:  # noqa: BLE001 - navigating, closed: alive
            pass
        return True

    async def _element(self, a: dict[str, Any]) -> Any:
        """The element an action names. A bid not on the page fails at once (a selector waits, up
        to the action timeout, for its element to appear)."""
        if a.get("bid"):
            bid = str(a["bid"]).strip().strip("[]").removeprefix("ref=")
            locator = self.page.locator(f"aria-ref={bid}")
            try:
                found = await locator.count()
            except Exception:  # noqa: BLE001 - a malformed ref
                found = 0
            if not found:
                raise ActionError(f"no element {bid!r} on this page (ids change with the page: use those of "
                                  "the last observation)")
            return locator
        if a.get("selector"):
            return self.page.locator(str(a["selector"]))
        raise ActionError("name the element: 'bid' (an id from the observation) or 'selector'")

    async def _goto(self, url: str, agent: bool = False) -> None:
        """Open `url` in the current tab. The agent's own `goto` opens a site's page only (an
        http(s) or allowed file URL), never a page it writes itself (`data:`, `javascript:`)."""
        scheme = urlsplit(url).scheme
        written = agent and scheme not in ("http", "https", "file") and url != "about:blank"
        if written or not self.is_allowed(url):
            self._block(url, "GET", "document")
            if self.open_web:
                raise ActionError(f"{url} is not a public web page (this task browses public http(s) sites"
                                  + (f" and {', '.join(self.allowed)})" if self.allowed else ")"))
            raise ActionError(f"{url} is outside this task's sites ({', '.join(self.allowed)})")
        await self.page.goto(url, wait_until="domcontentloaded")

    async def _settle(self) -> None:
        """After an action: let a navigation it started reach its DOM (briefly; never an error)."""
        try:
            await self.page.wait_for_load_state("domcontentloaded", timeout=self.action_timeout_ms)
        except Exception:  # noqa: BLE001
            pass

    # ---- the ids of the page the agent was shown (gold plays selector steps with them) ----------
    def locate(self, selector: str) -> dict[str, Any] | None:
        """Where the element `selector` finds is, as the agent can name it: {"bid": its
        `[ref=...]` id in the last observation} or, when it has none of its own, {"ancestor": the
        id of its nearest ancestor that has one, "x", "y": its centre}; None when nothing matches."""
        return self.browser.call(self._locate(selector), timeout=self.call_timeout)

    async def _locate(self, selector: str) -> dict[str, Any] | None:
        assert self._lock is not None
        async with self._lock:
            if not self.last_tree:
                self.last_tree = await self.page.aria_snapshot(mode="ai", timeout=self.action_timeout_ms)
            target = self.page.locator(selector).first
            try:
                handle = await target.element_handle(timeout=self.action_timeout_ms)
            except Exception:  # noqa: BLE001 - nothing matches
                return None
            depth: dict[str, int] = {}
            for ref in dict.fromkeys(re.findall(r"\[ref=(\w+)\]", self.last_tree)):
                try:
                    found = await self.page.locator(f"aria-ref={ref}").evaluate(
                        "(el, target) => { let n = 0; for (let t = target; t; t = t.parentElement, n++) "
                        "{ if (t === el) return n; } return -1; }", handle)
                except Exception:  # noqa: BLE001 - a ref of an element gone meanwhile
                    continue
                if found == 0:
                    return {"bid": ref}
                if found > 0:
                    depth[ref] = found
            box = await handle.bounding_box()
            out: dict[str, Any] = {"ancestor": min(depth, key=depth.__getitem__)} if depth else {}
            if box is not None:
                out.update(x=round(box["x"] + box["width"] / 2), y=round(box["y"] + box["height"] / 2))
            return out or None

    # ---- what the agent sees -----------------------------------------------------------------------
    def observe(self) -> str:
        return self.browser.call(self._observe(), timeout=self.call_timeout)

    async def _observe(self) -> str:
        page = self.page
        try:
            tree = await page.aria_snapshot(mode="ai", timeout=self.action_timeout_ms)
        except Exception as exc:  # noqa: BLE001 - a page mid-navigation: say so, do not fail
            if self.browser.failed():
                raise
            tree = f"(the page could not be read: {_short(exc)})"
        self.last_tree = tree
        if len(tree) > TREE_LIMIT:
            tree = tree[:TREE_LIMIT] + f"\n... (cut: the tree has {len(tree)} characters)"
        tabs = []
        for i, tab in enumerate(self.pages):
            title = await _title(tab)
            tabs.append(f"[{i}] {title or '(untitled)'}{' (current)' if tab is page else ''}")
        lines = [f"URL: {page.url}", f"Title: {await _title(page)}", "Tabs: " + "  ".join(tabs)]
        if self.last_error:
            lines.append(f"Last action error: {self.last_error}")
        lines += ["Accessibility tree (element ids in [ref=...]; pass one as bid):", tree]
        return "\n".join(lines)

    async def _shoot(self) -> None:
        if not self.record_shots:
            return
        try:
            shot = await self.page.screenshot(type="png", timeout=self.action_timeout_ms)
        except Exception:  # noqa: BLE001 - a page that cannot be drawn leaves a gap, not a failure
            return
        self.shots.append((self.steps, shot))
        if len(self.shots) > MAX_SHOTS:
            del self.shots[1]

    def screenshot(self) -> bytes | None:
        """The current tab as PNG, or None when the browser cannot give one."""
        if self.context is None or self.page is None:
            return None
        try:
            return self.browser.call(self.page.screenshot(type="png", timeout=10000), timeout=30)
        except Exception:  # noqa: BLE001
            return None


async def _title(page: Any) -> str:
    try:
        return await page.title()
    except Exception:  # noqa: BLE001
        return ""


def _short(exc: BaseException) -> str:
    """Playwright's message without its call log."""
    text = str(exc).split("Call log:")[0].strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
