"""A small Sphinx extension that keeps the built book offline and its browser console clean.

* sphinx-thebe (live code through a remote Binder kernel) is not used by this book, yet Jupyter Book 1
  registers its scripts twice, which declares ``THEBE_JS_URL`` twice (a console error) and puts a CDN URL
  in every page. Its scripts are dropped.
* The theme expects a default colour mode; without one it logs "Got invalid theme mode" on first visit.
"""

from __future__ import annotations


def _is_thebe(js) -> bool:
    filename = getattr(js, "filename", str(js)) or ""
    body = getattr(js, "attributes", {}).get("body", "") or ""
    return "thebe" in filename or "THEBE_JS_URL" in body


def _page_context(app, pagename, templatename, context, doctree):
    if "script_files" in context:
        context["script_files"] = [js for js in context["script_files"] if not _is_thebe(js)]
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def setup(app):
    app.connect("html-page-context", _page_context, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
