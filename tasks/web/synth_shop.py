"""Shop task templates: an attribute lookup, filter + sort ("the cheapest X in Y"), counting
with facets, adding a variant to the cart, and a whole checkout. Each reads the same seeded
catalogue the shop builds (apps/shop_data.py), so its checks fit the data."""

from __future__ import annotations

from typing import Any

from orchard_cli.tasks.web.apps import shop_data
from orchard_cli.tasks.web.apps.shop import SHIPPING, variant_label
from orchard_cli.tasks.web.synth_kit import (Draw, Unfit, answer, answer_check, choose, click, fill, goto,
                                             request_check, role, state_check, template, tick)

PEOPLE = [("Alex Morgan", "12 Harbor Road", "24103", "Kiel"), ("Sam Rivera", "4 Mill Lane", "10115", "Berlin"),
          ("Jo Bauer", "88 Elm Street", "20095", "Hamburg"), ("Dana Okafor", "3 Quay Side", "28195", "Bremen")]
SHIP_WORDS = {"standard": "standard shipping", "express": "express (next-day) shipping", "pickup": "store pickup"}


def catalogue(d: Draw) -> list[dict[str, Any]]:
    """The shop's products, each with `skus`: what the shop sells of it (sku, color, size, price,
    stock, label), as the shop builds them."""
    products = shop_data.catalogue(d.seed)
    for p in products:
        variants = p["variants"] or [{"sku": p["id"], "color": p["color"], "size": p["size"], "price": p["price"],
                                      "stock": 10}]
        p["skus"] = [{"sku": v["sku"], "color": v["color"] or p["color"], "size": v["size"] or p["size"],
                      "price": v["price"] or p["price"], "stock": v["stock"]} for v in variants]
        for s in p["skus"]:
            s["label"] = variant_label(s["color"], s["size"])
        p["colors"] = {s["color"] for s in p["skus"] if s["color"]}
    return products


def open_product(name: str) -> list[dict[str, Any]]:
    return [goto("shop:/"), fill("#search-q", name), click(role("button", "Search")), click(role("link", name))]


def _wording(p: dict[str, Any], s: dict[str, Any]) -> str:
    colors = {v["color"] for v in p["skus"]}
    sizes = {v["size"] for v in p["skus"]}
    parts = ([f"in {s['color']}"] if len(colors) > 1 else []) + ([f"size {s['size']}"] if len(sizes) > 1 else [])
    return ", ".join(parts)


def _pick_variant(d: Draw, products: list[dict[str, Any]], need: int) -> tuple[dict, dict, dict]:
    """A product with variants, one of them with `need` in stock, and a sibling variant in stock."""
    options = [(p, s, t) for p in products if len(p["skus"]) > 1 for s in p["skus"] if s["stock"] >= need
               for t in p["skus"] if t is not s and t["stock"] >= need
               and (t["color"] == s["color"] or t["size"] == s["size"])]
    if not options:
        raise Unfit("no product with two variants in stock")
    return d.rng.choice(options)


@template("shop-attribute", "shop")
def attribute(d: Draw) -> dict[str, Any]:
    products = catalogue(d)
    p = d.rng.choice(products)
    kind = d.rng.choice(["material", "brand", "reviews"])
    others = [q for q in products if q["category"] == p["category"] and q[kind] != p[kind]]
    if not others:
        raise Unfit("every product of the category has the same value")
    wrong = d.rng.choice(others)
    questions = {"material": f"What material is the {p['name']} made of?",
                 "brand": f"Which brand makes the {p['name']}?",
                 "reviews": f"How many customer reviews does the {p['name']} have?"}
    if kind == "reviews":
        check = answer_check(number=p["reviews"])
    else:
        # every other value of the catalogue is excluded (an answer listing them all must fail),
        # but for one the right value holds (the check compares substrings)
        others = sorted({q[kind] for q in products if q[kind] != p[kind] and q[kind].lower() not in p[kind].lower()})
        check = answer_check(includes=[p[kind]], **({"excludes": others} if others else {}))
    return {"site": "shop", "category": "attribute", "difficulty": "easy",
            "prompt": questions[kind] + " Answer with just that.", "start": "/", "fixture": d.fixture(),
            "checks": [check],
            "gold": [*open_product(p["name"]), answer(str(p[kind]))],
            "near_miss": [*open_product(wrong["name"]), answer(str(wrong[kind]))]}


@template("shop-filter", "shop")
def filter_sort(d: Draw) -> dict[str, Any]:
    products = catalogue(d)
    for _ in range(30):
        category = d.rng.choice(sorted({p["category"] for p in products}))
        facet = d.rng.choice(["color", "brand"])
        in_category = [p for p in products if p["category"] == category]
        values = sorted({c for p in in_category for c in p["colors"]} if facet == "color"
                        else {p["brand"] for p in in_category})
        value = d.rng.choice(values)
        matching = [p for p in in_category if (value in p["colors"] if facet == "color" else p["brand"] == value)]
        goal = d.rng.choice(["cheapest", "highest-rated"])
        metric = (lambda p: p["price"]) if goal == "cheapest" else (lambda p: -p["rating"])
        ranked = sorted(matching, key=metric)
        if len(ranked) >= 3 and metric(ranked[0]) != metric(ranked[1]):
            break
    else:
        raise Unfit("no facet with a unique best product")
    which = f"that comes in {value}" if facet == "color" else f"made by {value}"
    best = "cheapest" if goal == "cheapest" else "highest-rated"
    steps = [goto("shop:/search"), choose("#category", category), choose(f"#{facet}", value),
             choose("#sort", "Price: low to high" if goal == "cheapest" else "Customer rating"),
             click(role("button", "Apply filters"))]
    return {"site": "shop", "category": "filter", "difficulty": "medium",
            "prompt": f"Which is the {best} product in the {category} category {which}? Answer with its name.",
            "start": "/", "fixture": d.fixture(),
            "checks": [answer_check(includes=[ranked[0]["name"]], excludes=[p["name"] for p in ranked[1:]])],
            "gold": [*steps, answer(ranked[0]["name"])], "near_miss": [*steps, answer(ranked[1]["name"])]}


