// Front end of attn_core.widgets (an anywidget ES module: no imports, no build step, no network).
//
// Every number on the widget is computed by the functions of static/formulas.js, which SymPy
// printed from the one definition of each formula (attn_core/formulas.py) and which the widget
// loads before this file, in the same module; Python calls the same definitions with exact
// Fractions. The `spec` trait (attn_core.widgets.formula_spec()) says which symbol each slider
// and menu sets. The block between the evaluator markers is pure, and tests/test_widgets.py runs
// it with formulas.js in Node.js to check that both give the same numbers. Each shown number is also written into the page
// as <span data-key="..." data-value="..."> so a browser test can read it.

// <evaluator>
// The formulas are in static/formulas.js (GENERATED), printed from attn_core/formulas.py by
// SymPy (`make formulas`, checked by tests/test_formulas.py). What is written by hand
// here is only the lookup of the inputs and menus.

// the fields of the "does it fit" widget's model: a pasted config.json (read by hf_config.js, loaded
// before this file), else the preset's (spec.fit.models)
function fitModelFields(spec, preset, config) {
  if (config && Object.keys(config).length) return readModelConfig(config, spec.fit);
  if (!(preset in spec.fit.models)) throw new Error(`model must be a preset or a config.json, got ${preset}`);
  return spec.fit.models[preset];
}

// the symbols of a widget's formulas from its state: the model's (its fields through spec.fit's table),
// a base preset's (the explorer's weights), the members of a list (1 if the list holds the item), inputs (symbol <- trait) and menus (switches)
function buildEnv(recipe, state, spec) {
  const env = { ...recipe.constants };
  if (recipe.model) {
    const fields = fitModelFields(spec, state[recipe.model.preset], state[recipe.model.config]);
    Object.assign(env, modelSymbols(fields, spec.fit.model_symbols, spec.fit.model_menus, spec.switches));
  }
  if (recipe.base) {  // a preset's symbols (its ModelConfig's, in the spec), under the inputs below
    const base = state[recipe.base];
    if (!(base in spec.models)) throw new Error(`${recipe.base} must be a preset, got ${base}`);
    Object.assign(env, spec.models[base].symbols);
  }
  for (const [trait, members] of Object.entries(recipe.members || {})) {
    const chosen = new Set(state[trait] || []);
    for (const [item, sym] of Object.entries(members)) env[sym] = chosen.has(item) ? 1 : 0;
  }
  for (const [sym, trait] of Object.entries(recipe.inputs)) env[sym] = Number(state[trait]);
  for (const [sw, trait] of Object.entries(recipe.switches)) {
    const options = spec.switches[sw];
    const key = String(state[trait]);
    if (!(key in options)) throw new Error(`${trait} must be one of ${Object.keys(options)}`);
    Object.assign(env, options[key]);
  }
  return env;
}

function computeValues(spec, kind, state) {
  return GENERATED[kind](buildEnv(spec.widgets[kind], state, spec));
}

// the traits a widget's formulas read (inputs, menus, lists, the model)
function stateTraits(recipe) {
  const m = recipe.model ? [recipe.model.preset, recipe.model.config] : [];
  const base = recipe.base ? [recipe.base] : [];
  return [...Object.values(recipe.inputs), ...Object.values(recipe.switches), ...Object.keys(recipe.members || {}), ...m, ...base];
}
// </evaluator>

// <fit-advice>
// What the "does it fit" page says, in words, and the cheapest single change that makes a step fit. Pure
// (no page): tests/js_fit.py runs it in Node.js, and the tests check every change it tries against
// Python's training_memory. Every number comes from computeValues, the generated formula.

// the unit bytes are written in: the memory's own (GB or GiB); GiB for a memory typed in MiB (nvidia-smi's)
const shownMemUnit = (unit) => (unit === "MiB" ? "GiB" : unit);

// bytes in the memory's unit (shownMemUnit): one decimal, three digits below 1
function fmtMem(bytes, state, spec) {
  const unit = shownMemUnit(state.mem_unit);
  const x = bytes / spec.switches.mem_unit[unit].u_mem;
  return `${Math.abs(x) >= 1 || x === 0 ? x.toFixed(1) : x.toPrecision(3)} ${unit}`;
}

// what the peak is compared with, in words: "the 71.7 GiB usable after a 10% allowance" (with no allowance,
// "the 79.6 GiB of memory")
function usableWords(v, state, spec) {
  const a = Number(state.allowance);
  return a > 0 ? `the ${fmtMem(v.usable_bytes, state, spec)} usable after a ${+a.toFixed(2)}% allowance`
    : `the ${fmtMem(v.mem_bytes, state, spec)} of memory`;
}

// {kind: "fits" | "over" | "state", text}
function fitVerdict(v, state, spec) {
  const f = (x) => fmtMem(x, state, spec);
  const of = usableWords(v, state, spec);
  if (v.fits) return { kind: "fits", text: `Fits: ${f(v.total_bytes)} at the peak, of ${of}; ${f(v.spare_bytes)} to spare.` };
  if (v.state_bytes > v.usable_bytes) {
    return { kind: "state", text: `Does not fit: the training state alone needs ${f(v.state_bytes)}, more than ${of}, before a single token.` };
  }
  return { kind: "over", text: `Does not fit: needs ${f(v.total_bytes)} at the peak, ${f(-v.spare_bytes)} over ${of}.` };
}

// the longest N that fits, in whole tokens a multiple of cp (0: none)
function fitLongestN(v, state) {
  const cp = Number(state.cp);
  return v.n_max === null ? 0 : Math.max(0, Math.floor(v.n_max / cp) * cp);
}

// the settings that change nothing under the others, each with the reason in a few words (the page greys
// them; tests/test_widgets.py checks that no value of one changes a number). From the symbols the menus set.
function fitOff(state, spec) {
  const off = {};
  const ft = spec.switches.finetune[state.finetune] || {};
  if (!ft.f_lora) {
    for (const t of ["lora_rank", "lora_modules", "lora_dropout"]) off[t] = "full training: no adapters";
  }
  if (!ft.f_quant) off.quantize = ft.f_lora ? "LoRA: the base is not quantized" : "full training: nothing quantized";
  if (!(spec.switches.recompute[state.recompute] || {}).r_full) off.offload = "only with full recomputation";
  if (Number(state.tp) === 1) off.sequence_parallel = "needs TP > 1";
  return off;
}

// What "cheapest" means: the order of FIT_CHANGES, fixed by hand
const FIT_ORDER = "Cheapest means this order, fixed by hand by what each change costs in extra compute, "
  + "communication or training quality (not by the memory it saves): first what costs no extra compute, then "
  + "recomputation, communication and throughput, then changes to what is trained. Each change is tried alone, "
  + "on the settings above; the first that fits is proposed.";

// The single changes tried, cheapest first (FIT_ORDER), with what each costs in a few words (chapter 10's);
// a change already made, or one that does not apply, is skipped. [label, cost, state, model fields -> change or null]
const FIT_CHANGES = [
  ["bf16 mixed precision", "bf16 activations and compute, a float32 master copy: no extra compute", (s) => (s.precision === "fp32" ? { precision: "bf16_mixed" } : null)],
  ["a chunked cross-entropy", "the loss a chunk at a time: no float32 copy of all the logits", (s) => (["fp32", "fp32_kept"].includes(s.loss) ? { loss: "chunked" } : null)],
  ["a fused optimizer step", "PyTorch's fused AdamW: no copy of the parameters", (s) => (s.optimizer_impl === "foreach" ? { optimizer_impl: "fused" } : null)],
  ["compiled kernels (torch.compile)", "fused norms, SiLU recomputed: no float32 copies", (s) => (s.kernels !== "compiled" ? { kernels: "compiled" } : null)],
  ["per-op selective recomputation", "recomputes the norms, RoPE, SiLU and the matmuls it does not keep, in the backward", (s) => (["none", "selective"].includes(s.recompute) ? { recompute: "per_op" } : null)],
  ["ZeRO-3", "each block's weights gathered before it runs: more communication", (s) => (Number(s.zero) < 3 && s.dp * s.cp > 1 ? { zero: 3 } : null)],
  ["a smaller micro-batch", "the same step by gradient accumulation: less throughput", null],
  ["full recomputation", "reruns the whole block during its backward", (s) => (s.recompute !== "full" ? { recompute: "full" } : null)],
  ["a fused loss", "a fused cross-entropy kernel (Liger Kernel, Cut Cross-Entropy): no logits kept", (s) => (s.loss !== "fused" ? { loss: "fused" } : null)],
  ["8-bit AdamW", "the optimizer's moments in 8 bits: a change to the optimizer", (s) => (s.optimizer === "adamw" ? { optimizer: "adamw_8bit" } : null)],
  ["checkpoints offloaded to the host", "each block's input copied to the host and back", (s) => (s.recompute === "full" && !s.offload ? { offload: true } : null)],
  ["twice the tensor parallelism", "twice the GPUs per replica, more communication",
    (s, m) => (m.num_heads % (2 * s.tp) === 0 && m.num_kv_heads % (2 * s.tp) === 0 ? { tp: 2 * s.tp } : null)],
  ["LoRA", "only low-rank adapters train, on a frozen model", (s) => (s.finetune === "full" ? { finetune: "lora" } : null)],
  ["QLoRA", "only the adapters train, on a 4-bit frozen model", (s) => (s.finetune !== "qlora" ? { finetune: "qlora" } : null)],
];

// the change's words, with its values ("ZeRO-3 over 8 GPUs", "a micro-batch of 2", ...)
function changeLabel(label, change, state) {
  if ("zero" in change) return `${label} over the ${state.dp * state.cp} data-parallel GPUs`;
  if ("tp" in change) return `tensor parallelism over ${change.tp} GPUs`;
  if ("B" in change) return `a micro-batch of ${change.B} (accumulating ${Math.ceil(state.B / change.B)} of them)`;
  if ("finetune" in change) return `${label} (rank ${state.lora_rank})`;
  return label;
}

