"""Airflow's look for the Checkpoints pages: the font stack and colours of Airflow 3.3's
own UI, as CSS variables with a dark variant.

The pages are in an iframe of Airflow's UI (an `external_views` entry), so they cannot
use its Chakra theme directly; they copy its tokens instead. The values are those of
Airflow 3.3's theme (airflow-core/src/airflow/ui/src/theme.ts: the `brand`, `gray`, ...
palettes in OKLCH, and Chakra UI v3's semantic tokens `bg`, `fg`, `border` with their
`_light`/`_dark` pair, and Airflow's state colours, `fg` = shade 800 light / 200 dark),
as the installed UI bundle carries them (tests/airflow/test_ui_theme.py checks each one
against it, so an Airflow upgrade that changes its palette is seen).

Dark mode follows Airflow's own choice where it made one: Airflow's UI keeps it in
localStorage under `theme` (next-themes: "light", "dark" or "system"), which the pages
read (same origin) and mirror as a class on <html>; "system", or no choice, falls back
to the browser's `prefers-color-scheme`.
"""

from __future__ import annotations

from markupsafe import Markup

#: Airflow's font stacks (Chakra's `fonts.body` and `fonts.mono` in Airflow's theme).
FONT_BODY = (
    'Inter, -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, sans-serif, '
    '"Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol"'
)
FONT_MONO = 'SFMono-Regular,Menlo,Monaco,Consolas,"Liberation Mono","Courier New",monospace'

#: The shades of Airflow's palettes that the pages use: (palette, shade) -> colour.
PALETTE: dict[tuple[str, int], str] = {
    ("brand", 200): "oklch(0.923 0.023 255.082)",
    ("brand", 600): "oklch(0.469 0.084 257.657)",
    ("brand", 800): "oklch(0.324 0.072 260.329)",
    ("gray", 50): "oklch(0.985 0.004 253)",
    ("gray", 100): "oklch(0.955 0.006 253)",
    ("gray", 200): "oklch(0.915 0.01 253)",
    ("gray", 400): "oklch(0.75 0.025 252)",
    ("gray", 600): "oklch(0.45 0.055 251)",
    ("gray", 800): "oklch(0.28 0.035 251)",
    ("gray", 900): "oklch(0.18 0.03 251)",
    ("gray", 950): "oklch(0.11 0.025 251)",
    ("red", 200): "oklch(0.885 0.062 18.334)",
    ("red", 400): "oklch(0.704 0.191 22.216)",
    ("red", 500): "oklch(0.637 0.237 25.331)",
    ("red", 800): "oklch(0.444 0.177 26.899)",
    ("green", 300): "oklch(0.75 0.18 153.0)",
    ("green", 600): "oklch(0.47 0.20 149.0)",
    ("cyan", 200): "oklch(0.917 0.08 205.041)",
    ("cyan", 800): "oklch(0.45 0.085 224.283)",
    ("blue", 50): "oklch(0.97 0.014 254.604)",
    ("blue", 300): "oklch(0.809 0.105 251.813)",
    ("blue", 600): "oklch(0.546 0.245 262.881)",
    ("blue", 950): "oklch(0.282 0.091 267.935)",
    ("orange", 300): "oklch(0.857 0.118 76.815)",
    ("orange", 600): "oklch(0.5902 0.198 35.93)",
}
#: Airflow's `black` (its own, a blue-black); `white` is Chakra's.
BLACK = "oklch(0.23185 0.0323 266.44)"
WHITE = "#FFFFFF"

Shade = tuple[str, int] | str


def _colour(shade: Shade) -> str:
    if shade == "black":
        return BLACK
    if shade == "white":
        return WHITE
    assert isinstance(shade, tuple)
    return PALETTE[shade]


#: Each variable the pages' CSS uses: (light, dark), named after the token it copies.
TOKENS: dict[str, tuple[Shade, Shade]] = {
    "--bp-bg": ("white", "black"),  # bg
    "--bp-bg-subtle": (("gray", 50), ("gray", 950)),  # bg.subtle
    "--bp-bg-muted": (("gray", 100), ("gray", 900)),  # bg.muted
    "--bp-bg-info": (("blue", 50), ("blue", 950)),  # bg.info
    "--bp-fg": ("black", ("gray", 50)),  # fg
    "--bp-fg-muted": (("gray", 600), ("gray", 400)),  # fg.muted
    "--bp-fg-error": (("red", 500), ("red", 400)),  # fg.error
    "--bp-fg-info": (("blue", 600), ("blue", 300)),  # fg.info (links, as Airflow's)
    "--bp-fg-success": (("green", 600), ("green", 300)),  # fg.success
    "--bp-fg-warning": (("orange", 600), ("orange", 300)),  # fg.warning
    "--bp-border": (("gray", 200), ("gray", 800)),  # border
    "--bp-brand": (("brand", 600), ("brand", 600)),  # brand.solid
    "--bp-brand-fg": (("brand", 800), ("brand", 200)),  # brand.fg
    "--bp-failed-fg": (("red", 800), ("red", 200)),  # Airflow's `failed` state
    "--bp-running-fg": (("cyan", 800), ("cyan", 200)),  # Airflow's `running` state
}


def _declarations(mode: int) -> str:
    return "".join(f"{name}:{_colour(pair[mode])};" for name, pair in TOKENS.items())


def css_variables() -> Markup:
    """The variables for light mode on :root, and their dark values twice: when Airflow's
    UI chose dark (class `dark`), and when the browser prefers dark and Airflow's UI did
    not choose light (class `light`)."""
    light, dark = _declarations(0), _declarations(1)
    return Markup(
        f":root{{--bp-font:{FONT_BODY};--bp-mono:{FONT_MONO};{light}color-scheme:light;}}\n"
        f"@media (prefers-color-scheme: dark){{:root:not(.light){{{dark}color-scheme:dark;}}}}\n"
        f":root.dark{{{dark}color-scheme:dark;}}\n"
    )
