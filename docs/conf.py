"""Sphinx settings of the course's website: the notebooks as they were saved (never executed here) and the results
pages of docs/, built offline into docs/_build/html:

    python -m sphinx -c docs . docs/_build/html

Everything a page needs is served from the site itself: MathJax comes from the pip package sphinx-mathjax-offline
(its SVG output, so no fonts are loaded), there is no require.js and no ipywidgets manager (a notebook's widget shows
as the picture or the pre-drawn explorer saved beside it), and the theme's fonts are the reader's own.
"""

import importlib.util
from pathlib import Path

project = "bertlib"
author = "bertlib developers"
copyright = "bertlib developers (MIT licence)"
root_doc = "docs/index"
# the source folder is the repository's root, so notebooks, pages and the figures they show keep their paths
# the studies' own reports (every run, every rate tried) are pages too, beside the results pages that link them
REPORTS = [
    "experiments/finetune_study/README.md",
    "experiments/variants_study/README.md",
    "experiments/distil_study/README.md",
    "experiments/recipe_study/README.md",
    "experiments/gpu/README.md",
    "docs/results/gpu/README.md",
    "models/course-mini/README.md",
]
include_patterns = ["docs/*.md", "notebooks/[0-9][0-9]_*.ipynb", *REPORTS]
exclude_patterns = ["docs/_build", ".venv*", ".git", "runs", "**/.ipynb_checkpoints"]

extensions = ["myst_nb"]
nb_execution_mode = "off"  # the saved outputs are the course: never run a notebook to build the site
nb_ipywidgets_js = {}  # no widget manager (and no require.js) from a CDN: no page depends on a kernel's widgets
# a widget's output shows as the picture saved beside it (notebook 09 adds its explorer, which needs no kernel)
nb_mime_priority_overrides = [("*", "application/vnd.jupyter.widget-view+json", None)]
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]

# MathJax 3 from the sphinx-mathjax-offline package, copied into the site; its SVG output needs no font files
MATHJAX = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static"
html_static_path = [str(MATHJAX)]
mathjax_path = "mathjax/tex-svg.js"
mathjax3_config = {"loader": {"load": []}}

html_theme = "sphinx_book_theme"
html_title = "bertlib: BERT from scratch"
html_extra_path = ["_root"]  # index.html at the site's root, which opens the course's first page
html_theme_options = {
    "use_download_button": True,  # each notebook page links its .ipynb
    "use_repository_button": False,
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
}
html_context = {"default_mode": "light"}  # the theme's switch starts somewhere (offline, nothing is remembered yet)
html_show_search_summary = False  # summaries fetch() each page, which browsers refuse for a site opened from files
html_show_sourcelink = True
html_copy_source = True
html_sourcelink_suffix = ""  # the download link of a notebook page gives the .ipynb itself