// {tried: [{label, cost, change, fits, peak}], best: the first that fits or null}; when it fits already,
// nothing is tried
function cheapestChange(spec, state) {
  const fields = fitModelFields(spec, state.model, state.config);
  const tried = [];
  if (computeValues(spec, "fit", state).fits) return { tried, best: null };
  for (const [label, cost, make] of FIT_CHANGES) {
    let change = make ? make(state, fields) : null;
    if (!make) {  // the largest micro-batch below B that fits, else B = 1
      for (let b = state.B - 1; b >= 1 && !change; b--) {
        if (b === 1 || computeValues(spec, "fit", { ...state, B: b }).fits) change = { B: b };
      }
    }
    if (!change) continue;
    const v = computeValues(spec, "fit", { ...state, ...change });
    const entry = { label: changeLabel(label, change, state), cost, change, fits: v.fits === 1, peak: v.total_bytes };
    tried.push(entry);
    if (entry.fits) return { tried, best: entry };
  }
  return { tried, best: null };
}
// </fit-advice>

// ------------------------------------------------------------------------------ formatting
// the unit tables and the charts' colours come with the spec (attn_core.display: one source)
let BIN = [];
let DEC = [];
let COLORS = {};
function useStyle(spec) {
  BIN = spec.units.bytes;
  DEC = spec.units.flops;
  COLORS = spec.colors;
}

// x in the largest unit of `table` it reaches, two decimals (`short`: "4 GiB", not "4.00 GiB")
function fmtUnits(x, table, base, short) {
  if (x === null || x === undefined) return "n/a";
  for (const [unit, s] of table) {
    if (x >= s) {
      const v = (x / s).toFixed(2);
      return `${short ? v.replace(/\.00$/, "") : v} ${unit}`;
    }
  }
  return `${Math.round(x)} ${base}`;
}
const fmtBytes = (x, short = false) => fmtUnits(x, BIN, "B", short);
const fmtFlops = (x, short = false) => fmtUnits(x, DEC, "FLOPs", short);
function fmtTokens(n) {
  n = Math.round(n);
  if (n >= 1048576 && n % 1048576 === 0) return `${n / 1048576}M`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024}K`;
  return n.toLocaleString("en-US");
}
const fmtInt = (x) => (x === null ? "never" : Math.round(x).toLocaleString("en-US"));
const fmtRatio = (x) => (x === null ? "n/a" : `${x >= 100 ? Math.round(x).toLocaleString("en-US") : x.toFixed(1)}x`);
const fmtPct = (x) => (x === null ? "n/a" : `${(100 * x).toFixed(1)}%`);
const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
// a label with subscripts written _{...} ("N*_{mem}", the chapters' N^star_mem): in HTML <sub>, in SVG a
// lowered tspan (the text after it raised back); the text escaped
const SUB = /_\{([^}]*)\}/g;
const subHtml = (s) => esc(s).replace(SUB, "<sub>$1</sub>");
function subSvg(s) {
  const parts = esc(s).split(SUB);  // text, sub, text, sub, ...
  return parts.map((p, i) => (i % 2 ? `<tspan dy="3" font-size="8">${p}</tspan>` : i && p ? `<tspan dy="-3">${p}</tspan>` : p)).join("");
}
// about how wide a 10 px label is (8 px subscripts), to keep labels apart
const labelWidth = (s) => String(s).split(SUB).reduce((w, p, i) => w + p.length * (i % 2 ? 4.8 : 5.9), 0);

// ------------------------------------------------------------------------------ SVG charts
function logTicks(lo, hi, base, maxTicks, fmt) {
  // ticks at base^(k * step), step a whole number chosen to give at most maxTicks ticks
  const a = Math.ceil(Math.log(lo) / Math.log(base) - 1e-9);
  const b = Math.floor(Math.log(hi) / Math.log(base) + 1e-9);
  let step = 1;
  while ((b - a) / step + 1 > maxTicks) step += 1;
  const out = [];
  for (let k = Math.ceil(a / step) * step; k <= b; k += step) out.push([base ** k, fmt(base ** k)]);
  return out;
}

function niceLinearTicks(hi, n = 5) {
  const raw = hi / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [0];
  while (out[out.length - 1] < hi * 0.9999) out.push(out.length * step);
  return out;
}

function lineChart(o) {
  const { w, h } = o;
  const m = { l: 80, r: 14, t: 26, b: 42 };
  const tx = (x) => (o.xlog ? Math.log2(x) : x);
  const ty = (y) => (o.ylog ? Math.log2(y) : y);
  const X = (x) => m.l + ((tx(x) - tx(o.xmin)) / (tx(o.xmax) - tx(o.xmin))) * (w - m.l - m.r);
  const Y = (y) => h - m.b - ((ty(y) - ty(o.ymin)) / (ty(o.ymax) - ty(o.ymin))) * (h - m.t - m.b);
  const clampY = (y) => Math.min(Math.max(y, o.ymin), o.ymax);
  const parts = [];
  parts.push(`<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="${esc(o.title)}"><title>${esc(o.title)}</title>`);
  parts.push(`<text x="${w / 2}" y="16" text-anchor="middle" font-size="12" font-weight="600">${esc(o.title)}</text>`);
  for (const [v, label] of o.yticks) {
    const y = Y(v).toFixed(1);
    parts.push(`<line x1="${m.l}" x2="${w - m.r}" y1="${y}" y2="${y}" stroke="#e6e6e6"/>`);
    parts.push(`<text x="${m.l - 5}" y="${y}" dy="3.5" text-anchor="end" font-size="10">${esc(label)}</text>`);
  }
  for (const [v, label] of o.xticks) {
    const x = X(v).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${m.t}" y2="${h - m.b}" stroke="#f0f0f0"/>`);
    parts.push(`<text x="${x}" y="${h - m.b + 14}" text-anchor="middle" font-size="10">${esc(label)}</text>`);
  }
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${w - m.l - m.r}" height="${h - m.t - m.b}" fill="none" stroke="#888"/>`);
  parts.push(`<text x="${(m.l + w - m.r) / 2}" y="${h - 6}" text-anchor="middle" font-size="11">${esc(o.xlabel)}</text>`);
  parts.push(`<text transform="translate(13 ${(m.t + h - m.b) / 2}) rotate(-90)" text-anchor="middle" font-size="11">${esc(o.ylabel)}</text>`);
  for (const hl of o.hlines || []) {
    const y = Y(hl.y).toFixed(1);
    parts.push(`<line x1="${m.l}" x2="${w - m.r}" y1="${y}" y2="${y}" stroke="${hl.color}" stroke-dasharray="2 3"/>`);
  }
  for (const s of o.series) {
    const pts = s.pts.filter(([x, y]) => y !== null && (!o.ylog || y > 0));
    const d = pts.map(([x, y], i) => `${i ? "L" : "M"}${X(x).toFixed(1)},${Y(clampY(y)).toFixed(1)}`).join("");
    parts.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2" ${s.dash ? `stroke-dasharray="${s.dash}"` : ""}/>`);
  }
  const vls = (o.vlines || []).filter((vl) => vl.x !== null && vl.x >= o.xmin && vl.x <= o.xmax);
  const lineXs = vls.map((vl) => X(vl.x));
  const placed = [];
  vls.forEach((vl, i) => {
    const x = lineXs[i];
    parts.push(`<line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${m.t}" y2="${h - m.b}" stroke="${vl.color}" stroke-width="1.2" stroke-dasharray="${vl.dash || "5 3"}"/>`);
  });
  vls.forEach((vl, i) => {
    // the label beside its line, right or left, on a row where it overlaps no other label, crossing as few
    // other lines as it can (then the lowest row, the right side); a white halo keeps it legible over a line
    const x = lineXs[i];
    const lw = labelWidth(vl.label) + 2;
    let best = null;
    for (let row = 0; row < vls.length + 1; row++) {
      for (const right of [true, false]) {
        const x0 = right ? x + 4 : x - 4 - lw;
        const x1 = x0 + lw;
        if (x0 < m.l + 2 || x1 > w - m.r - 2) continue;
        if (placed.some((p) => p.row === row && p.x0 < x1 + 3 && x0 < p.x1 + 3)) continue;
        const crossed = lineXs.filter((lx, j) => j !== i && lx > x0 - 2 && lx < x1 + 2).length;
        if (!best || crossed < best.crossed) best = { row, right, x0, x1, crossed };
      }
    }
    const spot = best || { row: i, right: true, x0: x + 4, x1: x + 4 + lw };
    placed.push(spot);
    parts.push(`<text x="${(spot.right ? x + 4 : x - 4).toFixed(1)}" y="${h - m.b - 8 - 15 * spot.row}" text-anchor="${spot.right ? "start" : "end"}" font-size="10" paint-order="stroke" stroke="#fff" stroke-width="3" stroke-linejoin="round" style="fill:${vl.color}">${subSvg(vl.label)}</text>`);
  });
  const legendW = 36 + 5.6 * Math.max(...o.series.map((s) => s.label.length));
  parts.push(`<rect x="${m.l + 4}" y="${m.t + 3}" width="${legendW.toFixed(0)}" height="${14 * o.series.length + 4}" fill="#fff" fill-opacity="0.85"/>`);
  o.series.forEach((s, i) => {
    const y = m.t + 12 + 14 * i;
    parts.push(`<line x1="${m.l + 8}" x2="${m.l + 28}" y1="${y - 3.5}" y2="${y - 3.5}" stroke="${s.color}" stroke-width="2" ${s.dash ? `stroke-dasharray="${s.dash}"` : ""}/>`);
    parts.push(`<text x="${m.l + 32}" y="${y}" font-size="10">${esc(s.label)}</text>`);
  });
  parts.push("</svg>");
  return parts.join("");
}

