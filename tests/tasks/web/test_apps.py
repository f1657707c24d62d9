"""The web-mini apps through their host class (WebApps) and real HTTP (httpx): one process for the
module, reset before each test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import httpx
import pytest

from orchard_cli.errors import UsageError
from orchard_cli.tasks.web.apps import SITES, WebApps
from orchard_cli.tasks.web.apps import shop_data

FIXTURE = {"seed": 1001}


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    apps = WebApps(tmp_path_factory.mktemp("web-apps"))
    apps.start()
    yield apps
    apps.stop()


@pytest.fixture
def apps(running):
    running.reset(FIXTURE)
    return running


@pytest.fixture
def http():
    with httpx.Client(timeout=10) as client:
        yield client


def _variant(seed: int = 1001) -> tuple[dict, dict]:
    product = next(p for p in shop_data.catalogue(seed) if len(p["variants"]) > 2)
    return product, next(v for v in product["variants"] if v["stock"] >= 3)


def test_every_site_serves_pages(apps, http):
    for site, path in [("shop", "/"), ("shop", "/search?q=mug&sort=price_asc"), ("wiki", "/"),
                       ("mail", "/mailbox/INBOX"), ("booking", "/availability")]:
        reply = http.get(apps.origins()[site] + path)
        assert reply.status_code == 200, (site, path)
        assert "<h1>" in reply.text
        assert not re.search(r"https?://|src=", reply.text), "no external asset, no absolute link"


def test_a_post_changes_state_is_logged_and_reset_undoes_it(apps, http):
    product, variant = _variant()
    shop = apps.origins()["shop"]
    reply = http.post(shop + "/cart/add", data={"variant": variant["sku"], "qty": "2"})
    assert reply.status_code == 303
    assert apps.query("shop", "SELECT sku, qty FROM cart") == [[variant["sku"], 2]]
    posts = [r for r in apps.requests() if r["method"] == "POST"]
    assert posts == [{"site": "shop", "method": "POST", "path": "/cart/add", "query": {},
                      "form": {"variant": variant["sku"], "qty": "2"}, "status": 303, "at": posts[0]["at"]}]
    wiki = apps.origins()["wiki"]
    assert http.post(wiki + "/wiki/port-alder/edit", data={"text": "Gone", "summary": "vandal"}).status_code == 303
    assert apps.query("wiki", "SELECT author, summary, text FROM latest WHERE slug = 'port-alder'") == \
        [["Alex", "vandal", "Gone"]]
    apps.reset(FIXTURE)
    assert apps.query("shop", "SELECT * FROM cart") == []
    assert apps.query("wiki", "SELECT summary FROM latest WHERE slug = 'port-alder'") != [["vandal"]]
    assert apps.requests() == []


def test_checkout_places_one_order_with_the_variant_and_qty(apps, http):
    product, variant = _variant()
    shop = apps.origins()["shop"]
    http.post(shop + "/cart/add", data={"variant": variant["sku"], "qty": "3"})
    refused = http.post(shop + "/checkout", data={"name": "Alex", "address": "", "city": "Kiel", "postcode": "24103",
                                                  "shipping": "express"})
    assert refused.status_code == 422 and "Street address is required." in refused.text
    placed = http.post(shop + "/checkout", data={"name": "Alex", "address": "Harbor 1", "city": "Kiel",
                                                 "postcode": "24103", "shipping": "express"})
    assert placed.status_code == 303 and placed.headers["location"].startswith("/orders/HP-")
    number = placed.headers["location"].split("/")[2].split("?")[0]
    assert number in http.get(shop + placed.headers["location"]).text
    assert apps.query("shop", "SELECT o.number, i.sku, i.qty, o.shipping FROM orders o JOIN order_items i "
                              "ON i.order_id = o.id") == [[number, variant["sku"], 3, "express"]]
    assert apps.snapshot()["shop"]["cart"] == []


def test_search_facets_and_sort(apps, http):
    catalogue = shop_data.catalogue(1001)
    mugs = sorted((p for p in catalogue if p["category"] == "Mugs"), key=lambda p: p["price"])
    page = http.get(apps.origins()["shop"] + "/search", params={"category": "Mugs", "sort": "price_asc"}).text
    names = re.findall(r"<a href='/product/[^']+'>([^<]+)</a>", page)
    assert names == [p["name"] for p in mugs]


def test_no_http_route_reaches_control_or_state(apps, http):
    for site, origin in apps.origins().items():
        for path in ("/reset", "/__reset", "/_reset", "/state", "/query", "/snapshot", "/requests", "/control",
                     "/admin", "/api/reset", "/debug", "/__control"):
            assert http.get(origin + path).status_code == 404, (site, path)
            assert http.post(origin + path, data={"fixture": "{}"}).status_code in (404, 405), (site, path)


def test_query_is_read_only(apps):
    with pytest.raises(UsageError, match="readonly"):
        apps.query("shop", "DELETE FROM products")
    with pytest.raises(UsageError, match="no site"):
        apps.query("bank", "SELECT 1")
    assert apps.query("shop", "SELECT count(*) FROM products")[0][0] >= 30


def test_webmail_send_lands_in_the_maildir(apps, http):
    mail = apps.origins()["mail"]
    reply = http.post(mail + "/send", data={"to": "bob@acme.test, alex@orchard.test", "cc": "",
                                            "subject": "Lunch", "body": "At noon?", "in_reply_to": "m1"})
    assert reply.status_code == 303
    rows = apps.query("mail", "SELECT mailbox, to_addrs, in_reply_to, unread FROM messages WHERE subject = 'Lunch' "
                              "ORDER BY mailbox")
    assert rows == [["INBOX", "bob@acme.test, alex@orchard.test", "m1", 1],
                    ["Sent", "bob@acme.test, alex@orchard.test", "m1", 0]]
    maildirs = list((apps.root / "sites" / "mail").glob("a*"))
    assert len(maildirs) == 1
    sent = list((maildirs[0] / ".Sent" / "cur").iterdir())
    assert len(sent) == 1 and b"Subject: Lunch" in sent[0].read_bytes()
    bad = http.post(mail + "/send", data={"to": "bob(at)acme", "subject": "x", "body": "y"})
    assert bad.status_code == 422 and "valid e-mail" in bad.text
    assert http.post(mail + "/message/m2/move", data={"folder": "Archive"}).status_code == 303
    assert apps.query("mail", "SELECT mailbox FROM messages WHERE id = 'm2'") == [["Archive"]]


def test_booking_validates_fields_and_books(apps, http):
    booking = apps.origins()["booking"]
    room, capacity = apps.query("booking", "SELECT id, capacity FROM resources ORDER BY capacity LIMIT 1")[0]
    day, hour = apps.query("booking", f"SELECT date, time FROM slots s WHERE room_id = '{room}' AND NOT EXISTS "
                                      "(SELECT 1 FROM bookings b WHERE b.room_id = s.room_id AND b.date = s.date "
                                      "AND b.time = s.time) ORDER BY date, time LIMIT 1")[0]
    form = {"room": room, "date": day, "time": hour, "people": str(capacity + 1), "name": "", "email": "alex@x"}
    refused = http.post(booking + "/book", data=form)
    assert refused.status_code == 422
    errors = dict(re.findall(r"class='error' id='([\w-]+)-error'>([^<]*)", refused.text))
    assert set(errors) == {"people", "name", "email"}, errors
    past = http.post(booking + "/book", data={**form, "date": "2026-11-30", "people": "1", "name": "Alex",
                                              "email": "alex@orchard.test"})
    assert "Choose a date after today (2026-11-30)." in past.text
    made = http.post(booking + "/book", data={**form, "people": "1", "name": "Alex", "email": "alex@orchard.test"})
    assert made.status_code == 303
    assert apps.query("booking", "SELECT room_id, date, time, people, status FROM bookings WHERE origin = 'site'") == \
        [[room, day, hour, 1, "confirmed"]]
    again = http.post(booking + "/book", data={**form, "people": "1", "name": "Sam", "email": "sam@orchard.test"})
    assert "already booked" in again.text


def test_reset_is_fast_deterministic_and_a_bad_fixture_is_one_error(apps, http):
    first = apps.snapshot()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        apps.reset(FIXTURE)
        times.append(time.perf_counter() - start)
    assert apps.snapshot() == first
    assert min(times) < 1.0, times  # a reset reloads rows, never restarts the apps (seconds); generous for a loaded machine
    apps.reset({"seed": 1002})
    assert apps.query("shop", "SELECT name FROM products") != [[p["name"]] for p in shop_data.catalogue(1001)]
    with pytest.raises(UsageError, match=r"bad web fixture at shop\.products\.0\.price"):
        apps.reset({"shop": {"products": [{"id": "x", "name": "X", "category": "C", "brand": "B", "price": -1,
                                           "rating": 3}]}})
    assert http.get(apps.origins()["shop"] + "/").status_code == 503
    apps.reset(FIXTURE)
    assert http.get(apps.origins()["shop"] + "/").status_code == 200
    assert apps.failed() is None
    assert set(apps.ports()) == set(SITES)


def test_the_apps_end_when_the_process_that_started_them_is_killed(tmp_path):
    script = ("import json, os, sys, time\nfrom pathlib import Path\n"
              "from orchard_cli.tasks.web.apps import WebApps\n"
              "apps = WebApps(Path(sys.argv[1])); apps.start()\n"
              "print(json.dumps(apps._proc.pid), flush=True)\ntime.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        pid = json.loads(owner.stdout.readline())
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
