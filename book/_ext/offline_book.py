"""A small Sphinx extension that keeps the built book offline, its console clean and its links plain.

* sphinx-thebe (live code through a remote Binder kernel) is not used by this book, yet Jupyter Book 1
  registers its scripts twice, which declares ``THEBE_JS_URL`` twice (a console error) and puts a CDN URL
  in every page. Its scripts are dropped.
* The theme expects a default colour mode; without one it logs "Got invalid theme mode" on first visit.
* Chapters cite with plain markdown links,
  ``[Dao et al., 2022](../book/references.md#dao2022flashattention)``, which JupyterLab and Colab
  render too. MyST resolves ``page#anchor`` against the page's heading anchors only; the references
  page's entries are not headings, so their ids (the BibTeX keys, set by ``bibtex_cite_id``) are
  registered as anchors of that page here, and a link to a missing key still fails the strict build.
"""

from __future__ import annotations

from docutils import nodes

REFERENCES = "book/references"


def _is_thebe(js) -> bool:
    filename = getattr(js, "filename", str(js)) or ""
    body = getattr(js, "attributes", {}).get("body", "") or ""
    return "thebe" in filename or "THEBE_JS_URL" in body


def _page_context(app, pagename, templatename, context, doctree):
    if "script_files" in context:
        context["script_files"] = [js for js in context["script_files"] if not _is_thebe(js)]
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def _citation_anchors(app, doctree):
    """Register the references page's citation ids as anchors a markdown link may name."""
    if app.env.docname != REFERENCES:
        return
    slugs = app.env.metadata[REFERENCES].setdefault("myst_slugs", {})
    # the bibliography directive notes one explicit target per entry (placed in the page later)
    for node_id, node in doctree.ids.items():
        if isinstance(node, nodes.citation):
            slugs.setdefault(node_id, (node.line or 0, node_id, node_id))


def setup(app):
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("doctree-read", _citation_anchors)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