function stackedBars(o) {
  // o.bars: [{label, parts: [{label, color, value}]}], values in bytes; the legend's column is as
  // wide as its longest label (about 5.8 px a character at 10 px), so no label is cut
  const { h } = o;
  const legendW = 26 + 5.8 * Math.max(...o.legend.map((item) => item.label.length));
  const m = { l: 64, r: Math.max(150, legendW), t: 26, b: 42 };
  const w = o.w + m.r - 150;
  const top = Math.max(...o.bars.map((b) => b.parts.reduce((s, p) => s + p.value, 0)), 1);
  const unit = BIN.find(([, s]) => top >= s) || ["bytes", 1];
  const ticks = niceLinearTicks(top / unit[1]);
  const ymax = ticks[ticks.length - 1] * unit[1];
  const Y = (v) => h - m.b - (v / ymax) * (h - m.t - m.b);
  const bw = (w - m.l - m.r) / o.bars.length;
  const parts = [];
  parts.push(`<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="${esc(o.title)}"><title>${esc(o.title)}</title>`);
  parts.push(`<text x="${(m.l + w - m.r) / 2}" y="16" text-anchor="middle" font-size="12" font-weight="600">${esc(o.title)}</text>`);
  for (const t of ticks) {
    const y = Y(t * unit[1]).toFixed(1);
    parts.push(`<line x1="${m.l}" x2="${w - m.r}" y1="${y}" y2="${y}" stroke="#e6e6e6"/>`);
    parts.push(`<text x="${m.l - 5}" y="${y}" dy="3.5" text-anchor="end" font-size="10">${+t.toFixed(3)}</text>`);
  }
  o.bars.forEach((bar, i) => {
    let acc = 0;
    const x = m.l + bw * i + bw * 0.2;
    for (const p of bar.parts) {
      if (p.value <= 0) continue;
      const y0 = Y(acc);
      const y1 = Y(acc + p.value);
      parts.push(`<rect x="${x.toFixed(1)}" y="${y1.toFixed(1)}" width="${(bw * 0.6).toFixed(1)}" height="${Math.max(y0 - y1, 0.5).toFixed(1)}" fill="${p.color}" stroke="#fff" stroke-width="0.5"><title>${esc(`${p.label}: ${fmtBytes(p.value)}`)}</title></rect>`);
      acc += p.value;
    }
    parts.push(`<text x="${(x + bw * 0.3).toFixed(1)}" y="${h - m.b + 14}" text-anchor="middle" font-size="11">${esc(bar.label)}</text>`);
    parts.push(`<text x="${(x + bw * 0.3).toFixed(1)}" y="${(Y(acc) - 4).toFixed(1)}" text-anchor="middle" font-size="10">${esc(fmtBytes(acc))}</text>`);
  });
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${w - m.l - m.r}" height="${h - m.t - m.b}" fill="none" stroke="#888"/>`);
  parts.push(`<text transform="translate(13 ${(m.t + h - m.b) / 2}) rotate(-90)" text-anchor="middle" font-size="11">${esc(`${o.ylabel} (${unit[0]})`)}</text>`);
  o.legend.forEach((item, i) => {
    const y = m.t + 6 + 14 * i;
    parts.push(`<rect x="${w - m.r + 8}" y="${y}" width="10" height="10" fill="${item.color}"/>`);
    parts.push(`<text x="${w - m.r + 22}" y="${y + 9}" font-size="10">${esc(item.label)}</text>`);
  });
  parts.push("</svg>");
  return parts.join("");
}

function logGrid(lo, hi, n = 97) {
  const a = Math.log2(lo);
  const b = Math.log2(hi);
  return Array.from({ length: n }, (_, i) => 2 ** (a + ((b - a) * i) / (n - 1)));
}

// the figures' x axis: N on a log grid from lo to hi, with the widget's values at each N
function sweep(spec, kind, state, lo, hi) {
  return logGrid(lo, hi).map((n) => [n, computeValues(spec, kind, { ...state, N: Math.round(n) })]);
}

function logRange(ys) {
  const pos = ys.filter((y) => y !== null && y > 0);
  return [Math.min(...pos) / 1.5, Math.max(...pos) * 1.5];
}

// ------------------------------------------------------------------------------ controls
function el(tag, attrs = {}, children = []) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.appendChild(c);
  return e;
}

function rangeControl(label, { min, max, step, onInput, title }) {
  const input = el("input", { type: "range", min, max, step, "aria-label": label });
  const out = el("output");
  const wrap = el("div", { class: "al-control", title: title || "" }, [el("label", { text: label }), input, out]);
  input.addEventListener("input", () => onInput(Number(input.value)));
  return { wrap, input, out };
}

// options: [value, text, title (a tooltip, optional)]; the menu's own tooltip is its option's (showOption)
function selectControl(label, options, onChange) {
  const sel = el("select", { "aria-label": label });
  for (const [value, text, title] of options) sel.appendChild(el("option", title ? { value, text, title } : { value, text }));
  const wrap = el("div", { class: "al-control al-select" }, [el("label", { text: label }), sel]);
  sel.addEventListener("change", () => {
    showOption(sel, sel.value);
    onChange(sel.value);
  });
  return { wrap, input: sel };
}

// a menu set to value, its tooltip the chosen option's
function showOption(sel, value) {
  sel.value = String(value);
  const opt = sel.options[sel.selectedIndex];
  sel.title = opt && opt.title ? opt.title : "";
}

// the words a menu shows for an option, and its tooltip: spec.labels, the one table of labels
// (attn_core.symbols.OPTION_LABELS); an option without a label shows its key
function optionLabel(spec, menu, key) {
  const pair = (spec.labels && spec.labels[menu] && spec.labels[menu][key]) || [String(key), ""];
  return [key, pair[0], pair[1]];
}

// grey a control that changes nothing under the other settings, with the reason (null: as usual)
function setOff(control, reason) {
  if (!control.why) {
    control.why = el("div", { class: "al-why" });
    control.wrap.appendChild(control.why);
  }
  for (const input of control.inputs || [control.input]) input.disabled = !!reason;
  control.wrap.classList.toggle("al-off", !!reason);
  control.wrap.title = reason ? `Changes nothing here: ${reason}.` : "";
  control.why.textContent = reason || "";
}

function checkControl(label, onChange) {
  const box = el("input", { type: "checkbox", "aria-label": label });
  const wrap = el("div", { class: "al-control" }, [el("label", { text: "" }), el("span", { class: "al-check" }, [box, el("span", { text: label })]), el("output")]);
  box.addEventListener("change", () => onChange(box.checked));
  return { wrap, input: box };
}

function divisors(n, cap = 256) {
  const out = [];
  for (let k = 1; k <= Math.min(n, cap); k++) if (n % k === 0) out.push(k);
  return out;
}

function nearest(list, v) {
  // nearest on a log scale
  return list.reduce((best, x) => (Math.abs(Math.log(x / v)) < Math.abs(Math.log(best / v)) ? x : best), list[0]);
}

function readouts(rows) {
  // rows: [key, label (subscripts as _{...}), formatter]
  const box = el("div", { class: "al-readouts" });
  const spans = {};
  for (const [key, label, fmt] of rows) {
    const span = el("span", { "data-key": key });
    const name = el("span");
    name.innerHTML = subHtml(label);
    const why = el("span", { class: "al-why" });
    name.appendChild(why);
    const row = el("div", { class: "al-row" }, [name, span]);
    spans[key] = { span, fmt, row, why };
    box.appendChild(row);
  }
  const update = (values) => {
    for (const [key, { span, fmt }] of Object.entries(spans)) {
      const v = values[key];
      span.textContent = fmt(v);
      span.setAttribute("data-value", v === null ? "null" : String(v));
    }
  };
  // grey a row that the settings make empty, with the reason (null: shown as usual)
  const dim = (key, reason) => {
    const { row, why } = spans[key];
    row.classList.toggle("al-off", !!reason);
    why.textContent = reason ? ` (${reason})` : "";
  };
  return { box, update, dim };
}

// ------------------------------------------------------------------------------ the views
function stateOf(model, spec, kind) {
  const state = {};
  for (const t of stateTraits(spec.widgets[kind])) state[t] = model.get(t);
  return state;
}

function commit(model, changes) {
  for (const [k, v] of Object.entries(changes)) model.set(k, v);
  try {
    model.save_changes();
  } catch (err) {
    // a static page has no kernel to save to: the page still updates from the spec
  }
}

// N on a log slider of half steps: whole positions are powers of two, the half ones 1.5 times the power
// below (..., 4K, 6K, 8K, 12K, 16K, ...): round numbers, and every doubling one or two steps
const snapTokens = (x) => {
  const k = Math.floor(x + 1e-9);
  return x - k > 0.25 ? Math.round(3 * 2 ** (k - 1)) : Math.round(2 ** k);
};
// the N slider and, in place of its readout, N typed exactly (any whole number of tokens; the slider then
// stands at the nearest position); show(N) sets both
function tokensSlider(min, max, onInput) {
  const c = rangeControl("N", {
    min, max, step: 0.5, title: "sequence length, log scale: powers of two, and 1.5 times them between; or type N",
    onInput: (x) => onInput(snapTokens(x)),
  });
  const exact = el("input", { type: "number", min: "1", step: "1", inputmode: "numeric", "aria-label": "N, exactly",
    title: "N, tokens: type any whole number" });
  exact.addEventListener("change", () => {
    const n = Math.round(Number(exact.value));
    if (Number.isFinite(n) && n >= 1) onInput(n);
  });
  c.out.replaceWith(exact);
  c.exact = exact;
  c.show = (N) => {
    c.input.value = String(Math.log2(N));
    if (document.activeElement !== exact) exact.value = String(N);
  };
  return c;
}

