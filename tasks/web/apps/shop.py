"""The shop: a catalogue with search, facets and sorting, product pages with variants, a cart
and a checkout that places an order (irreversible; the order page shows its number).

    GET  /                      categories and top-rated products
    GET  /search                q, category, brand, color, min_price, max_price, sort
                                (relevance | price_asc | price_desc | rating)
    GET  /product/{id}          attributes, variants (each a SKU), the add-to-cart form
    POST /cart/add              variant (SKU), qty                     -> 303 /cart
    GET  /cart                  lines; POST /cart/update (sku, qty; 0 removes), /cart/remove (sku)
    GET  /checkout              POST /checkout (name, address, city, postcode, shipping) -> 303 /orders/{number}
    GET  /orders, /orders/{number}
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from orchard_cli.tasks.web.apps import shop_data
from orchard_cli.tasks.web.apps.db import Database, Images, image
from orchard_cli.tasks.web.apps.fixture import ProductFixture, ShopFixture, VariantFixture, WebFixture
from orchard_cli.tasks.web.apps.kit import (Clock, Request, Response, Router, button, esc, form, hidden, not_found,
                                            page, redirect, search_form, seg, select, table, text_input, url)

SCHEMA = """
CREATE TABLE products(id TEXT PRIMARY KEY, position INTEGER, name TEXT, category TEXT, brand TEXT,
  material TEXT, color TEXT, size TEXT, price REAL, rating REAL, reviews INTEGER, description TEXT);
CREATE TABLE variants(sku TEXT PRIMARY KEY, product_id TEXT NOT NULL REFERENCES products(id), position INTEGER,
  color TEXT, size TEXT, price REAL, stock INTEGER);
CREATE TABLE cart(sku TEXT PRIMARY KEY REFERENCES variants(sku), qty INTEGER NOT NULL, added_at TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, number TEXT UNIQUE, name TEXT, address TEXT, city TEXT,
  postcode TEXT, shipping TEXT, shipping_cost REAL, subtotal REAL, total REAL, placed_at TEXT);
CREATE TABLE order_items(order_id INTEGER REFERENCES orders(id), sku TEXT, product_id TEXT, name TEXT,
  color TEXT, size TEXT, qty INTEGER, unit_price REAL);
"""
SORTS = [("relevance", "Relevance"), ("price_asc", "Price: low to high"), ("price_desc", "Price: high to low"),
         ("rating", "Customer rating")]
SHIPPING = {"standard": ("Standard (3-5 days)", 4.99), "express": ("Express (next day)", 14.99),
            "pickup": ("Store pickup", 0.0)}
FREE_SHIPPING_FROM = 75.0
ADDRESS = [("name", "Full name", "name"), ("address", "Street address", "street-address"),
           ("city", "City", "address-level2"), ("postcode", "Postcode", "postal-code")]
"""The checkout's address fields: name, label, autocomplete."""
ORDER_BASE = 100400
ROUTES = Router()


def money(value: float) -> str:
    return f"${value:,.2f}"


def variant_label(color: str, size: str) -> str:
    return " / ".join(filter(None, [color, size])) or "Standard"


class Shop:
    name = "shop"

    def __init__(self, folder: Path) -> None:
        self.db = Database(Path(folder) / "shop.sqlite")
        self._images = Images()
        self.title = ShopFixture().title
        self.clock = Clock(WebFixture().clock())

    def reset(self, fixture: WebFixture) -> None:
        part = fixture.shop or ShopFixture()
        key = json.dumps([fixture.seed, fixture.now, part.model_dump(mode="json")], sort_keys=True)
        self.db.load(self._images.get(key, lambda: image(SCHEMA, lambda c: _fill(c, part, fixture))))
        self.title, self.clock = part.title, Clock(fixture.clock())

    def handle(self, request: Request) -> Response:
        return ROUTES.dispatch(self, request)

    def nav(self) -> list[tuple[str, str]]:
        count = self.db.one("SELECT coalesce(sum(qty), 0) FROM cart")[0]
        return [("/search", "All products"), ("/orders", "My orders"), ("/cart", f"Cart ({count} items)")]

    def query(self, sql: str) -> list[list[Any]]:
        return self.db.query(sql)

    def snapshot(self) -> dict[str, Any]:
        cart = [[r["sku"], r["qty"]] for r in self.db.all("SELECT sku, qty FROM cart ORDER BY sku")]
        orders = []
        for o in self.db.all("SELECT * FROM orders ORDER BY id"):
            items = self.db.all("SELECT sku, qty FROM order_items WHERE order_id = ? ORDER BY sku", o["id"])
            orders.append({"number": o["number"], "name": o["name"], "shipping": o["shipping"], "total": o["total"],
                           "items": [[i["sku"], i["qty"]] for i in items]})
        return {"cart": cart, "orders": orders}

    def page(self, title: str, body: str, **flash: str) -> Response:
        return Response(200, page(self.title, title, body, self.nav(), **flash))