@template("shop-count", "shop")
def count(d: Draw) -> dict[str, Any]:
    products = catalogue(d)
    for _ in range(30):
        if d.rng.random() < 0.5:
            category = d.rng.choice(sorted({p["category"] for p in products}))
            in_category = [p for p in products if p["category"] == category]
            n = sum(p["rating"] >= 4.0 for p in in_category)
            prompt = f"How many products in the {category} category have a customer rating of 4.0 or more?"
            steps = [goto("shop:/search"), choose("#category", category), choose("#sort", "Customer rating"),
                     click(role("button", "Apply filters"))]
            fits = 0 < n < len(in_category) and n != 4
        else:
            brand = d.rng.choice(sorted({p["brand"] for p in products}))
            limit = d.rng.choice([30, 50, 75, 100])
            n = sum(p["price"] <= limit for p in products if p["brand"] == brand)
            prompt = f"How many {brand} products cost ${limit} or less?"
            steps = [goto("shop:/search"), choose("#brand", brand), fill("#max_price", str(limit)),
                     click(role("button", "Apply filters"))]
            fits = 0 < n and n != limit and not any(p["price"] == limit for p in products)
        if fits:
            break
    else:
        raise Unfit("no count that reads unambiguously")
    return {"site": "shop", "category": "search", "difficulty": "medium", "prompt": prompt + " Answer with a number.",
            "start": "/", "fixture": d.fixture(), "checks": [answer_check(number=n)],
            "gold": [*steps, answer(str(n))], "near_miss": [*steps, answer(str(n - 1 if n > 1 else n + 1))]}


@template("shop-cart", "shop")
def add_to_cart(d: Draw) -> dict[str, Any]:
    products = catalogue(d)
    qty = d.rng.randint(2, 3)
    p, s, sibling = _pick_variant(d, products, qty)
    cart: list[dict[str, Any]] = []
    if d.rng.random() < 0.5:
        other = d.rng.choice([q for q in products if q is not p])
        cart = [{"sku": other["skus"][0]["sku"], "qty": 1}] if other["skus"][0]["stock"] else []
    expect = sorted([[line["sku"], line["qty"]] for line in cart] + [[s["sku"], qty]])

    def steps(label: str) -> list[dict[str, Any]]:
        return [*open_product(p["name"]), choose("#variant", label), fill("#qty", str(qty)),
                click(role("button", "Add to cart"))]

    keep = " Leave what is already in the cart there." if cart else ""
    return {"site": "shop", "category": "cart", "difficulty": "medium",
            "prompt": f"Add {qty} of the {p['name']} ({_wording(p, s)}) to my cart.{keep}",
            "start": "/", "fixture": d.fixture(shop={"cart": cart}),
            "checks": [state_check("cart", "shop", "SELECT sku, qty FROM cart ORDER BY sku", expect)],
            "gold": [*steps(s["label"]), answer("Added to the cart.")],
            "near_miss": [*steps(sibling["label"]), answer("Added to the cart.")]}


@template("shop-checkout", "shop")
def checkout(d: Draw) -> dict[str, Any]:
    products = catalogue(d)
    qty = d.rng.randint(1, 2)
    p, s, _ = _pick_variant(d, products, qty + 1)
    old_p = d.rng.choice([q for q in products if q is not p and q["skus"][0]["stock"]])
    old = old_p["skus"][0]
    name, street, postcode, city = d.rng.choice(PEOPLE)
    ship = d.rng.choice(sorted(SHIPPING))  # standard, express, pickup
    form = {"name": name, "address": street, "city": city, "postcode": postcode, "shipping": ship}

    def steps(n: int) -> list[dict[str, Any]]:
        return [goto("shop:/cart"), click(role("button", f"Remove {old_p['name']} ({old['label']})")),
                *open_product(p["name"]), choose("#variant", s["label"]), fill("#qty", str(n)),
                click(role("button", "Add to cart")), click(role("link", "Proceed to checkout")),
                fill("#name", name), fill("#address", street), fill("#city", city), fill("#postcode", postcode),
                tick(f"#ship-{ship}"), click(role("button", "Place order")), answer("Order placed.")]

    return {"site": "shop", "category": "checkout", "difficulty": "hard",
            "prompt": f"My cart still holds the {old_p['name']} from last time: take it out. Then buy {qty} of the "
                      f"{p['name']} ({_wording(p, s)}) and check out with {SHIP_WORDS[ship]}, for {name}, {street}, "
                      f"{postcode} {city}.",
            "start": "/", "fixture": d.fixture(shop={"cart": [{"sku": old["sku"], "qty": 1}]}),
            "checks": [request_check("order_placed_once", "shop", "/checkout", form, count=1),
                       state_check("order_items", "shop", "SELECT sku, qty FROM order_items ORDER BY sku",
                                   [[s["sku"], qty]]),
                       state_check("order_address", "shop",
                                   "SELECT name, address, city, postcode, shipping FROM orders",
                                   [[name, street, city, postcode, ship]])],
            "gold": steps(qty), "near_miss": steps(qty + 1)}