function archControls(model, add, { withN, nLog2, withHkv, withL, onArch }) {
  const c = {};
  if (withN) {
    c.N = tokensSlider(nLog2[0], nLog2[1], (N) => commit(model, { N }));
    add(c.N.wrap);
  }
  let moved = null;  // the last d move that moved H: [d, H before, H after]
  c.d = rangeControl("d", {
    min: 64, max: 16384, step: 64, title: "model width d_model; H stays if it divides d, else moves to the divisor of d nearest it",
    onInput: (d) => {
      const before = model.get("H");
      const H = nearest(divisors(d), before);
      moved = H === before ? null : [d, before, H];
      const ch = { d, H };
      if (withHkv) ch.H_kv = nearest(divisors(H), model.get("H_kv"));
      commit(model, { ...ch, ...onArch(ch) });
    },
  });
  add(c.d.wrap);
  c.H = rangeControl("H", {
    min: 0, max: 1, step: 1, title: "query heads (the divisors of d)",
    onInput: (i) => {
      const H = divisors(model.get("d"))[i];
      moved = null;
      const ch = { H };
      if (withHkv) ch.H_kv = nearest(divisors(H), model.get("H_kv"));
      commit(model, { ...ch, ...onArch(ch) });
    },
  });
  add(c.H.wrap);
  // the rule that moves H with d, in words beside the sliders (and what the last d move did to H)
  const rule = el("div", { class: "al-note al-rule" });
  add(rule);
  if (withHkv) {
    c.H_kv = rangeControl("H_kv", {
      min: 0, max: 1, step: 1, title: "key/value heads (the divisors of H)",
      onInput: (i) => commit(model, { H_kv: divisors(model.get("H"))[i], ...onArch({}) }),
    });
    add(c.H_kv.wrap);
  }
  if (withL) {
    c.L = rangeControl("L", { min: 1, max: 128, step: 1, title: "layers", onInput: (L) => commit(model, { L, ...onArch({}) }) });
    add(c.L.wrap);
  }
  c.sync = () => {
    if (c.N) c.N.show(model.get("N"));
    const d = model.get("d");
    const H = model.get("H");
    if (moved && (moved[0] !== d || moved[2] !== H)) moved = null;
    rule.textContent = "H follows d: a new d keeps H if H divides it, else takes the divisor of d nearest H"
      + (withHkv ? " (H_kv follows H the same way)" : "") + ". To double d and H, move d, then H."
      + (moved ? ` Just now: ${moved[1]} does not divide ${d.toLocaleString("en-US")}, so H became ${moved[2]}.` : "");
    c.d.input.value = String(d);
    c.d.out.textContent = String(d);
    const hs = divisors(d);
    c.H.input.max = String(hs.length - 1);
    c.H.input.value = String(Math.max(hs.indexOf(H), 0));
    const D = model.get("D");  // the explorer's head dim (a preset's, MLA's too); else d / H
    c.H.out.textContent = `${H} (D=${D === undefined || D === null ? +(d / H).toFixed(2) : D})`;
    if (c.H_kv) {
      const kvs = divisors(H);
      c.H_kv.input.max = String(kvs.length - 1);
      c.H_kv.input.value = String(Math.max(kvs.indexOf(model.get("H_kv")), 0));
      c.H_kv.out.textContent = String(model.get("H_kv"));
    }
    if (c.L) {
      c.L.input.value = String(model.get("L"));
      c.L.out.textContent = String(model.get("L"));
    }
  };
  return c;
}

// One GPU's memory (the Explorer's serving box, the "does it fit" widget): a menu of accelerators that sets
// the memory nvidia-smi reports for each (spec.accelerators, in MiB: exact bytes), the memory typed exactly in
// GB, GiB or MiB, and the allowance for the allocator (percent of the memory held back). add(control) places
// each; sync(state) shows the state.
function memoryControls(model, spec, add, memLabel) {
  const accs = spec.accelerators || {};
  const match = (mem, unit) => Object.keys(accs).find((k) => accs[k].mem === Number(mem) && accs[k].mem_unit === unit) || "";
  const memIn = el("input", { type: "number", min: "0.001", step: "any", "aria-label": memLabel, inputmode: "decimal" });
  const unitText = { GB: "GB (10^9 B)", GiB: "GiB (2^30 B)", MiB: "MiB (nvidia-smi)" };
  const unit = el("select", { "aria-label": "memory unit" }, Object.keys(spec.switches.mem_unit).map((k) => el("option", { value: k, text: unitText[k] || k })));
  const gpu = selectControl("GPU", [
    ...Object.keys(accs).map((k) => [k, `${k} (${accs[k].mem.toLocaleString("en-US")} ${accs[k].mem_unit})`,
      `${k}: ${accs[k].mem.toLocaleString("en-US")} ${accs[k].mem_unit}, the total nvidia-smi reports`]),
    ["", "other: type its memory below"],
  ], (name) => {
    memIn.blur();  // a memory being typed is taken first (its change event), then the menu's
    if (name in accs) commit(model, { accelerator: name, mem: accs[name].mem, mem_unit: accs[name].mem_unit });
    else {
      commit(model, { accelerator: "" });
      memIn.focus();
    }
  });
  gpu.input.setAttribute("aria-label", "accelerator");
  gpu.wrap.title = "a GPU sold as \u201c80 GB\u201d has 80 GiB of memory: the menu fills in the total nvidia-smi reports";
  memIn.addEventListener("change", () => {
    const x = Number(memIn.value);
    if (x > 0) commit(model, { mem: x, accelerator: match(x, model.get("mem_unit")) });
  });
  unit.addEventListener("change", () => commit(model, { mem_unit: unit.value, accelerator: match(model.get("mem"), unit.value) }));
  // CUDA's total is below nvidia-smi's: 81,106 against 81,559 MiB on an H100 80GB HBM3 (the sources are in
  // attn_core/symbols.py, ACCELERATORS)
  const memHelp = el("div", { class: "al-why", text: "one GPU's total, as nvidia-smi (MiB) or torch.cuda.mem_get_info() reports it" });
  const memControl = el("div", { class: "al-control al-select", title: "Memory per GPU, as nvidia-smi reports it (MiB) or torch.cuda.mem_get_info()[1] (bytes; divide by 2^30 for GiB, about 0.4 GiB below nvidia-smi's total). A GPU sold as \u201c80 GB\u201d has 80 GiB, not 80 x 10^9 bytes (74.5 GiB)." },
    [el("label", { text: "memory" }), el("span", { class: "al-mem" }, [memIn, unit]), memHelp]);
  const allowIn = el("input", { type: "number", min: "0", max: "99", step: "any", inputmode: "decimal", "aria-label": "allowance for the allocator (%)" });
  allowIn.addEventListener("change", () => {
    const x = Number(allowIn.value);
    if (allowIn.value !== "" && x >= 0 && x < 100) commit(model, { allowance: x });
    else allowIn.value = String(model.get("allowance"));
  });
  const allowControl = el("div", { class: "al-control al-select", title: "Held back for PyTorch's caching allocator: it keeps freed blocks reserved, so a run reserves more than its tensors. The calibration page compares reserved readings less 10% with the prediction. 0 compares the tensors with the whole memory." },
    [el("label", { text: "allowance" }), el("span", { class: "al-mem" }, [allowIn, el("span", { text: "% of the memory" })]),
      el("div", { class: "al-why", text: "for the allocator's cache (reserved, not counted as tensors)" })]);
  add(gpu.wrap);
  add(memControl);
  add(allowControl);
  return {
    sync(state) {
      const name = model.get("accelerator");
      showOption(gpu.input, name === undefined || name === null ? match(state.mem, state.mem_unit) : name);
      if (document.activeElement !== memIn) memIn.value = String(state.mem);
      unit.value = state.mem_unit;
      if (document.activeElement !== allowIn) allowIn.value = String(state.allowance);
    },
  };
}

// the architecture traits a preset sets (attn_core.widgets.model_traits)
const ARCH = ["d", "H", "H_kv", "L", "D", "D_v", "rope_dim", "q_lora", "F", "ffn", "window", "kv_latent"];

// which ledger: the teaching model or what autograd saves, and the dropout mask's bytes
function savedControls(model, spec, add) {
  const saved = selectControl("ledger", Object.keys(spec.switches.saved).map((k) => optionLabel(spec, "saved", k)), (v) => commit(model, { saved: v }));
  add(saved.wrap);
  const mask = selectControl("dropout mask", Object.keys(spec.switches.mask).map((k) => optionLabel(spec, "mask", k)), (v) => commit(model, { mask: v }));
  const why = el("div", { class: "al-why" });
  mask.wrap.appendChild(why);
  add(mask.wrap);
  return {
    sync(state) {
      showOption(saved.input, state.saved);
      showOption(mask.input, state.mask);
      // the mask's bytes count only in autograd's ledger with dropout: elsewhere the menu changes nothing
      const off = state.saved === "teaching" ? "teaching ledger: its dropout multiplier takes the dtype's bytes"
        : !state.dropout ? "no dropout, no mask" : "";
      mask.input.disabled = !!off;
      mask.wrap.classList.toggle("al-off", !!off);
      mask.wrap.title = off ? `Changes nothing here (${off}); it counts in the ledger as autograd saves it, with dropout.` : "";
      why.textContent = off;
    },
  };
}

// why a ledger item is empty under these settings (the row is greyed with it)
function emptyItemReason(name, state) {
  if (name === "P_drop") return state.saved === "teaching" ? "autograd's ledger only" : "no dropout";
  if (name === "dropout") return "no dropout";
  if (name === "S") return "autograd does not keep S";
  if (name === "O") return "autograd does not keep O: the next layer does";
  return "not kept here";
}

function memoryView(model, root, spec) {
  const recipe = spec.widgets.memory;
  const controls = el("div", { class: "al-controls" });
  const add = (w) => controls.appendChild(w);
  const c = archControls(model, add, { withN: true, nLog2: [6, 17], withHkv: false, withL: false, onArch: () => ({}) });
  const dtype = selectControl("dtype", Object.keys(spec.dtype_bytes).map((k) => [k, `${k} (${spec.dtype_bytes[k]} B)`]), (v) => commit(model, { dtype: v }));
  add(dtype.wrap);
  const drop = checkControl("attention dropout", (v) => commit(model, { dropout: v }));
  add(drop.wrap);
  const saved = savedControls(model, spec, add);
  const rows = [
    ...recipe.items.map(([name, , label]) => [`item.${name}`, label, fmtBytes]),
    ["linear_bytes", "linear in N", fmtBytes],
    ["quadratic_bytes", "quadratic in N", fmtBytes],
    ["total_bytes", "total, eager", fmtBytes],
    ["fused_bytes", "total, fused (FlashAttention)", fmtBytes],
    ["eager_over_fused", "eager / fused", fmtRatio],
    ["quadratic_share", "quadratic share of the total", fmtPct],
    ["n_star", "memory crossover N*_{mem} (tokens)", fmtInt],
  ];
  const ro = readouts(rows);
  const figs = el("div", { class: "al-figures" });
  root.append(el("div", { class: "al-title", text: "The memory ledger of one attention layer (training, kept for backward)" }), controls, ro.box, figs);
  return {
    update(state) {
      c.sync();
      dtype.input.value = state.dtype;
      drop.input.checked = !!state.dropout;
      saved.sync(state);
      const v = computeValues(spec, "memory", state);
      ro.update(v);
      for (const [name] of recipe.items) ro.dim(`item.${name}`, v[`item.${name}`] === 0 ? emptyItemReason(name, state) : null);
      const bars = [
        { label: "eager", parts: recipe.items.map(([name, , label]) => ({ label, color: COLORS[name], value: v[`item.${name}`] })) },
        { label: "fused", parts: recipe.items.filter((it) => it[3] === "linear").map(([name, , label]) => ({ label, color: COLORS[name], value: v[`item.${name}`] })) },
      ];
      const legend = recipe.items.map(([name, , label]) => ({ label: label.replace(/ \[.*\]$/, ""), color: COLORS[name] }));
      const pts = sweep(spec, "memory", state, 64, 131072);
      const eager = pts.map(([n, p]) => [n, p.total_bytes]);
      const fused = pts.map(([n, p]) => [n, p.fused_bytes]);
      const [ymin, ymax] = logRange([...eager, ...fused].map((p) => p[1]));
      figs.innerHTML = stackedBars({
        w: 400, h: 310, bars, legend, ylabel: "activation memory",
        title: `one layer at N = ${fmtTokens(state.N)}`,
      }) + lineChart({
        w: 500, h: 310, xlog: true, ylog: true, xmin: 64, xmax: 131072, ymin, ymax,
        title: `d = ${state.d}, H = ${state.H}, ${state.dtype}, B = ${state.B}`,
        xlabel: "sequence length N (tokens, log scale)", ylabel: "activation memory, one layer (log)",
        xticks: logTicks(64, 131072, 2, 7, fmtTokens), yticks: logTicks(ymin, ymax, 2, 7, (y) => fmtBytes(y, true)),
        series: [
          { label: `eager (${state.saved === "autograd" ? "as autograd saves it" : "teaching ledger"})`, color: COLORS.eager, pts: eager },
          { label: "fused (FlashAttention)", color: COLORS.fused, pts: fused },
        ],
        vlines: [
          { x: v.n_star, label: `N*_{mem} = ${fmtInt(v.n_star)}`, color: COLORS.mark },
          { x: state.N, label: `N = ${fmtTokens(state.N)}`, color: COLORS.now, dash: "2 2" },
        ],
      });
    },
  };
}