def _fill(conn: sqlite3.Connection, part: ShopFixture, fixture: WebFixture) -> None:
    products = part.products if part.products is not None else \
        [ProductFixture.model_validate(p) for p in shop_data.catalogue(fixture.seed)]
    for position, p in enumerate(products):
        conn.execute("INSERT INTO products VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (p.id, position, p.name, p.category, p.brand, p.material, p.color, p.size, p.price, p.rating,
                      p.reviews, p.description))
        variants = p.variants or [VariantFixture(sku=p.id, color=p.color, size=p.size, price=p.price, stock=10)]
        for vpos, v in enumerate(variants):
            conn.execute("INSERT INTO variants VALUES (?,?,?,?,?,?,?)",
                         (v.sku, p.id, vpos, v.color or p.color, v.size or p.size, v.price or p.price, v.stock))
    for line in part.cart:
        if conn.execute("SELECT 1 FROM variants WHERE sku = ?", (line.sku,)).fetchone() is None:
            raise ValueError(f"bad web fixture at shop.cart: no SKU {line.sku!r} in the catalogue")
        conn.execute("INSERT INTO cart VALUES (?,?,?)", (line.sku, line.qty, fixture.now))


# --- catalogue ------------------------------------------------------------------------------
def _card(p: sqlite3.Row) -> str:
    return (f"<li><a href='/product/{seg(p['id'])}'>{esc(p['name'])}</a>"
            f"<p>{esc(p['brand'])} · {money(p['price'])} · rated {p['rating']:.1f} of 5 "
            f"({p['reviews']} reviews)</p></li>")


@ROUTES.get("/")
def home(shop: Shop, req: Request) -> Response:
    cats = shop.db.all("SELECT category, count(*) AS n FROM products GROUP BY category ORDER BY min(position)")
    links = "".join(f"<li><a href='{esc(url('/search', category=c['category']))}'>{esc(c['category'])}</a> "
                    f"({c['n']})</li>" for c in cats)
    top = shop.db.all("SELECT * FROM products ORDER BY rating DESC, position LIMIT 6")
    body = (search_form("/search", "", "Search products") + f"<h2>Categories</h2><ul>{links}</ul>"
            f"<h2>Top rated</h2><ul class='cards'>{''.join(_card(p) for p in top)}</ul>")
    return shop.page("Welcome", body)


def _price(value: str) -> float | None:
    try:
        return float(value) if value.strip() else None
    except ValueError:
        return None


