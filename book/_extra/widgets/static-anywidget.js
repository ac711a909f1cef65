// Live anywidgets in a static page: no kernel, no server, no network.
//
// When a notebook is executed by nbclient, the state of each widget (for an anywidget: its traits and its
// front-end module `_esm`) is embedded in the notebook and myst-nb writes it into the page as
// <script type="application/vnd.jupyter.widget-state+json">, with one
// <script type="application/vnd.jupyter.widget-view+json"> where each widget was displayed.
// This loader replaces each view by a <div>, imports the widget's own module and calls its render({model, el})
// with a small in-page model: get / set / on / off / save_changes behave as in Jupyter, but nothing is sent
// to a kernel. The widgets of this book compute in the browser, so their sliders stay live.
(function () {
  "use strict";
  const STATE = "application/vnd.jupyter.widget-state+json";
  const VIEW = "application/vnd.jupyter.widget-view+json";

  class StaticModel {
    constructor(state) {
      this._state = Object.assign({}, state);
      this._listeners = new Map();
      this.widget_manager = null;
    }
    get(name) {
      return this._state[name];
    }
    set(name, value) {
      const old = this._state[name];
      this._state[name] = value;
      if (old !== value) {
        this._emit("change:" + name, value);
        this._emit("change", value);
      }
    }
    save_changes() {}
    send() {}
    on(event, callback) {
      for (const name of String(event).split(/\s+/)) {
        if (!this._listeners.has(name)) this._listeners.set(name, new Set());
        this._listeners.get(name).add(callback);
      }
    }
    off(event, callback) {
      if (!event) return this._listeners.clear();
      for (const name of String(event).split(/\s+/)) {
        const set = this._listeners.get(name);
        if (set) callback ? set.delete(callback) : set.clear();
      }
    }
    _emit(name, value) {
      for (const callback of this._listeners.get(name) || []) callback(value);
    }
  }

  async function renderView(script, states) {
    const view = JSON.parse(script.textContent);
    const entry = states[view.model_id];
    if (!entry || entry.model_module !== "anywidget") return;
    const state = entry.state || {};
    const el = document.createElement("div");
    el.className = "static-anywidget";
    el.dataset.modelId = view.model_id;
    script.replaceWith(el);
    if (state._css) {
      const style = document.createElement("style");
      style.textContent = state._css;
      document.head.appendChild(style);
    }
    const url = URL.createObjectURL(new Blob([state._esm], { type: "text/javascript" }));
    try {
      let widget = (await import(url)).default;
      if (typeof widget === "function") widget = await widget();
      const model = new StaticModel(state);
      // tells a widget that no kernel will answer (e.g. to disable a "measure" button)
      model.set("_static_page", true);
      // the browser tests read the live state here, to recompute it in Python
      (window.staticWidgetModels = window.staticWidgetModels || {})[view.model_id] = model;
      if (widget.initialize) await widget.initialize({ model });
      await widget.render({ model, el });
      el.dataset.rendered = "true";
    } finally {
      URL.revokeObjectURL(url);
    }
  }

  function start() {
    let states = {};
    for (const script of document.querySelectorAll(`script[type="${STATE}"]`)) {
      Object.assign(states, JSON.parse(script.textContent).state || {});
    }
    for (const script of document.querySelectorAll(`script[type="${VIEW}"]`)) {
      renderView(script, states).catch((err) => console.error("widget failed to render:", err));
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