function flopsView(model, root, spec) {
  const controls = el("div", { class: "al-controls" });
  const add = (w) => controls.appendChild(w);
  // presets: the models with per-head K and V (MLA's are the explorer's)
  const names = Object.keys(spec.models).filter((k) => !spec.models[k].kv_latent);
  const FLOPS_ARCH = ["d", "H", "H_kv", "F", "ffn"];
  const preset = selectControl("model", [...names.map((k) => [k, k]), ["custom", "custom"]], (name) => {
    if (name in spec.models) {
      const arch = {};
      for (const k of FLOPS_ARCH) arch[k] = spec.models[name][k];
      commit(model, { model: name, ...arch });
    } else {
      commit(model, { model: "custom" });
    }
  });
  preset.wrap.classList.add("al-wide");
  add(preset.wrap);
  // moving a slider makes the model "custom"; moving d keeps the ratio F / d
  const onArch = (ch) => ("d" in ch
    ? { model: "custom", F: Math.max(1, Math.round((model.get("F") / model.get("d")) * ch.d)) }
    : { model: "custom" });
  const c = archControls(model, add, { withN: true, nLog2: [8, 20], withHkv: true, withL: false, onArch });
  const F = rangeControl("F / d", {
    min: 0.5, max: 8, step: 0.125, title: "FFN width over the model width",
    onInput: (x) => commit(model, { F: Math.max(1, Math.round(x * model.get("d"))), model: "custom" }),
  });
  add(F.wrap);
  const ffn = selectControl("FFN", Object.keys(spec.switches.ffn).map((k) => [k, `${k} (${spec.switches.ffn[k].m_ffn} matrices)`]), (v) => commit(model, { ffn: v, model: "custom" }));
  add(ffn.wrap);
  const causal = checkControl("causal kernel (skips the masked half)", (v) => commit(model, { causal: v }));
  add(causal.wrap);
  const ro = readouts([
    ["linear_flops", "linear FLOPs at N (projections + FFN)", fmtFlops],
    ["quadratic_flops", "quadratic FLOPs at N (QK^T, PV)", fmtFlops],
    ["quadratic_share", "quadratic share at N", fmtPct],
    ["n_star", "FLOPs crossover N*_{FLOPs}, whole layer", fmtInt],
    ["quadratic_share_attention", "quadratic share at N, attention block", fmtPct],
    ["n_star_attention", "FLOPs crossover N*_{FLOPs}, attention block", fmtInt],
    ["d_head", "head dimension D = d / H", (x) => String(+x.toFixed(2))],
  ]);
  const note = el("div", { class: "al-note" });
  note.innerHTML = subHtml("H does not change the quadratic FLOPs: H heads of N^2 D each make N^2 d. Fewer key/value heads (H_kv < H) shrink the K and V projections, so N*_{FLOPs} comes earlier.");
  const figs = el("div", { class: "al-figures" });
  root.append(el("div", { class: "al-title", text: "The FLOPs of one transformer layer: linear against quadratic in N" }), controls, ro.box, note, figs);
  return {
    update(state) {
      c.sync();
      preset.input.value = model.get("model");
      F.input.value = String(state.F / state.d);
      F.out.textContent = `${state.F.toLocaleString("en-US")} (${+(state.F / state.d).toFixed(3)} d)`;
      ffn.input.value = state.ffn;
      causal.input.checked = !!state.causal;
      const v = computeValues(spec, "flops", state);
      ro.update(v);
      const pts = sweep(spec, "flops", state, 256, 1048576);
      const lin = pts.map(([n, p]) => [n, p.linear_flops]);
      const quad = pts.map(([n, p]) => [n, p.quadratic_flops]);
      const [ymin, ymax] = logRange([...lin, ...quad].map((p) => p[1]));
      const marks = [
        { x: v.n_star, label: `N*_{FLOPs} = ${fmtInt(v.n_star)}`, color: COLORS.eager },
        { x: state.N, label: `N = ${fmtTokens(state.N)}`, color: COLORS.now, dash: "2 2" },
      ];
      figs.innerHTML = lineChart({
        w: 470, h: 310, xlog: true, ylog: true, xmin: 256, xmax: 1048576, ymin, ymax,
        title: `forward FLOPs of one layer, d = ${state.d}, H_kv = ${state.H_kv}, F = ${state.F}`,
        xlabel: "sequence length N (tokens, log scale)", ylabel: "FLOPs (log scale)",
        xticks: logTicks(256, 1048576, 2, 7, fmtTokens), yticks: logTicks(ymin, ymax, 10, 7, (y) => fmtFlops(y, true)),
        series: [
          { label: `linear: projections + ${state.ffn} FFN`, color: COLORS.fused, pts: lin },
          { label: `quadratic: QK^T and PV${state.causal ? " (causal)" : ""}`, color: COLORS.eager, pts: quad },
        ],
        vlines: marks,
      }) + lineChart({
        w: 470, h: 310, xlog: true, ylog: false, xmin: 256, xmax: 1048576, ymin: 0, ymax: 100,
        title: `quadratic share, ffn = ${state.ffn}${state.causal ? ", causal" : ""}`,
        xlabel: "sequence length N (tokens, log scale)", ylabel: "quadratic share of FLOPs (%)",
        xticks: logTicks(256, 1048576, 2, 7, fmtTokens), yticks: [0, 25, 50, 75, 100].map((y) => [y, `${y}%`]),
        hlines: [{ y: 50, color: "#999" }],
        series: [
          { label: "whole layer (with FFN)", color: COLORS.eager, pts: pts.map(([n, p]) => [n, 100 * p.quadratic_share]) },
          { label: "attention block alone", color: COLORS.attn, dash: "6 3", pts: pts.map(([n, p]) => [n, 100 * p.quadratic_share_attention]) },
        ],
        vlines: [marks[0], { x: v.n_star_attention, label: `N*_{FLOPs} = ${fmtInt(v.n_star_attention)}, attention`, color: COLORS.attn }, marks[1]],
      });
    },
  };
}

