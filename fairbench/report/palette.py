"""One colour and one marker per method, the same in every figure fairbench draws.

Colours are colour-blind safe: the Okabe-Ito palette first, then Paul Tol's muted scheme. A
method not listed here (a third-party plugin) gets a colour and marker chosen by a hash of its
name, so it too keeps them from figure to figure.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple


class Style(NamedTuple):
    color: str
    marker: str


REGISTRY: dict[str, Style] = {
    "erm": Style("#000000", "s"),
    "dp-sgd": Style("#0072B2", "o"),
    "raco-dp": Style("#D55E00", "^"),
    "sgda": Style("#E69F00", "v"),
    "dp-fermi": Style("#009E73", "D"),
    "cgoo": Style("#CC79A7", "P"),
    "cgoo-nonprivate": Style("#882255", "X"),
    "dpse": Style("#56B4E9", "h"),
    "dpnose": Style("#332288", "p"),
    "fairlearn-eg": Style("#999933", "*"),
    "jagielski-post": Style("#44AA99", "<"),
    "jagielski-oracle": Style("#117733", ">"),
    "pf-ld": Style("#CC6677", "d"),
    "dp-erm-mitigation": Style("#DDCC77", "8"),
    "dpsgd-f": Style("#88CCEE", "H"),
    "dpsgd-global-adapt": Style("#AA4499", "d"),
    "decoupled-post": Style("#EE3377", "p"),  # Paul Tol's vibrant magenta: the muted set is used up
    "mozannar": Style("#EE7733", "*"),  # vibrant orange; fairlearn-eg's marker: its reduction
}
_SPARE_COLORS = (
    "#332288",
    "#88CCEE",
    "#44AA99",
    "#117733",
    "#999933",
    "#DDCC77",
    "#CC6677",
    "#882255",
    "#AA4499",
)
_SPARE_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "h", "*")
LINESTYLES = ("-", "--", ":", "-.")  # for several entries (labels) of one method in a figure


def style(method: str) -> Style:
    """The method's colour and marker."""
    if method in REGISTRY:
        return REGISTRY[method]
    digest = int(hashlib.sha256(method.encode()).hexdigest(), 16)
    return Style(
        _SPARE_COLORS[digest % len(_SPARE_COLORS)],
        _SPARE_MARKERS[(digest // len(_SPARE_COLORS)) % len(_SPARE_MARKERS)],
    )
