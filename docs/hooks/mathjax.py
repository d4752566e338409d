"""MkDocs hook: serve MathJax 3 from the built site, so that formulas render offline too.

MathJax comes from the PyPI package `django-static-mathjax` (the docs extra in pyproject.toml
installs it): a copy of MathJax's own distribution, 3.2.2, with no dependencies, Django
included, despite its name. The hook adds its `es5/tex-mml-chtml.js` (the component that
mkdocs.yml's `extra_javascript` loads, as the CDN did before) to the site under
`assets/mathjax/`, with the folders that this component loads on demand: `input/` (TeX
extensions, loaded by `\\require` and autoload), `output/` (the CHTML fonts; the SVG renderer of
the right-click menu), `a11y/`, `ui/` and `sre/` (the menu's accessibility options). MathJax
finds them relative to its own script, so nothing else needs configuring.
"""

import importlib.metadata
import json
import pathlib

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

DISTRIBUTION = "django-static-mathjax"
SITE_FOLDER = "assets/mathjax"  # mkdocs.yml's extra_javascript names SITE_FOLDER/COMPONENT
COMPONENT = "tex-mml-chtml.js"
ON_DEMAND = ("input", "output", "a11y", "ui", "sre")


def _mathjax_root() -> pathlib.Path:
    """The MathJax distribution inside the installed package (its package.json's folder)."""
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise PluginError(
            f'MathJax is served from the PyPI package {DISTRIBUTION}, which is not installed: pip install -e ".[docs]"'
        ) from None
    root = pathlib.Path(distribution.locate_file("mathjax/static/mathjax"))
    try:
        version = json.loads((root / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        raise PluginError(f"{DISTRIBUTION}: no MathJax package.json under {root}") from None
    if not version.startswith("3.") or not (root / "es5" / COMPONENT).is_file():
        raise PluginError(
            f"{DISTRIBUTION} ships MathJax {version}; docs/javascripts/mathjax.js configures "
            f"MathJax 3 and loads es5/{COMPONENT}"
        )
    return root


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = _mathjax_root()
    es5 = root / "es5"
    sources = [es5 / COMPONENT, root / "LICENSE"]
    for folder in ON_DEMAND:
        sources += sorted(path for path in (es5 / folder).rglob("*") if path.is_file())
    for source in sources:
        relative = source.relative_to(es5 if source.is_relative_to(es5) else root).as_posix()
        files.append(File.generated(config, f"{SITE_FOLDER}/{relative}", abs_src_path=str(source)))
    return files