function explorerView(model, root, spec) {
  const controls = el("div", { class: "al-controls" });
  const add = (w) => controls.appendChild(w);
  const presetNames = Object.keys(spec.models);
  const preset = selectControl("model", [...presetNames.map((k) => [k, k]), ["custom", "custom"]], (name) => {
    if (name in spec.models) {
      const p = spec.models[name];
      const arch = {};
      for (const k of ARCH) arch[k] = p[k];
      commit(model, { model: name, base: name, ...arch });
    } else {
      commit(model, { model: "custom" });
    }
  });
  preset.wrap.classList.add("al-wide");
  add(preset.wrap);
  // moving an architecture slider makes the model "custom" (its weights keep the last preset's vocabulary,
  // norms, biases and experts: the base trait); moving d or H sets D = d / H and
  // keeps the FFN width ratio F / d
  const onArch = (ch) => {
    const out = { model: "custom" };
    if ("d" in ch || "H" in ch) {
      const d = ch.d ?? model.get("d");
      const H = ch.H ?? model.get("H");
      out.D = Math.floor(d / H);
      out.D_v = out.D;
      if ("d" in ch) out.F = Math.max(1, Math.round((model.get("F") / model.get("d")) * d));
    }
    return out;
  };
  const c = archControls(model, add, { withN: true, nLog2: [8, 20], withHkv: true, withL: true, onArch });
  const users = rangeControl("users B", {
    min: 1, max: 256, step: 1, title: "B: sequences of N tokens at once, the users served; every memory readout counts all B",
    onInput: (B) => commit(model, { B }),
  });
  add(users.wrap);
  const dtype = selectControl("dtype", Object.keys(spec.dtype_bytes).map((k) => [k, `${k} (${spec.dtype_bytes[k]} B)`]), (v) => commit(model, { dtype: v }));
  add(dtype.wrap);
  const causal = checkControl("causal kernel (half the N x N FLOPs)", (v) => commit(model, { causal: v }));
  add(causal.wrap);
  const drop = checkControl("attention dropout", (v) => commit(model, { dropout: v }));
  add(drop.wrap);
  const saved = savedControls(model, spec, add);
  const info = el("div", { class: "al-note" });
  const ro = readouts([
    ["n_star_flops", "FLOPs crossover N*_{FLOPs} (whole layer)", fmtInt],
    ["n_star_flops_attention", "FLOPs crossover N*_{FLOPs} (attention block)", fmtInt],
    ["quadratic_share", "quadratic share of FLOPs at N", fmtPct],
    ["n_star_memory", "memory crossover N*_{mem} (activations)", fmtInt],
    ["act_layer_eager", "activations per layer, eager", fmtBytes],
    ["act_layer_fused", "activations per layer, fused", fmtBytes],
    ["act_eager", "activations x L layers, eager", fmtBytes],
    ["act_fused", "activations x L layers, fused", fmtBytes],
    ["eager_over_fused", "eager / fused", fmtRatio],
    ["kv_bytes_per_token", "KV cache per token (all layers)", fmtBytes],
    ["kv_cache_bytes", "KV cache at N, all B users", fmtBytes],
    ["linear_state_bytes", "linear-attention state (any N)", fmtBytes],
    ["kv_over_state", "KV cache / linear state", fmtRatio],
    ["n_star_kv_state", "N where the KV cache passes the state", fmtInt],
  ]);
  // serving: the weights held once, the users' KV caches, against an accelerator's memory less the allowance
  const serveControls = el("div", { class: "al-controls" });
  const memory = memoryControls(model, spec, (w) => serveControls.appendChild(w), "accelerator memory");
  let shown = null;  // the state shown: the serving readouts write bytes in its memory unit
  const inMem = (x) => (x === null ? "n/a" : fmtMem(x, shown, spec));
  const serveRo = readouts([
    ["params", "parameters", fmtInt],
    ["weights_bytes", "weights (held once)", inMem],
    ["kv_bytes_per_user", "KV cache of one user at N", inMem],
    ["kv_cache_bytes", "KV caches of the B users", inMem],
    ["serving_bytes", "weights + KV caches", inMem],
    ["mem_bytes", "memory of the accelerator", inMem],
    ["usable_bytes", "usable after the allowance", inMem],
    ["users_max", "most users that fit at N", (x) => (x === null ? "n/a" : x.toLocaleString("en-US"))],
  ]);
  const serveVerdict = el("div", { class: "al-verdict", role: "status" });
  const serveNote = el("div", { class: "al-note" });
  const serving = el("div", { class: "al-serving" }, [
    el("div", { class: "al-subtitle", text: "Serving: weights + KV cache x users, on one accelerator" }),
    serveControls, serveVerdict, serveRo.box, serveNote]);
  const figs = el("div", { class: "al-figures" });
  // the time crossover, measured by the running kernel
  const button = el("button", { type: "button", text: "measure on this machine" });
  const status = el("span", { class: "al-status" });
  const result = el("div");
  const measure = el("div", { class: "al-measure" }, [
    el("div", { class: "al-note", text: "Time crossover: causal softmax attention (torch SDPA) against chunked linear attention, timed in the running kernel with this model's D." }),
    button, status, result,
  ]);
  let waiting = null;
  const noKernel = () => {
    status.textContent = "needs a running kernel (open the notebook in JupyterLab or Colab and run it)";
    button.disabled = false;
  };
  if (model.get("_static_page")) {
    // no kernel will answer in the book: say so at once, and offer nothing to click
    button.disabled = true;
    button.title = "This page has no Python kernel: run the notebook in JupyterLab or Colab to measure.";
    status.textContent = "Disabled here: this page has no Python kernel. Open the notebook in JupyterLab or Colab (the launch buttons at the top) to time it on your machine.";
  }
  button.addEventListener("click", () => {
    if (model.get("_static_page")) {
      noKernel();
      return;
    }
    status.textContent = "asking the kernel...";
    button.disabled = true;
    try {
      model.send({ type: "measure" });
    } catch (err) {
      noKernel();
      return;
    }
    clearTimeout(waiting);
    waiting = setTimeout(noKernel, 3000);
  });
  const showMeasured = () => {
    const s = model.get("measure_status");
    if (s) {
      clearTimeout(waiting);
      status.textContent = s === "running" ? "measuring (a few seconds)..." : s === "done" ? "done" : s;
      button.disabled = s === "running";
    }
    const m = model.get("measured") || {};
    if (!m.N || !m.N.length) {
      result.innerHTML = "";
      return;
    }
    const rows = m.N.map((n, i) => `<tr><td>${fmtTokens(n)}</td><td>${(1e3 * m.softmax_s[i]).toFixed(2)}</td><td>${(1e3 * m.linear_s[i]).toFixed(2)}</td><td>${(m.softmax_s[i] / m.linear_s[i]).toFixed(2)}</td></tr>`).join("");
    const x = m.crossover_N;
    const when = model.get("_static_page") ? "<div class=\"al-note\">Measured when this page was built, on the machine that built it:</div>" : "";
    result.innerHTML = `${when}<table><tr><th>N</th><th>softmax (ms)</th><th>linear (ms)</th><th>softmax / linear</th></tr>${rows}</table>`
      + `<div>time crossover: <span class="al-measured">${x === null ? `not reached by N = ${fmtTokens(m.N[m.N.length - 1])}` : `N = ${fmtInt(x)}`}</span> (D = ${m.D}, ${m.heads} heads, chunk ${m.chunk})</div>`;
  };
  model.on("change:measure_status", showMeasured);
  model.on("change:measured", showMeasured);
  root.append(el("div", { class: "al-title", text: "Explorer: where the crossovers land for one model" }), controls, info, ro.box, serving, figs, measure);
  showMeasured();
  return {
    update(state) {
      c.sync();
      preset.input.value = model.get("model");
      dtype.input.value = state.dtype;
      causal.input.checked = !!state.causal;
      drop.input.checked = !!state.dropout;
      saved.sync(state);
      users.input.value = String(state.B);
      users.out.textContent = String(state.B);
      memory.sync(state);
      const name = model.get("model");
      const src = name in spec.models ? spec.models[name].source : "";
      // the preset's source: a link when it is an http(s) URL, else its words
      let url = null;
      try {
        const u = new URL(src);
        if (u.protocol === "http:" || u.protocol === "https:") url = u.href;
      } catch (err) {
        url = null;
      }
      const link = url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: "the model's config.json" }) : null;
      info.replaceChildren(
        `${name}: d = ${state.d}, H = ${state.H}, H_kv = ${state.H_kv}, D = ${state.D}, L = ${state.L}, FFN ${state.ffn} of width ${state.F}`
        + (state.window ? `, sliding window ${state.window} tokens` : "")
        + (state.kv_latent ? `, MLA latent of ${state.kv_latent} values per token and layer` : "")
        + (src ? " (" : ""),
        ...(link ? [link] : src ? [src] : []),
        (src ? ")" : "") + ". "
        + (state.saved === "teaching"
          ? "Activations: the attention core's teaching ledger of chapter 5 (S, P and the dropout multiplier kept, no FFN)."
          : "Activations: the attention core as autograd saves it (chapter 5; no FFN).")
        + " A whole training step keeps more items (norms, the FFN), and a fused kernel keeps no N x N tensor:"
        + " chapter 10's \"does it fit\" widget counts a whole block as PyTorch keeps it, so its numbers differ from these.",
      );
      const v = computeValues(spec, "explorer", state);
      ro.update(v);
      shown = state;
      serveRo.update(v);
      const users1 = state.B === 1 ? "1 user" : `${state.B} users`;
      const verb = state.B === 1 ? ["fits", "does not fit"] : ["fit", "do not fit"];
      serveVerdict.setAttribute("data-verdict", v.serving_fits ? "fits" : "over");
      const of = usableWords(v, state, spec);
      serveVerdict.textContent = v.serving_fits
        ? `${users1} at N = ${fmtTokens(state.N)} ${verb[0]}: ${inMem(v.serving_bytes)} of ${of}; at most ${fmtInt(v.users_max)} users fit.`
        : !v.weights_fit
          ? `Does not fit: the weights alone, ${inMem(v.weights_bytes)}, take more than ${of}; split the model over several accelerators.`
          : v.users_max === 0
            ? `Does not fit: beside the weights, ${inMem(v.weights_bytes)}, not even one user's cache fits in ${of}.`
          : `${users1} at N = ${fmtTokens(state.N)} ${verb[1]}: ${inMem(v.serving_bytes)}, more than ${of}; at most ${fmtInt(v.users_max)} users fit.`;
      const base = state.base;
      const vocab = spec.models[base] ? spec.models[base].symbols.n_vocab : 0;
      // the CUDA context's size: see fitView's note
      serveNote.textContent = (name === "custom" ? `Weights: the shape set here, with ${base}'s vocabulary, norms, biases and experts. ` : "")
        + (vocab ? "" : `${base} has no vocabulary (a teaching construction), so its weights are its blocks' only: no embeddings or output head. `)
        + `Every weight (every expert of a mixture) and every cache in ${state.dtype}; not counted: the activations of the step being computed, the framework's workspace, the CUDA context (some 0.3 to 0.5 GiB). The allowance holds back ${+Number(state.allowance).toFixed(2)}% of the memory for the allocator's cache and fragmentation.`;
      const pts = sweep(spec, "explorer", state, 256, 1048576);
      const series = [
        { label: `activations x ${state.L} layers, eager`, color: COLORS.eager, pts: pts.map(([n, p]) => [n, p.act_eager]) },
        { label: `activations x ${state.L} layers, fused`, color: COLORS.fused, pts: pts.map(([n, p]) => [n, p.act_fused]) },
        { label: "KV cache", color: COLORS.kv, pts: pts.map(([n, p]) => [n, p.kv_cache_bytes]) },
        { label: "linear-attention state", color: COLORS.state, dash: "6 3", pts: pts.map(([n, p]) => [n, p.linear_state_bytes]) },
      ];
      const [ymin, ymax] = logRange(series.flatMap((s) => s.pts.map((p) => p[1])));
      const now = { x: state.N, label: `N = ${fmtTokens(state.N)}`, color: COLORS.now, dash: "2 2" };
      figs.innerHTML = lineChart({
        w: 470, h: 320, xlog: true, ylog: true, xmin: 256, xmax: 1048576, ymin, ymax,
        title: `memory of ${state.B === 1 ? "one sequence" : `B = ${state.B} sequences`} (${state.dtype})`,
        xlabel: "sequence length N (tokens, log scale)", ylabel: "bytes (log scale)",
        xticks: logTicks(256, 1048576, 2, 7, fmtTokens), yticks: logTicks(ymin, ymax, 2, 7, (y) => fmtBytes(y, true)),
        series,
        vlines: [{ x: v.n_star_memory, label: `N*_{mem} = ${fmtInt(v.n_star_memory)}`, color: COLORS.eager }, now],
      }) + lineChart({
        w: 470, h: 320, xlog: true, ylog: false, xmin: 256, xmax: 1048576, ymin: 0, ymax: 100,
        title: `FLOPs of one layer (${state.ffn} FFN${state.causal ? ", causal" : ""})`,
        xlabel: "sequence length N (tokens, log scale)", ylabel: "quadratic share of FLOPs (%)",
        xticks: logTicks(256, 1048576, 2, 7, fmtTokens), yticks: [0, 25, 50, 75, 100].map((y) => [y, `${y}%`]),
        hlines: [{ y: 50, color: "#999" }],
        series: [{ label: "quadratic share of layer FLOPs", color: COLORS.eager, pts: pts.map(([n, p]) => [n, 100 * p.quadratic_share]) }],
        vlines: [{ x: v.n_star_flops, label: `N*_{FLOPs} = ${fmtInt(v.n_star_flops)}`, color: COLORS.eager }, now],
      });
    },
  };
}

