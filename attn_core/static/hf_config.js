// A Hugging Face config.json, read in the page: the rules of hf_families.json (the data that
// attn_core.models.ModelConfig.from_hf_config applies in Python; its "_format" says what a rule is),
// then the model's values of the formulas' symbols (the table MODEL_SYMBOLS of attn_core/symbols.py,
// which ModelConfig.symbol_values applies in Python). Pure functions, no page: tests/test_models.py runs
// them in Node.js against Python for every family. The "does it fit" widget (ledger_widgets.js) is
// loaded after this file, in the same module.

// the fields of the model a config describes (ModelConfig's fields the family's rules name, and
// model_type); throws an Error that names an unknown model_type or a key the family needs
function readHfConfig(cfg, families, defaults) {
  const mt = cfg === null || typeof cfg !== "object" ? undefined : cfg.model_type;
  if (!mt) throw new Error("config has no 'model_type': it picks the family's rules");
  if (mt.startsWith("_") || !(mt in families)) {
    const known = Object.keys(families).filter((k) => !k.startsWith("_")).sort().join(", ");
    throw new Error(`unknown model_type '${mt}': the reader knows ${known}`);
  }
  const rulesOf = (t) => {
    const own = families[t];
    const out = own._extends ? rulesOf(own._extends) : {};
    for (const [k, v] of Object.entries(own)) if (!k.startsWith("_")) out[k] = v;
    return out;
  };
  const lookup = (key) => {
    let v = cfg;
    const parts = key.split(".");
    for (let i = 0; i < parts.length; i++) {
      if (v === null || typeof v !== "object" || Array.isArray(v) || !(parts[i] in v)) return undefined;
      v = v[parts[i]];
      if (v === null && i < parts.length - 1) return undefined;
    }
    return v;
  };
  const rules = rulesOf(mt);
  const done = {};
  const missing = (k, f) => new Error(`${mt} config has no '${k}' (ModelConfig.${f} is read from it)`);
  const field = (f) => (f in done ? done[f] : f in rules ? (done[f] = ev(rules[f], f)) : defaults[f]);
  function ev(r, f) {
    if (typeof r === "string") {
      const v = lookup(r);
      if (v === undefined) throw missing(r, f);
      return v;
    }
    if (r === null || typeof r !== "object") return r;
    if ("value" in r) return r.value;
    if ("key" in r) {
      const v = lookup(r.key);
      if (v === undefined) {
        if ("absent" in r || "default" in r) return ev("absent" in r ? r.absent : r.default, f);
        throw missing(r.key, f);
      }
      if (v === null || (r.none || []).includes(v)) return "default" in r ? ev(r.default, f) : null;
      return v;
    }
    if ("count" in r) {
      const xs = lookup(r.in);
      if (xs === undefined || xs === null) {
        if (!("default" in r)) throw missing(r.in, f);
        return ev(r.default, f);
      }
      return xs.filter((x) => x === r.count).length;
    }
    if ("field" in r) return field(r.field);
    if ("if" in r) {
      const c = ev(r.if, f);
      return ev(c !== null && c !== false && c !== 0 ? r.then : r.else, f);
    }
    const op = ["sum", "product", "max", "difference", "quotient"].find((o) => o in r);
    if (!op) throw new Error(`hf_families.json, ${mt}.${f}: not a rule`);
    const xs = r[op].map((x) => ev(x, f));
    if (xs.some((x) => typeof x !== "number")) {
      throw new Error(`${mt} config: ModelConfig.${f} is computed from values that are not numbers`);
    }
    return { sum: () => xs.reduce((a, b) => a + b, 0), product: () => xs.reduce((a, b) => a * b, 1),
             max: () => Math.max(...xs), difference: () => xs[0] - xs[1],
             quotient: () => Math.floor(xs[0] / xs[1]) }[op]();
  }
  const out = { model_type: mt };
  for (const f of Object.keys(rules)) out[f] = field(f);
  // one spelling per geometry, as ModelConfig.__post_init__
  if (out.window === undefined || out.window === null || out.sliding_layers === 0) {
    out.window = null;
    out.sliding_layers = null;
  }
  if (out.sliding_layers === out.num_layers) out.sliding_layers = null;
  return out;
}

// readHfConfig's fields, completed with ModelConfig's defaults and checked as from_hf_config checks
// them (fit: the "fit" part of the widgets' spec: hf_families, field_defaults, required, expert_fields)
function readModelConfig(cfg, fit) {
  const fields = { ...fit.field_defaults, ...readHfConfig(cfg, fit.hf_families, fit.field_defaults) };
  const need = [...fit.required, ...(fields.num_experts ? fit.expert_fields : [])];
  for (const f of need) {
    if (!Number.isInteger(fields[f]) || fields[f] <= 0) {
      throw new Error(`${fields.model_type} config: ${f} must be a positive integer, got ${JSON.stringify(fields[f])}`);
    }
  }
  fields.name = (typeof cfg._name_or_path === "string" && cfg._name_or_path) || fields.model_type;
  return fields;
}

// the model's values of the formulas' symbols: each symbol of `table` (MODEL_SYMBOLS) from its field
// (a list: the first field that is set; null and false count as 0, true as 1), and the options the
// string fields of `menus` (MODEL_MENUS) pick in `switches`
function modelSymbols(fields, table, menus, switches) {
  const env = {};
  for (const [sym, names] of Object.entries(table)) {
    const value = (Array.isArray(names) ? names : [names]).map((f) => fields[f]).find((v) => v);
    env[sym] = Number(value || 0);
  }
  for (const [f, menu] of Object.entries(menus)) Object.assign(env, switches[menu][fields[f]]);
  return env;
}
