"""GX Data Docs with no internet: the pages GX 1.x renders load Bootstrap, jQuery,
bootstrap-table, Font Awesome, Vega and GX's logo from CDNs, so a browser that cannot
reach them draws an unstyled page whose index lists nothing (its table is drawn by a
script). The UI keeps a copy of each in its static files (static/data-docs/; its
README.md says where each comes from) and, as it serves a page of a site, points the
page's CDN URLs at them: old sites are served offline too, and the store keeps one
site's files, not a copy of the assets per gate run."""

from __future__ import annotations

import re

#: Each CDN URL GX's templates reference -> its copy under static/data-docs/.
CDN_FILES: dict[str, str] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery-3.7.1.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": (
        "popper-1.12.9.min.js"
    ),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": (
        "bootstrap-4.3.1/bootstrap.min.css"
    ),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": (
        "bootstrap-4.3.1/bootstrap.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": (
        "bootstrap-table-1.19.1/bootstrap-table.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": (
        "bootstrap-table-1.19.1/bootstrap-table.min.js"
    ),
    # GX names 1.19.0 for the extension's stylesheet and 1.19.1 for its script: one copy.
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.css": (
        "bootstrap-table-1.19.1/bootstrap-table-filter-control.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.css": (
        "bootstrap-table-1.19.1/bootstrap-table-filter-control.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.js": (
        "bootstrap-table-1.19.1/bootstrap-table-filter-control.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/"
    "bootstrap-datepicker.min.css": "bootstrap-datepicker-1.9.0/bootstrap-datepicker.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/"
    "bootstrap-datepicker.min.js": "bootstrap-datepicker-1.9.0/bootstrap-datepicker.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        "fontawesome-free-6.6.0/css/all.min.css"
    ),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/"
    "bootstrap-prefers-dark.css": "bootstrap-dark-1.1.0/bootstrap-prefers-dark.min.css",
    # The newest of each major version, what the CDN serves for these URLs.
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/vega-5.33.1.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega/vega-lite-5.23.0.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega/vega-embed-6.29.0.min.js",
}

#: GX's logo, in the pages' header and footer and the site's stylesheet (one image for
#: light and dark).
GX_LOGO = "gx/logo-long.png"
_GX_IMAGE = r"https://great-expectations-web-assets\.s3\.[a-z0-9-]+\.amazonaws\.com/[\w.-]+\.png"

# Longest first, so that no URL matches as the start of a longer one; a URL ends at a
# quote (an attribute) or a query (the logo's cache-buster).
_CDN_URL = re.compile(
    "|".join(
        [f"(?P<logo>{_GX_IMAGE})(?:\\?[^\"'\\s<>]*)?"]
        + [re.escape(url) for url in sorted(CDN_FILES, key=len, reverse=True)]
    )
)


def local_assets(page: bytes, static_url: str) -> bytes:
    """The page or stylesheet `page` with each CDN asset it references replaced by its
    copy under `static_url` (the URL path of static/data-docs/, ending in a slash)."""

    def local(match: re.Match[str]) -> str:
        return static_url + (GX_LOGO if match["logo"] else CDN_FILES[match[0]])

    # surrogateescape: bytes that are not UTF-8 pass through unchanged.
    text = page.decode("utf-8", "surrogateescape")
    return _CDN_URL.sub(local, text).encode("utf-8", "surrogateescape")