// the training step: does it fit on the accelerators, and if not, the cheapest change that makes it fit
const PHASE_NAMES = { forward: "end of forward (the loss)", forward_last: "the loss, last pipeline stage",
  backward: "backward (the last block)", backward_end: "end of backward", step: "optimizer step" };
const FIT_ITEMS = [["weights", "weights"], ["gradients", "gradients"], ["optimizer", "optimizer state"],
  ["activations", "activations"], ["logits", "logits and loss"], ["buffers", "buffers"]];

// one horizontal bar of the items at the peak (HTML: it reads at any width), a line at the usable memory and,
// hatched after it, the allowance for the allocator up to the whole memory
function fitBar(v, state, spec) {
  const top = Math.max(v.total_bytes, v.mem_bytes) * 1.04;
  const pct = (x) => `${((100 * x) / top).toFixed(2)}%`;
  const f = (x) => fmtMem(x, state, spec);
  const segs = FIT_ITEMS.filter(([key]) => v[`${key}_bytes`] > 0).map(([key, label]) => {
    const x = v[`${key}_bytes`];
    return `<div class="al-seg" style="width:${pct(x)};background:${COLORS[key]}" title="${esc(`${label}: ${f(x)}`)}"></div>`;
  });
  const side = (x) => (x / top > 0.6 ? "al-left" : "");
  const allowance = v.mem_bytes - v.usable_bytes;
  const line = allowance > 0 ? `usable ${f(v.usable_bytes)} of ${f(v.mem_bytes)}` : `memory ${f(v.mem_bytes)}`;
  return `<div class="al-hbar" role="img" aria-label="${esc(`the items at the peak, ${f(v.total_bytes)}, against ${usableWords(v, state, spec)}`)}">`
    + `<div class="al-track">${segs.join("")}</div>`
    + (allowance > 0 ? `<div class="al-allow" style="left:${pct(v.usable_bytes)};width:${pct(allowance)}" title="${esc(`allowance for the allocator: ${f(allowance)}`)}"></div>` : "")
    + `<div class="al-memline" style="left:${pct(v.usable_bytes)}"></div>`
    + `<span class="al-memlabel ${side(v.usable_bytes)}" style="left:${pct(v.usable_bytes)}">${esc(line)}</span>`
    + `<span class="al-peaklabel ${side(v.total_bytes)}" style="left:${pct(v.total_bytes)}">peak ${esc(f(v.total_bytes))}</span></div>`;
}

