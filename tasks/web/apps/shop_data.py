"""The shop's seeded catalogue: six categories of six products, each with a brand, material,
color/size, price and rating; apparel, shoes, bags, mugs and headphones come in variants (each
its own SKU, some out of stock). Same seed, same catalogue (product dicts as ProductFixture)."""

from __future__ import annotations

import random
import re
from typing import Any

COLORS = ["Black", "White", "Navy", "Red", "Green", "Grey", "Blue", "Yellow", "Olive", "Beige"]
ADJECTIVES = ["Harbor", "Summit", "Drift", "Cedar", "Atlas", "Ember", "Tide", "Alder", "Quarry", "Meadow",
              "Birch", "Coast", "Fjord", "Granite", "Willow", "Nimbus", "Lumen", "Orbit"]
CATEGORIES: dict[str, dict[str, Any]] = {
    "T-shirts": {"brands": ["Northwind", "Fieldday", "Loom & Co"],
                 "materials": ["cotton", "organic cotton", "linen blend"],
                 "nouns": ["Crew Tee", "V-neck Tee", "Pocket Tee", "Henley", "Long-sleeve Tee", "Raglan Tee"],
                 "price": (12, 42), "sizes": ["S", "M", "L", "XL"], "colors": (2, 4), "surcharge": {"XL": 2.0}},
    "Sneakers": {"brands": ["Stride", "Kinetic", "Northwind"], "materials": ["canvas", "leather", "suede", "mesh"],
                 "nouns": ["Runner", "Court Sneaker", "Trail Shoe", "Slip-on", "High-top", "Trainer"],
                 "price": (45, 160), "sizes": ["39", "40", "41", "42", "43", "44"], "colors": (1, 2)},
    "Backpacks": {"brands": ["Trailhead", "Urbanist", "Fieldday"],
                  "materials": ["nylon", "canvas", "recycled polyester"],
                  "nouns": ["Daypack", "Commuter Pack", "Rolltop", "Laptop Backpack", "Hiking Pack", "Mini Pack"],
                  "price": (35, 140), "fixed_sizes": ["15 L", "20 L", "28 L", "32 L"], "colors": (2, 3)},
    "Mugs": {"brands": ["Kiln House", "Morning Co", "Urbanist"],
             "materials": ["ceramic", "stoneware", "enamel", "glass"],
             "nouns": ["Mug", "Travel Mug", "Espresso Cup", "Latte Mug", "Camp Mug", "Tea Cup"],
             "price": (8, 32), "fixed_sizes": ["90 ml", "300 ml", "350 ml", "450 ml"], "colors": (2, 4)},
    "Desk lamps": {"brands": ["Lumen Works", "Brightline", "Kiln House"],
                   "materials": ["aluminium", "steel", "oak", "brass"],
                   "nouns": ["Desk Lamp", "Task Light", "Clip Lamp", "Arc Lamp", "Reading Lamp", "LED Bar"],
                   "price": (25, 190), "fixed_sizes": ["small", "medium", "large"], "colors": (1, 1)},
    "Headphones": {"brands": ["Sonora", "Brightline", "Kinetic"], "materials": ["plastic", "aluminium", "leatherette"],
                   "nouns": ["Over-ear Headphones", "Earbuds", "On-ear Headphones", "Sport Earbuds",
                             "Studio Headphones", "Kids Headphones"],
                   "price": (19, 320), "colors": (1, 3)},
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def catalogue(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"shop-{seed}")
    products: list[dict[str, Any]] = []
    used: set[str] = set()
    for category, spec in CATEGORIES.items():
        for noun in spec["nouns"]:
            adjective = rng.choice([a for a in ADJECTIVES if f"{a} {noun}" not in used])
            name = f"{adjective} {noun}"
            used.add(name)
            products.append(_product(rng, category, spec, name))
    return products


def _product(rng: random.Random, category: str, spec: dict[str, Any], name: str) -> dict[str, Any]:
    pid = slug(name)
    brand, material = rng.choice(spec["brands"]), rng.choice(spec["materials"])
    low, high = spec["price"]
    price = round(rng.randint(low, high - 1) + rng.choice([0.0, 0.49, 0.99, 0.5]), 2) or 0.99
    colors = rng.sample(COLORS, rng.randint(*spec["colors"]))
    size = rng.choice(spec["fixed_sizes"]) if "fixed_sizes" in spec else ""
    product = {"id": pid, "name": name, "category": category, "brand": brand, "material": material,
               "color": colors[0] if len(colors) == 1 else "", "size": size, "price": price,
               "rating": round(rng.uniform(2.6, 4.9), 1), "reviews": rng.randint(3, 480),
               "description": f"The {name} by {brand}, made of {material}. "
                              f"{rng.choice(_BLURBS[category])}", "variants": []}
    sizes = spec.get("sizes", [""])
    if len(colors) > 1 or len(sizes) > 1:
        for color in colors:
            for each in sizes:
                sku = "-".join(filter(None, [pid, slug(color), slug(each)]))
                extra = spec.get("surcharge", {}).get(each)
                product["variants"].append({
                    "sku": sku, "color": color, "size": each or size,
                    "price": round(price + extra, 2) if extra else None,
                    "stock": 0 if rng.random() < 0.1 else rng.randint(1, 15)})
    return product


_BLURBS = {
    "T-shirts": ["Soft, breathable and cut for everyday wear.", "Pre-shrunk and garment dyed.",
                 "A relaxed fit that keeps its shape wash after wash."],
    "Sneakers": ["Cushioned sole for all-day comfort.", "Grippy rubber outsole.", "Lightweight and easy to clean."],
    "Backpacks": ["Padded laptop sleeve and water-resistant base.", "Plenty of pockets for daily carry.",
                  "Comfortable straps for long days out."],
    "Mugs": ["Dishwasher and microwave safe.", "Keeps drinks warm for longer.", "Hand-glazed, each one unique."],
    "Desk lamps": ["Warm dimmable light with a flexible arm.", "Flicker-free LED, 3000 K.",
                   "A compact footprint for small desks."],
    "Headphones": ["Clear sound with deep bass.", "Up to 30 hours of battery life.",
                   "Foldable with a carrying pouch."],
}