@ROUTES.get("/search")
def search(shop: Shop, req: Request) -> Response:
    q, category, brand, color = req.arg("q").strip(), req.arg("category"), req.arg("brand"), req.arg("color")
    low, high, sort = _price(req.arg("min_price")), _price(req.arg("max_price")), req.arg("sort", "relevance")
    where, params = [], []
    for word in q.lower().split():
        where.append("lower(p.name || ' ' || p.brand || ' ' || p.category || ' ' || p.material || ' ' || "
                     "p.description || ' ' || (SELECT group_concat(v.color, ' ') FROM variants v "
                     "WHERE v.product_id = p.id)) LIKE ?")
        params.append(f"%{word}%")
    for column, value in (("p.category", category), ("p.brand", brand)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    if color:
        where.append("EXISTS (SELECT 1 FROM variants v WHERE v.product_id = p.id AND v.color = ?)")
        params.append(color)
    if low is not None:
        where.append("p.price >= ?")
        params.append(low)
    if high is not None:
        where.append("p.price <= ?")
        params.append(high)
    order = {"price_asc": "p.price, p.position", "price_desc": "p.price DESC, p.position",
             "rating": "p.rating DESC, p.reviews DESC, p.position"}.get(sort, "p.position")
    found = shop.db.all(f"SELECT p.* FROM products p {'WHERE ' + ' AND '.join(where) if where else ''} "
                        f"ORDER BY {order}", *params)
    facets = _facets(shop, q, category, brand, color, req.arg("min_price"), req.arg("max_price"), sort)
    cards = "".join(_card(p) for p in found) or "<li>No products match.</li>"
    body = (f"<aside>{facets}</aside><section class='results' aria-label='Results'>"
            f"<p role='status'>{len(found)} products</p><ul class='cards'>{cards}</ul></section>")
    return shop.page(f"Search: {q}" if q else (category or "All products"), body)


def _facets(shop: Shop, q: str, category: str, brand: str, color: str, low: str, high: str, sort: str) -> str:
    cats = [r[0] for r in shop.db.all("SELECT DISTINCT category FROM products ORDER BY category")]
    brands = [r[0] for r in shop.db.all("SELECT DISTINCT brand FROM products ORDER BY brand")]
    colors = [r[0] for r in shop.db.all("SELECT DISTINCT color FROM variants WHERE color != '' ORDER BY color")]
    inner = (text_input("q", "Search products", q, kind="search")
             + select("category", "Category", [("", "All categories")] + [(c, c) for c in cats], category)
             + select("brand", "Brand", [("", "All brands")] + [(b, b) for b in brands], brand)
             + select("color", "Color", [("", "All colors")] + [(c, c) for c in colors], color)
             + text_input("min_price", "Min price", low, kind="number", min="0", step="0.01")
             + text_input("max_price", "Max price", high, kind="number", min="0", step="0.01")
             + select("sort", "Sort by", SORTS, sort) + button("Apply filters"))
    return form("/search", inner, method="get", label="Filters")


@ROUTES.get("/product/{pid}")
def product(shop: Shop, req: Request, pid: str, error: str = "", status: int = 200) -> Response:
    p = shop.db.one("SELECT * FROM products WHERE id = ?", pid)
    if p is None:
        return not_found(shop, "No such product.")
    variants = shop.db.all("SELECT * FROM variants WHERE product_id = ? ORDER BY position", pid)
    colors = sorted({v["color"] for v in variants if v["color"]}, key=lambda c: [v["color"] for v in variants].index(c))
    sizes = list(dict.fromkeys(v["size"] for v in variants if v["size"]))
    facts = [("Brand", p["brand"]), ("Category", p["category"]), ("Material", p["material"]),
             ("Color" if len(colors) < 2 else "Colors", ", ".join(colors)),
             ("Size" if len(sizes) < 2 else "Sizes", ", ".join(sizes)), ("Price", money(p["price"])),
             ("Rating", f"{p['rating']:.1f} of 5 ({p['reviews']} reviews)")]
    rows = "".join(f"<tr><th scope='row'>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts if v)
    body = f"<table aria-label='Details'>{rows}</table><p>{esc(p['description'])}</p>"
    if len(variants) > 1:
        body += table(["Variant", "SKU", "Price", "Availability"],
                      [[esc(variant_label(v["color"], v["size"])), esc(v["sku"]), money(v["price"]),
                        "In stock" if v["stock"] else "Out of stock"] for v in variants], caption="Variants")
        options = [(v["sku"], variant_label(v["color"], v["size"]) + ("" if v["stock"] else " (out of stock)"))
                   for v in variants]
        chosen = req.field("variant") or next((v["sku"] for v in variants if v["stock"]), "")
        picker = select("variant", "Variant", options, chosen, disabled=[v["sku"] for v in variants if not v["stock"]])
    else:
        picker = hidden("variant", variants[0]["sku"]) + \
            ("" if variants[0]["stock"] else "<p>Out of stock</p>")
    qty = text_input("qty", "Quantity", req.field("qty", "1"), kind="number", min="1", max="99", error=error)
    body += form("/cart/add", picker + qty + button("Add to cart"), label="Add to cart")
    return Response(status, page(shop.title, p["name"], body, shop.nav(), alert=error and "Not added to the cart."))


# --- cart -------------------------------------------------------------------------------------
def _qty(text: str) -> int | None:
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if 0 <= value <= 99 else None


@ROUTES.post("/cart/add")
def cart_add(shop: Shop, req: Request) -> Response:
    v = shop.db.one("SELECT * FROM variants WHERE sku = ?", req.field("variant"))
    if v is None:
        return Response(400, page(shop.title, "Not added", "<p>Choose a variant.</p>", shop.nav()))
    qty = _qty(req.field("qty", "1"))
    held = (shop.db.one("SELECT qty FROM cart WHERE sku = ?", v["sku"]) or [0])[0]
    if not qty:
        return product(shop, req, v["product_id"], error="Enter a quantity from 1 to 99.", status=422)
    if qty + held > v["stock"]:
        error = "This variant is out of stock." if not v["stock"] else f"Only {v['stock']} in stock."
        return product(shop, req, v["product_id"], error=error, status=422)
    shop.db.run("INSERT INTO cart VALUES (?, ?, ?) ON CONFLICT(sku) DO UPDATE SET qty = qty + excluded.qty",
                v["sku"], qty, shop.clock.iso())
    return redirect(url("/cart", added=v["sku"]))


def _lines(shop: Shop) -> list[sqlite3.Row]:
    return shop.db.all("SELECT c.sku, c.qty, v.color, v.size, v.price, v.stock, p.id AS pid, p.name FROM cart c "
                       "JOIN variants v ON v.sku = c.sku JOIN products p ON p.id = v.product_id ORDER BY c.rowid")


@ROUTES.get("/cart")
def cart(shop: Shop, req: Request) -> Response:
    lines = _lines(shop)
    rows = []
    for ln in lines:
        what = f"{ln['name']} ({variant_label(ln['color'], ln['size'])})"
        update = form("/cart/update", hidden("sku", ln["sku"])
                      + text_input("qty", f"Quantity of {what}", ln["qty"], kind="number", min="0", max="99",
                                   ident=f"qty-{ln['sku']}")
                      + button("Update", label=f"Update {what}"), label=f"Update {what}")
        remove = form("/cart/remove", hidden("sku", ln["sku"]) + button("Remove", label=f"Remove {what}"),
                      label=f"Remove {what}")
        rows.append([f"<a href='/product/{seg(ln['pid'])}'>{esc(ln['name'])}</a>",
                     esc(variant_label(ln["color"], ln["size"])), money(ln["price"]), update,
                     money(ln["price"] * ln["qty"]), remove])
    subtotal = sum(ln["price"] * ln["qty"] for ln in lines)
    notice = ""
    added = req.arg("added")
    if added:
        notice = "Added to your cart." if any(ln["sku"] == added for ln in lines) else ""
    if not lines:
        return shop.page("Your cart", "<p>Your cart is empty.</p><p><a href='/search'>Browse products</a></p>",
                         notice=notice)
    body = (table(["Product", "Variant", "Price", "Quantity", "Line total", ""], rows, caption="Cart")
            + f"<p>Subtotal: <strong>{money(subtotal)}</strong></p><p><a href='/checkout'>Proceed to checkout</a></p>")
    return shop.page("Your cart", body, notice=notice, alert=req.arg("error"))


@ROUTES.post("/cart/update")
def cart_update(shop: Shop, req: Request) -> Response:
    line = shop.db.one("SELECT c.qty, v.stock FROM cart c JOIN variants v ON v.sku = c.sku WHERE c.sku = ?",
                       req.field("sku"))
    qty = _qty(req.field("qty"))
    if line is None or qty is None:
        return redirect(url("/cart", error="Enter a quantity from 0 to 99."))
    if qty > line["stock"]:
        return redirect(url("/cart", error=f"Only {line['stock']} in stock."))
    if qty == 0:
        shop.db.run("DELETE FROM cart WHERE sku = ?", req.field("sku"))
    else:
        shop.db.run("UPDATE cart SET qty = ? WHERE sku = ?", qty, req.field("sku"))
    return redirect("/cart")


@ROUTES.post("/cart/remove")
def cart_remove(shop: Shop, req: Request) -> Response:
    shop.db.run("DELETE FROM cart WHERE sku = ?", req.field("sku"))
    return redirect("/cart")


# --- checkout ---------------------------------------------------------------------------------
def _shipping_cost(choice: str, subtotal: float) -> float:
    label, cost = SHIPPING[choice]
    return 0.0 if choice == "standard" and subtotal >= FREE_SHIPPING_FROM else cost


@ROUTES.get("/checkout")
def checkout(shop: Shop, req: Request, errors: dict[str, str] | None = None, status: int = 200) -> Response:
    lines = _lines(shop)
    if not lines:
        return shop.page("Checkout", "<p>Your cart is empty.</p>")
    errors = errors or {}
    subtotal = sum(ln["price"] * ln["qty"] for ln in lines)
    summary = table(["Product", "Variant", "Quantity", "Line total"],
                    [[esc(ln["name"]), esc(variant_label(ln["color"], ln["size"])), str(ln["qty"]),
                      money(ln["price"] * ln["qty"])] for ln in lines], caption="Order summary")
    chosen = req.field("shipping", "standard")
    radios = "".join(
        f"<div><input type='radio' id='ship-{k}' name='shipping' value='{k}'{' checked' if k == chosen else ''}>"
        f"<label for='ship-{k}'>{esc(label)}: {money(_shipping_cost(k, subtotal))}</label></div>"
        for k, (label, _) in SHIPPING.items())
    fields = "".join(text_input(name, label, req.field(name), error=errors.get(name, ""), autocomplete=auto)
                     for name, label, auto in ADDRESS)
    ship = f"<fieldset><legend>Shipping</legend>{radios}</fieldset>"
    body = (summary + f"<p>Subtotal: {money(subtotal)} (standard shipping is free from {money(FREE_SHIPPING_FROM)})</p>"
            + form("/checkout", fields + ship + button("Place order"), label="Checkout"))
    return Response(status, page(shop.title, "Checkout", body, shop.nav(),
                                 alert="Please correct the errors below." if errors else ""))


@ROUTES.post("/checkout")
def place_order(shop: Shop, req: Request) -> Response:
    lines = _lines(shop)
    if not lines:
        return redirect("/cart")
    errors = {name: f"{label} is required." for name, label in
              (("name", "Full name"), ("address", "Street address"), ("city", "City"), ("postcode", "Postcode"))
              if not req.field(name).strip()}
    choice = req.field("shipping")
    if choice not in SHIPPING:
        errors["shipping"] = "Choose a shipping option."
    short = [ln for ln in lines if ln["qty"] > ln["stock"]]
    if short:
        errors["name"] = errors.get("name") or f"{short[0]['name']}: only {short[0]['stock']} in stock."
    if errors:
        return checkout(shop, req, errors, status=422)
    subtotal = round(sum(ln["price"] * ln["qty"] for ln in lines), 2)
    cost = _shipping_cost(choice, subtotal)
    with shop.db.conn as conn:
        cur = conn.execute("INSERT INTO orders(name, address, city, postcode, shipping, shipping_cost, subtotal, "
                           "total, placed_at) VALUES (?,?,?,?,?,?,?,?,?)",
                           (req.field("name").strip(), req.field("address").strip(), req.field("city").strip(),
                            req.field("postcode").strip(), choice, cost, subtotal, round(subtotal + cost, 2),
                            shop.clock.iso()))
        number = f"HP-{ORDER_BASE + cur.lastrowid}"
        conn.execute("UPDATE orders SET number = ? WHERE id = ?", (number, cur.lastrowid))
        for ln in lines:
            conn.execute("INSERT INTO order_items VALUES (?,?,?,?,?,?,?,?)",
                         (cur.lastrowid, ln["sku"], ln["pid"], ln["name"], ln["color"], ln["size"], ln["qty"],
                          ln["price"]))
            conn.execute("UPDATE variants SET stock = stock - ? WHERE sku = ?", (ln["qty"], ln["sku"]))
        conn.execute("DELETE FROM cart")
    return redirect(f"/orders/{number}?placed=1")


@ROUTES.get("/orders")
def orders(shop: Shop, req: Request) -> Response:
    found = shop.db.all("SELECT * FROM orders ORDER BY id DESC")
    if not found:
        return shop.page("My orders", "<p>You have no orders yet.</p>")
    rows = [[f"<a href='/orders/{seg(o['number'])}'>{esc(o['number'])}</a>", esc(o["placed_at"][:10]),
             money(o["total"])] for o in found]
    return shop.page("My orders", table(["Order", "Placed", "Total"], rows))


@ROUTES.get("/orders/{number}")
def order(shop: Shop, req: Request, number: str) -> Response:
    o = shop.db.one("SELECT * FROM orders WHERE number = ?", number)
    if o is None:
        return not_found(shop, "No such order.")
    items = shop.db.all("SELECT * FROM order_items WHERE order_id = ?", o["id"])
    body = (f"<p>Order number: <strong>{esc(o['number'])}</strong></p>"
            + table(["Product", "Variant", "Quantity", "Price"],
                    [[esc(i["name"]), esc(variant_label(i["color"], i["size"])), str(i["qty"]), money(i["unit_price"])]
                     for i in items], caption="Items")
            + f"<p>Shipping: {esc(SHIPPING[o['shipping']][0])} ({money(o['shipping_cost'])})</p>"
            f"<p>Total: <strong>{money(o['total'])}</strong></p>"
            f"<p>Ship to: {esc(o['name'])}, {esc(o['address'])}, {esc(o['postcode'])} {esc(o['city'])}</p>")
    notice = f"Thank you! Your order {o['number']} has been placed." if req.arg("placed") else ""
    return shop.page(f"Order {o['number']}", body, notice=notice)