function fitView(model, root, spec) {
  const F = spec.fit;
  const sw = spec.switches;
  const top = el("div", { class: "al-controls" });
  const more = el("div", { class: "al-controls" });
  // a menu of one of spec.switches' menus, its options' words from spec.labels (others: their values)
  const menu = (box, label, options, trait, switchName, cast) => {
    const s = selectControl(label, options.map((k) => (switchName ? optionLabel(spec, switchName, k) : [k, String(k)])),
      (x) => commit(model, { [trait]: cast ? cast(x) : x }));
    box.appendChild(s.wrap);
    return s;
  };
  const check = (box, label, trait) => {
    const c = checkControl(label, (x) => commit(model, { [trait]: x }));
    box.appendChild(c.wrap);
    return c;
  };
  // tensor parallelism splits heads and key/value heads; a pipeline the layers
  const tpDegrees = (f) => divisors(f.num_heads, 64).filter((k) => f.num_kv_heads % k === 0);
  const ppDegrees = (f) => divisors(f.num_layers, 64);
  const keepDegrees = (f) => ({
    tp: tpDegrees(f).includes(Number(model.get("tp"))) ? Number(model.get("tp")) : 1,
    pp: ppDegrees(f).includes(Number(model.get("pp"))) ? Number(model.get("pp")) : 1,
  });

  // the model: a preset, or a pasted config.json read in the page
  let pasted = null;
  const names = Object.keys(F.models);
  const preset = selectControl("model", [...names.map((k) => [k, k]), [F.pasted, "paste a config.json ..."]], (name) => {
    if (name !== F.pasted) {
      commit(model, { model: name, config: {}, ...keepDegrees(F.models[name]) });
    } else if (pasted) {
      commit(model, { model: F.pasted, config: pasted, ...keepDegrees(readModelConfig(pasted, F)) });
    } else {
      paste.open = true;
      area.focus();
    }
  });
  preset.wrap.classList.add("al-wide");
  top.appendChild(preset.wrap);
  const area = el("textarea", { rows: "5", spellcheck: "false", "aria-label": "config.json",
    placeholder: '{"model_type": "qwen2", "hidden_size": 3584, ...}: a config.json from a model\'s page on the Hugging Face Hub' });
  const pasteError = el("div", { class: "al-error", role: "alert" });
  const paste = el("details", { class: "al-paste" }, [el("summary", { text: "Paste a config.json (any model of the families below)" }), area, pasteError]);
  paste.appendChild(el("div", { class: "al-note", text: `Read in the page by the rules Python reads: ${Object.keys(F.hf_families).join(", ")}.` }));
  area.addEventListener("input", () => {
    const text = area.value.trim();
    if (!text) return void (pasteError.textContent = "");
    try {
      const cfg = JSON.parse(text);
      const fields = readModelConfig(cfg, F);
      pasted = cfg;
      pasteError.textContent = "";
      commit(model, { model: F.pasted, config: cfg, ...keepDegrees(fields) });
    } catch (err) {
      pasteError.textContent = err instanceof SyntaxError ? `not JSON yet: ${err.message}` : err.message;
    }
  });

  const N = tokensSlider(8, 20, (x) => commit(model, { N: x }));
  top.appendChild(N.wrap);
  const B = rangeControl("batch", { min: 1, max: 64, step: 1, title: "micro-batch: sequences per GPU and step", onInput: (x) => commit(model, { B: x }) });
  top.appendChild(B.wrap);
  const dp = rangeControl("GPUs", { min: 0, max: 10, step: 1, title: "data-parallel GPUs (log scale); TP, CP and PP multiply them", onInput: (x) => commit(model, { dp: 2 ** x }) });
  top.appendChild(dp.wrap);
  const memory = memoryControls(model, spec, (w) => top.appendChild(w), "memory per GPU");
  const zero = menu(top, "ZeRO", Object.keys(sw.zero), "zero", "zero", Number);
  const recompute = menu(top, "recompute", Object.keys(sw.recompute), "recompute", "recompute");
  const finetune = menu(top, "training", Object.keys(sw.finetune), "finetune", "finetune");

  // more settings, folded
  const precision = menu(more, "precision", Object.keys(sw.precision), "precision", "precision");
  const optimizer = menu(more, "optimizer", Object.keys(sw.optimizer), "optimizer", "optimizer");
  const impl = menu(more, "opt. step", Object.keys(sw.optimizer_impl), "optimizer_impl", "optimizer_impl");
  const inBwd = check(more, "step in backward", "optimizer_in_backward");
  const tp = menu(more, "TP", [1], "tp", null, Number);
  tp.input.setAttribute("aria-label", "TP degree");
  const seq = check(more, "sequence parallel", "sequence_parallel");
  const cp = menu(more, "CP", [1, 2, 4, 8, 16, 32, 64], "cp", null, Number);
  cp.input.setAttribute("aria-label", "CP degree");
  const pp = menu(more, "PP", [1], "pp", null, Number);
  pp.input.setAttribute("aria-label", "PP degree");
  const attention = menu(more, "attention", Object.keys(sw.attention), "attention", "attention");
  const kernels = menu(more, "kernels", Object.keys(sw.kernels), "kernels", "kernels");
  const loss = menu(more, "loss", Object.keys(sw.loss), "loss", "loss");
  const offload = check(more, "offload checkpoints", "offload");
  const drop = check(more, "attention dropout", "dropout");
  const rank = menu(more, "LoRA rank", [4, 8, 16, 32, 64, 128, 256], "lora_rank", null, Number);
  const loraDrop = check(more, "LoRA dropout", "lora_dropout");
  const quantize = menu(more, "QLoRA base", Object.keys(sw.quantize), "quantize", "quantize");
  const targets = {};
  const targetBox = el("span", { class: "al-targets" });
  for (const m of F.lora_modules) {
    const box = el("input", { type: "checkbox", "aria-label": `LoRA on ${m}` });
    box.addEventListener("change", () => {
      const now = new Set(model.get("lora_modules"));
      if (box.checked) now.add(m);
      else if (now.size > 1) now.delete(m);
      commit(model, { lora_modules: F.lora_modules.filter((x) => now.has(x)) });
    });
    targets[m] = box;
    targetBox.appendChild(el("label", {}, [box, el("span", { text: m })]));
  }
  const targetControl = { wrap: el("div", { class: "al-control al-wide al-select" }, [el("label", { text: "LoRA on" }), targetBox]),
    inputs: Object.values(targets) };
  more.appendChild(targetControl.wrap);
  // any other menu of training_memory: a plain menu (or a box for true / false)
  const shown = new Set(["precision", "optimizer", "optimizer_impl", "optimizer_in_backward", "sequence_parallel",
    "attention", "kernels", "loss", "offload", "dropout", "lora_dropout", "recompute", "finetune", "zero", "quantize", "mem_unit"]);
  const others = Object.entries(spec.widgets.fit.switches).filter(([, trait]) => !shown.has(trait)).map(([menuName, trait]) => {
    const opts = Object.keys(sw[menuName]);
    const label = trait.replace(/_/g, " ");
    const bool = opts.length === 2 && opts.includes("true") && opts.includes("false");
    return [trait, bool, bool ? check(more, label, trait) : menu(more, label, opts, trait, menuName)];
  });
  // the controls that the other settings can make change nothing (fitOff), greyed with the reason
  const offControls = { lora_rank: rank, lora_modules: targetControl, lora_dropout: loraDrop, quantize, offload,
    sequence_parallel: seq };
  const moreBox = el("details", { class: "al-more" }, [el("summary", { text: "More settings: precision, optimizer, TP, CP, PP, kernels, loss, LoRA" }), more]);

  const verdict = el("div", { class: "al-verdict", role: "status" });
  const bar = el("div", { class: "al-barbox" });
  const legend = el("div", { class: "al-legend" });
  const spans = {};
  for (const [key, label] of FIT_ITEMS) {
    const span = el("span", { "data-key": `${key}_bytes` });
    spans[key] = span;
    legend.appendChild(el("span", { class: "al-item" }, [el("i", { style: `background:${COLORS[key]}` }), el("span", { text: `${label} ` }), span]));
  }
  const advice = el("div", { class: "al-advice" });
  let now = null;  // the state shown: the readouts write bytes in its memory unit
  const mem = (x) => fmtMem(x, now, spec);
  const ro = readouts([
    ["total_bytes", "peak per GPU", mem],
    ["usable_bytes", "usable per GPU (memory less the allowance)", mem],
    ["mem_bytes", "memory per GPU", mem],
    ["state_bytes", "training state alone (no token)", mem],
    ["n_max", "longest N that fits", (x) => (x === null || x < 1 ? "none" : `${fmtInt(fitLongestN({ n_max: x }, now))} tokens`)],
    ["params", "parameters", fmtInt],
    ["params_per_rank", "parameters per GPU", fmtInt],
    ["devices", "GPUs in all (DP x TP x CP x PP)", fmtInt],
  ]);
  const phases = el("div", { class: "al-phases" });
  const info = el("div", { class: "al-note" });
  root.append(el("div", { class: "al-title", text: "Does it fit? A training step on your GPUs" }), top, paste, moreBox,
    verdict, bar, legend, advice, ro.box, phases, info);

  return {
    update(state) {
      const name = model.get("model");
      preset.input.value = name;
      preset.input.options[preset.input.options.length - 1].textContent = state.config && Object.keys(state.config).length
        ? `config.json: ${readModelConfig(state.config, F).name}` : "paste a config.json ...";
      let fields;
      try {
        fields = fitModelFields(spec, state.model, state.config);
      } catch (err) {
        verdict.textContent = err.message;
        return;
      }
      N.show(state.N);
      B.input.value = String(state.B);
      B.out.textContent = String(state.B);
      memory.sync(state);
      dp.input.value = String(Math.round(Math.log2(state.dp)));
      dp.out.textContent = String(state.dp);
      for (const [c, value] of [[zero, state.zero], [recompute, state.recompute], [finetune, state.finetune],
        [precision, state.precision], [optimizer, state.optimizer], [impl, state.optimizer_impl], [cp, state.cp],
        [attention, state.attention], [kernels, state.kernels], [loss, state.loss], [rank, state.lora_rank],
        [quantize, state.quantize]]) showOption(c.input, value);
      inBwd.input.checked = !!state.optimizer_in_backward;
      for (const [menuOf, degrees, value] of [[tp, tpDegrees(fields), state.tp], [pp, ppDegrees(fields), state.pp]]) {
        if (menuOf.input.options.length !== degrees.length || degrees.some((k, i) => Number(menuOf.input.options[i].value) !== k)) {
          menuOf.input.replaceChildren(...degrees.map((k) => el("option", { value: k, text: String(k) })));
        }
        menuOf.input.value = String(value);
      }
      seq.input.checked = !!state.sequence_parallel;
      offload.input.checked = !!state.offload;
      drop.input.checked = !!state.dropout;
      loraDrop.input.checked = !!state.lora_dropout;
      for (const [trait, bool, c] of others) {
        if (bool) c.input.checked = !!state[trait];
        else showOption(c.input, state[trait]);
      }
      const off = fitOff(state, spec);
      for (const [trait, c] of Object.entries(offControls)) setOff(c, off[trait] || null);
      for (const [m, box] of Object.entries(targets)) {
        box.checked = state.lora_modules.includes(m);
        box.disabled = !!off.lora_modules || (m === "gate" && fields.ffn !== "swiglu") || (fields.num_experts > 0 && ["gate", "up", "down"].includes(m));
      }

      const v = computeValues(spec, "fit", state);
      now = state;
      const said = fitVerdict(v, state, spec);
      verdict.textContent = said.text;
      verdict.setAttribute("data-verdict", said.kind);
      bar.innerHTML = fitBar(v, state, spec);
      for (const [key, span] of Object.entries(spans)) {
        const x = v[`${key}_bytes`];
        span.textContent = fmtMem(x, state, spec);
        span.setAttribute("data-value", String(x));
        span.parentElement.style.display = x > 0 ? "" : "none";
      }
      ro.update(v);
      const longest = fitLongestN(v, state);
      const at = `The peak: ${PHASE_NAMES[F.phases[v.peak_phase]] || F.phases[v.peak_phase]}.`;
      if (v.fits) {
        advice.setAttribute("data-change", "none");
        advice.textContent = `Nothing to change. ${at}`;
      } else {
        const { tried, best } = cheapestChange(spec, state);
        advice.setAttribute("data-change", best ? JSON.stringify(best.change) : "none");
        const list = tried.map((t) => `<li data-fits="${t.fits}"><b>${esc(t.label)}</b>: ${esc(t.cost)}. `
          + `${esc(fmtMem(t.peak, state, spec))} at the peak: ${t.fits ? "fits" : "still over"}.</li>`).join("");
        advice.innerHTML = (best
          ? `<b>Cheapest change that makes it fit:</b> ${esc(best.label)} (${esc(best.cost)}): ${esc(fmtMem(best.peak, state, spec))} at the peak.`
          : `<b>No single change below makes it fit:</b> combine them, or add GPUs.${tried.length ? ` Closest: ${esc(tried.reduce((a, b) => (b.peak < a.peak ? b : a)).label)}.` : ""}`)
          + ` ${at}`
          + (v.state_bytes > v.usable_bytes ? " No sequence length fits as it is: the training state alone is over."
            : ` As it is, the longest N that fits is ${fmtInt(longest)} tokens.`)
          + (tried.length ? `<details class="al-tried"><summary>Changes tried, cheapest first (${tried.length})</summary>`
            + `<div class="al-note">${esc(FIT_ORDER)}</div><ol>${list}</ol></details>` : "");
      }
      // each phase's total (the last pipeline stage's only with a pipeline)
      const rows = F.phases.map((p, i) => [p, i]).filter(([p]) => p !== "forward_last" || Number(state.pp) > 1);
      phases.innerHTML = `<table><tr><th>the step's phases</th><th>total</th></tr>${rows.map(([p, i]) => `<tr${i === v.peak_phase ? ' class="al-peak"' : ""}><td>${esc(PHASE_NAMES[p] || p)}${i === v.peak_phase ? " (peak)" : ""}</td><td data-key="phase.${p}" data-value="${v[`phase.${p}`]}">${esc(fmtMem(v[`phase.${p}`], state, spec))}</td></tr>`).join("")}</table>`;
      const moe = fields.num_experts ? `, ${fields.num_experts} experts (${fields.experts_per_token} a token)` : "";
      const mla = fields.kv_lora_rank ? ", MLA" : "";
      const a = +Number(state.allowance).toFixed(2);
      // the CUDA context: 287,047,680 bytes with lazy module loading (pytorch/pytorch pull request 86509, which
      // made it PyTorch's default), "around 400MB" (pytorch/pytorch issue 109888)
      info.textContent = `${name === F.pasted ? `${fields.name} (pasted)` : name}: L = ${fields.num_layers}, d = ${fields.d_model}, H = ${fields.num_heads}, H_kv = ${fields.num_kv_heads}, vocabulary ${fmtInt(fields.vocab_size)}${moe}${mla}.`
        + " Per GPU, on the busiest: the step's peak over its phases (end of forward, backward, optimizer step), the tensors only."
        + (a > 0 ? ` It is compared with the memory less ${a}% held back for the allocator's cache of freed blocks, which a reserved reading includes.`
          : " It is compared with the whole memory: no allowance for the allocator's cache.")
        + (state.cp > 1 && state.N % state.cp ? " N does not split evenly over the CP ranks: the values are their average." : "")
        + (fields.num_experts && state.finetune !== "full" ? " LoRA adapts the attention of a mixture of experts only." : "")
        + " Not counted: the CUDA context (some 0.3 to 0.5 GiB, outside PyTorch's allocator), communication libraries' buffers.";
    },
  };
}

const VIEWS = { memory: memoryView, flops: flopsView, explorer: explorerView, fit: fitView };

function render({ model, el: host }) {
  const spec = model.get("spec");
  const kind = model.get("kind");
  const root = document.createElement("div");
  root.className = `al-widget al-${kind}`;
  // keys typed in the widget (arrows on a slider) are the widget's: JupyterLab must not also
  // take them as notebook shortcuts, which swallows them before the slider moves
  root.addEventListener("keydown", (event) => event.stopPropagation());
  host.appendChild(root);
  if (!spec || !spec.widgets || !VIEWS[kind]) {
    root.textContent = "attn_core widget: no formula spec in the widget state.";
    return undefined;
  }
  useStyle(spec);
  const view = VIEWS[kind](model, root, spec);
  let queued = false;
  const refresh = () => {
    if (queued) return;
    queued = true;
    queueMicrotask(() => {
      queued = false;
      const t0 = performance.now();
      view.update(stateOf(model, spec, kind));
      root.setAttribute("data-render-ms", (performance.now() - t0).toFixed(2));
    });
  };
  // the traits the view reads besides the formulas' (the model menu, the menu of accelerators)
  const recipe = spec.widgets[kind];
  const traits = new Set([...stateTraits(recipe), "model", ...(recipe.accelerator ? [recipe.accelerator] : [])]);
  for (const t of traits) model.on(`change:${t}`, refresh);
  refresh();
  return () => {
    for (const t of traits) model.off(`change:${t}`, refresh);
  };
}

export default { render };
